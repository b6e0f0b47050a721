//! The pager: opens or atomically creates the file, locks it, picks the valid meta, keeps the
//! read map ahead of the file, and writes pages and metas through [`Storage`].

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{PagerError, Result};
use crate::flusher::Flusher;
use crate::lock::try_lock;
use crate::map::{Advice, Map};
use crate::meta::{ManifestRun, Meta, MetaSlot, FORMAT_VERSION, META_SIZE};
use crate::page::{run_checksum, stored_checksum, PageHeader, PAGE_HEADER_SIZE};
use crate::storage::{first_hole, CacheFolios, FileStorage, Storage, WriteMode};
use crate::{valid_page_size, PageId, MAX_FILE_BYTES, MAX_PAGE_SIZE, MIN_PAGE_SIZE};

/// How to open a file.
#[derive(Clone, Copy, Debug)]
pub struct PagerOptions {
    /// Page size for a new file (an existing file keeps its own).
    pub page_size: usize,
    /// How pages are written.
    pub write_mode: WriteMode,
    /// madvise for the read map.
    pub advice: Advice,
    /// Page-cache folios for the pages written ([`Storage::set_cache_folios`]).
    pub cache_folios: CacheFolios,
    /// Open without write access, under a shared lock.
    pub read_only: bool,
    /// Create the file if it does not exist.
    pub create: bool,
    /// When the newest commit was durable (the file was closed cleanly after it) but its
    /// pages no longer verify, open at the commit before it instead of failing, and say what
    /// was discarded in [`OpenedMetas::discarded`].
    pub fall_back_on_damage: bool,
    /// How the data file itself is flock'ed.
    pub flock: FileLock,
    /// Another process has the file open and is keeping it consistent (the lock file says
    /// so): take the newest meta whose checksum holds, without the recovery steps (manifest
    /// check, fsync, discarding a damaged meta) that only a first opener may do.
    pub live: bool,
}

/// The flock a handle takes on the data file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileLock {
    /// Exclusive for a read-write handle, shared for a read-only one: one process at a time
    /// may write, and nobody reads while it does (a handle without a lock file).
    ByMode,
    /// Shared for every handle: processes coordinate through the lock file.
    Shared,
    /// Exclusive for every handle (a read-only handle that could not attach to the lock file
    /// keeps every other handle out).
    Exclusive,
}

impl Default for PagerOptions {
    fn default() -> Self {
        PagerOptions {
            page_size: 4096,
            write_mode: WriteMode::Pwrite,
            advice: Advice::default(),
            cache_folios: CacheFolios::Small,
            read_only: false,
            create: true,
            fall_back_on_damage: false,
            flock: FileLock::ByMode,
            live: false,
        }
    }
}

/// What open found in the two meta slots.
#[derive(Clone, Debug)]
pub struct OpenedMetas {
    /// The valid meta with the highest txid: the state the database opens at.
    pub current: Meta,
    /// The other slot: its meta, or why it is not valid.
    pub other: std::result::Result<Meta, String>,
    /// True when the other slot holds something that is neither a valid meta nor a never
    /// written (all-zero) page, i.e. open had to ignore a damaged or torn meta.
    pub other_damaged: bool,
    /// A durable commit that open skipped because its pages are damaged (only with
    /// [`PagerOptions::fall_back_on_damage`]): what it was and why.
    pub discarded: Option<String>,
    /// The other slot holds a meta with a higher txid whose checksum holds but whose commit
    /// does not verify (a commit cut short, or a damaged one discarded): open fell back from
    /// it. A read-write open that shares the file with other processes erases it (they open
    /// live, without the manifest check, and would take it).
    pub newer_unverified: bool,
}

/// One open database file.
#[derive(Debug)]
pub struct Pager {
    path: PathBuf,
    storage: Box<dyn Storage>,
    page_size: usize,
    map: Mutex<Arc<Map>>,
    advice: Advice,
    read_only: bool,
    /// Shared with a background flush, which sets it when its fdatasync fails.
    poisoned: Arc<AtomicBool>,
    file_len: AtomicU64,
    counters: IoCounters,
    /// The thread that runs background flushes, once one has started
    /// ([`Pager::start_background_flush`]). Locked by a sync throughout, so that none
    /// starts while it runs.
    flush: Mutex<Option<Flusher>>,
    /// Syncs started, foreground and background: each takes the next number
    /// ([`Pager::next_sync`]).
    syncs_started: AtomicU64,
    /// The highest number of a sync that succeeded: every write made before it started is
    /// durable ([`Pager::synced_since`]). Shared with the background flush.
    synced_through: Arc<AtomicU64>,
    /// The storage can sync on another thread ([`Storage::background_sync`]).
    flushes_in_background: bool,
    /// The file's name may not be durable yet: how to make it so
    /// ([`Pager::sync_name_at_next_sync`]).
    name_unsynced: Mutex<Option<SyncName>>,
}

/// fsyncs the directory that holds a file's name ([`Pager::sync_name_at_next_sync`]).
pub struct SyncName(pub Box<dyn Fn() -> std::io::Result<()> + Send + Sync>);

impl std::fmt::Debug for SyncName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SyncName")
    }
}

/// What this handle has asked of the storage, for benchmarks and tests.
#[derive(Debug, Default)]
pub struct IoCounters {
    /// Calls to `Storage::write_at` (one per contiguous run of pages).
    pub write_calls: AtomicU64,
    /// Bytes passed to `Storage::write_at`.
    pub bytes_written: AtomicU64,
    /// Calls to `Storage::sync`.
    pub syncs: AtomicU64,
    /// Background flushes started ([`Pager::start_background_flush`]).
    pub background_flushes: AtomicU64,
    /// Metas written durable by themselves ([`Pager::write_meta_durable`]).
    pub durable_meta_writes: AtomicU64,
    /// Waits for a background flush to end ([`Pager::wait_background_flush`]).
    pub flush_waits: AtomicU64,
}

impl Pager {
    /// Open `path`, creating it (atomically: a crash leaves no file or a valid empty
    /// database) if it is missing and `opts.create` is set.
    pub fn open(path: &Path, opts: PagerOptions) -> Result<(Pager, OpenedMetas)> {
        Self::open_wrapped(path, opts, &|file, mode| {
            Box::new(FileStorage::new(file, mode))
        })
    }

    /// [`Pager::open`], with the opened file's writes going through the storage `wrap` makes
    /// of it (tests record them).
    pub fn open_wrapped(
        path: &Path,
        opts: PagerOptions,
        wrap: &dyn Fn(File, WriteMode) -> Box<dyn Storage>,
    ) -> Result<(Pager, OpenedMetas)> {
        if !valid_page_size(opts.page_size) {
            return Err(PagerError::InvalidPageSize(opts.page_size));
        }
        // The file, not the name: compaction later renames over this path (resolve_path).
        let resolved = resolve_path(path)?;
        let path = resolved.as_path();
        if !path.exists() {
            if opts.read_only || !opts.create {
                return Err(PagerError::io(
                    "open",
                    path,
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
                ));
            }
            create_file(path, opts.page_size)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            .open(path)
            .map_err(|e| PagerError::io("open", path, e))?;
        let storage = wrap(file, opts.write_mode);
        Self::open_storage(path, storage, opts)
    }

    /// Open a database whose writes go through `storage` (tests use a recording storage).
    pub fn open_storage(
        path: &Path,
        storage: Box<dyn Storage>,
        opts: PagerOptions,
    ) -> Result<(Pager, OpenedMetas)> {
        storage.set_cache_folios(opts.cache_folios);
        let exclusive = match opts.flock {
            FileLock::ByMode => !opts.read_only,
            FileLock::Shared => false,
            FileLock::Exclusive => true,
        };
        match try_lock(storage.file(), exclusive) {
            Ok(true) => {}
            Ok(false) => {
                return Err(PagerError::Locked {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(PagerError::io("flock", path, e)),
        }
        // Only under the lock may the file be judged empty: a second opener racing this one
        // fails on the lock above rather than initialising it too.
        let mut file_len = storage.len().map_err(|e| PagerError::io("stat", path, e))?;
        let metas = match read_metas(
            path,
            storage.file(),
            file_len,
            opts.fall_back_on_damage,
            opts.live,
        ) {
            Ok(metas) => metas,
            Err(e @ PagerError::NotADatabase { .. }) => {
                let Some(blank) = uninitialised(storage.file(), file_len) else {
                    return Err(e);
                };
                if opts.read_only || !opts.create {
                    return Err(PagerError::NotADatabase {
                        path: path.to_path_buf(),
                        reason: blank.refusal(opts.read_only),
                    });
                }
                file_len = initialise(path, storage.as_ref(), opts.page_size)?;
                read_metas(
                    path,
                    storage.file(),
                    file_len,
                    opts.fall_back_on_damage,
                    false,
                )?
            }
            Err(e) => return Err(e),
        };
        let page_size = metas.current.page_size as usize;
        if !opts.read_only && !opts.live {
            // With other processes opening the file live (no manifest check: they trust
            // every meta whose checksum holds), a newer meta this open fell back from must
            // go: they would take it, torn pages and all.
            if metas.discarded.is_some()
                || (metas.newer_unverified && opts.flock == FileLock::Shared)
            {
                discard_damaged_meta(path, storage.as_ref(), &metas.current)?;
            }
            // What we read may sit only in the page cache (a process that crashed before its
            // sync); make it durable before building on it as the durable fallback.
            storage
                .sync()
                .map_err(|e| PagerError::io("fdatasync", path, e))?;
        }
        let map = Map::new(storage.file(), reservation(file_len), false, opts.advice)
            .map_err(|e| PagerError::io("mmap", path, e))?;
        let flushes_in_background = !opts.read_only && storage.syncs_in_background();
        let pager = Pager {
            path: path.to_path_buf(),
            storage,
            page_size,
            map: Mutex::new(Arc::new(map)),
            advice: opts.advice,
            read_only: opts.read_only,
            poisoned: Arc::new(AtomicBool::new(false)),
            name_unsynced: Mutex::new(None),
            file_len: AtomicU64::new(file_len),
            counters: IoCounters::default(),
            flush: Mutex::new(None),
            syncs_started: AtomicU64::new(0),
            synced_through: Arc::new(AtomicU64::new(0)),
            flushes_in_background,
        };
        Ok((pager, metas))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file (for its identity: device, inode, link count).
    pub fn file(&self) -> &File {
        self.storage.file()
    }

    /// The file's page size.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Opened without write access?
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// The current read map. A snapshot keeps the `Arc` for its whole life, so the mapping it
    /// reads from is never unmapped under it.
    pub fn map(&self) -> Arc<Map> {
        self.map.lock().clone()
    }

    /// The file length in bytes as last grown or truncated by this handle.
    pub fn file_len(&self) -> u64 {
        self.file_len.load(Ordering::Acquire)
    }

    /// Fail if a sync failed earlier, or the file is read-only.
    pub fn check_writable(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(PagerError::Poisoned {
                path: self.path.clone(),
            });
        }
        if self.read_only {
            return Err(PagerError::ReadOnly {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// Writes and syncs this handle has made.
    pub fn counters(&self) -> &IoCounters {
        &self.counters
    }

    fn count_write(&self, bufs: &[&[u8]]) {
        let n: usize = bufs.iter().map(|b| b.len()).sum();
        self.counters.write_calls.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_written
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Has a sync or a meta write failed on this handle?
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Make sure the file holds at least `pages` pages, growing it ahead in chunks (so most
    /// commits do not change its size) and the map reservation with it.
    pub fn ensure_pages(&self, pages: PageId) -> Result<()> {
        self.ensure_pages_ahead(pages, u64::MAX)
    }

    /// [`Pager::ensure_pages`], growing at most `most_ahead` bytes past what it needs: for
    /// a writer that grows the file a little at a time towards an end it does not know yet
    /// (a long append writing its leaves before the commit), so the file does not keep 1/8
    /// of itself allocated past its last page once that writer stops.
    pub fn ensure_pages_ahead(&self, pages: PageId, most_ahead: u64) -> Result<()> {
        self.check_writable()?;
        let need = pages.checked_mul(self.page_size as u64).ok_or_else(|| {
            PagerError::io("grow", &self.path, std::io::Error::other("file too large"))
        })?;
        if need > MAX_FILE_BYTES {
            // Pages past the map could be written (the file may be longer) but never read back.
            return Err(PagerError::io(
                "grow",
                &self.path,
                std::io::Error::other(format!(
                    "file would grow past {MAX_FILE_BYTES} bytes, the most larch maps"
                )),
            ));
        }
        let cur = self.file_len();
        if need <= cur {
            return Ok(());
        }
        let step = growth_step(cur).min(most_ahead);
        let ps = self.page_size as u64;
        let target = need.max(cur + step).min(MAX_FILE_BYTES).div_ceil(ps) * ps;
        if let Err(e) = self.storage.set_len(target) {
            // The chunk may not fit where the pages themselves would.
            self.storage
                .set_len(need)
                .map_err(|_| PagerError::io("grow file", &self.path, e))?;
            self.file_len.store(need, Ordering::Release);
        } else {
            self.file_len.store(target, Ordering::Release);
        }
        self.remap_if_needed()
    }

    /// Shrink the file to `pages` pages. The caller guarantees no snapshot reaches past it.
    pub fn truncate(&self, pages: PageId) -> Result<()> {
        self.check_writable()?;
        let len = pages * self.page_size as u64;
        self.storage
            .set_len(len)
            .map_err(|e| PagerError::io("truncate", &self.path, e))?;
        self.file_len.store(len, Ordering::Release);
        Ok(())
    }

    /// Read the file's length again (another process may have grown or shrunk it) and extend
    /// the map if it grew past the reservation. Old maps stay valid for their snapshots.
    pub fn refresh_len(&self) -> Result<u64> {
        let len = self
            .storage
            .len()
            .map_err(|e| PagerError::io("stat", &self.path, e))?;
        self.file_len.store(len, Ordering::Release);
        self.remap_if_needed()?;
        Ok(len)
    }

    /// The meta in the slot commit `txid` uses, if that slot holds commit `txid` whole (its
    /// checksum holds and its high-water mark fits in the file). Another process's writer may
    /// be rewriting the slot for `txid + 2`: then this returns `None`.
    pub fn read_meta_of(&self, txid: crate::TxId) -> Result<Option<Meta>> {
        let off = MetaSlot::for_txid(txid).page() * self.page_size as u64;
        let mut b = vec![0u8; META_SIZE];
        self.storage
            .file()
            .read_exact_at(&mut b, off)
            .map_err(|e| PagerError::io("read meta", &self.path, e))?;
        let Ok(m) = Meta::decode(&b) else {
            return Ok(None);
        };
        if m.txid != txid || m.page_size as usize != self.page_size {
            return Ok(None);
        }
        let len = self.file_len();
        let need = m.high_water.saturating_mul(m.page_size as u64);
        if need > len && need > self.refresh_len()? {
            return Ok(None);
        }
        if need > MAX_FILE_BYTES {
            return Ok(None);
        }
        Ok(Some(m))
    }

    /// The newest meta of the two slots whose checksum holds (no manifest check: for a file
    /// another process keeps consistent).
    pub fn read_newest_meta(&self) -> Result<Meta> {
        let len = self.refresh_len()?;
        read_metas(&self.path, self.storage.file(), len, false, true).map(|m| m.current)
    }

    fn remap_if_needed(&self) -> Result<()> {
        let len = self.file_len();
        let mut cur = self.map.lock();
        if (cur.len() as u64) >= len {
            return Ok(());
        }
        let map = Map::new(self.storage.file(), reservation(len), false, self.advice)
            .map_err(|e| PagerError::io("mmap", &self.path, e))?;
        *cur = Arc::new(map);
        Ok(())
    }

    /// Write `bufs` back to back starting at page `first`. The file must already hold them.
    pub fn write_pages(&self, first: PageId, bufs: &[&[u8]]) -> Result<()> {
        self.write_pages_as(first, bufs, false)
    }

    /// [`Pager::write_pages`]; `deferred`: no sync is waited for soon (an Async commit's
    /// pages), which `WriteMode::Hybrid` stores through the writable map
    /// ([`Storage::write_deferred`]).
    pub fn write_pages_as(&self, first: PageId, bufs: &[&[u8]], deferred: bool) -> Result<()> {
        self.check_writable()?;
        self.count_write(bufs);
        let offset = first * self.page_size as u64;
        let r = if deferred {
            self.storage.write_deferred(offset, bufs)
        } else {
            self.storage.write_at(offset, bufs)
        };
        r.map_err(|e| PagerError::io("write pages", &self.path, e))
    }

    /// [`Pager::write_pages_as`] for pages filled in key order and left full, which later
    /// commits seldom rewrite (a sorted append's): [`Storage::write_in_order`], which leaves
    /// them in large page-cache folios where [`CacheFolios::Small`] would bring them in a
    /// page at a time.
    pub fn write_pages_in_order(
        &self,
        first: PageId,
        bufs: &[&[u8]],
        deferred: bool,
    ) -> Result<()> {
        self.check_writable()?;
        self.count_write(bufs);
        let offset = first * self.page_size as u64;
        self.storage
            .write_in_order(offset, bufs, deferred)
            .map_err(|e| PagerError::io("write pages", &self.path, e))
    }

    /// Write `meta` into its slot (txid % 2). Not durable until [`Pager::sync`].
    pub fn write_meta(&self, meta: &Meta) -> Result<()> {
        self.write_meta_with_manifest(meta, &[])
    }

    /// Write `meta` followed by the manifest of pages its commit wrote (a one-fsync commit:
    /// recovery verifies those pages before trusting the meta).
    pub fn write_meta_with_manifest(&self, meta: &Meta, manifest: &[ManifestRun]) -> Result<()> {
        self.check_writable()?;
        let page = meta.encode_page(manifest, self.page_size);
        self.count_write(&[&page]);
        let slot = MetaSlot::for_txid(meta.txid);
        let r = self
            .storage
            .write_at(slot.page() * self.page_size as u64, &[&page]);
        if let Err(e) = r {
            // The meta may be on disk whole, torn or not at all, and open may pick it: the
            // writer can no longer tell which pages a fallback reaches, so, as after a failed
            // sync, nothing more is written until the file is reopened.
            self.poisoned.store(true, Ordering::Release);
            return Err(PagerError::io("write meta", &self.path, e));
        }
        Ok(())
    }

    /// Write `meta` (no manifest) into its slot and make that page durable before returning,
    /// without syncing anything else ([`Storage::write_durable`]): the meta of a commit whose
    /// pages a sync already made durable ([`Pager::synced_since`]). The file's name must be
    /// durable too (`synced_since` says so). A failure poisons the handle, as for
    /// [`Pager::write_meta`].
    pub fn write_meta_durable(&self, meta: &Meta) -> Result<()> {
        self.check_writable()?;
        let page = meta.encode_page(&[], self.page_size);
        self.count_write(&[&page]);
        self.counters
            .durable_meta_writes
            .fetch_add(1, Ordering::Relaxed);
        let slot = MetaSlot::for_txid(meta.txid);
        let r = self
            .storage
            .write_durable(slot.page() * self.page_size as u64, &[&page]);
        if let Err(e) = r {
            self.poisoned.store(true, Ordering::Release);
            return Err(PagerError::io("write meta durably", &self.path, e));
        }
        Ok(())
    }

    /// At a clean close, once commit `newest` is durable: record in the older meta slot that
    /// it was (its txid and checksum), then sync, so that open treats a later manifest
    /// mismatch of `newest` as damage rather than a torn commit (docs/format.md, "Torn or
    /// damaged"). Nothing to do when the older slot does not hold a valid older meta.
    pub fn mark_closed_at(&self, newest: crate::TxId) -> Result<()> {
        self.check_writable()?;
        let ps = self.page_size as u64;
        let newest_slot = MetaSlot::for_txid(newest).page();
        let older_slot = 1 - newest_slot;
        let file = self.storage.file();
        let read = |what, buf: &mut [u8], at: u64| {
            file.read_exact_at(buf, at)
                .map_err(|e| PagerError::io(what, &self.path, e))
        };
        let mut newer = vec![0u8; META_SIZE];
        read("read meta", &mut newer, newest_slot * ps)?;
        let crc = match Meta::decode(&newer) {
            Ok(m) if m.txid == newest => Meta::stored_crc(&newer).unwrap_or(0),
            _ => return Ok(()),
        };
        let mut page = vec![0u8; self.page_size];
        read("read meta", &mut page, older_slot * ps)?;
        let mut older = match Meta::decode(&page) {
            Ok(m) if m.txid < newest && m.page_size as usize == self.page_size => m,
            _ => return Ok(()),
        };
        if older.closed_at == newest && older.closed_at_crc == crc {
            return Ok(());
        }
        older.closed_at = newest;
        older.closed_at_crc = crc;
        page[..META_SIZE].copy_from_slice(&older.encode());
        self.count_write(&[&page]);
        if let Err(e) = self.storage.write_at(older_slot * ps, &[&page]) {
            self.poisoned.store(true, Ordering::Release);
            return Err(PagerError::io("write meta", &self.path, e));
        }
        self.sync()
    }

    /// Start an fdatasync of the file on another thread ([`Storage::background_sync`]),
    /// unless one is still running or the storage has none: `true` if started. Once it has
    /// succeeded, every write made before it started is durable ([`Pager::synced_since`] of
    /// its number): a durable point made in the background writes its meta only then
    /// (the engine's durability.rs, `Point`). Otherwise it writes back what was written so
    /// far so that the next [`Pager::sync`] finds less to write and the writer waits less.
    /// It shares the handle's open file description, so a write error it meets
    /// is reported to it alone: it poisons the handle, as a failed [`Pager::sync`] does, and
    /// a sync that ran meanwhile waits for it and fails too. None starts while a sync runs.
    /// Dropping the pager waits for it (it holds a duplicate of the descriptor, and with it
    /// the file's flock).
    pub fn start_background_flush(&self) -> bool {
        if self.read_only || self.is_poisoned() {
            return false;
        }
        // Held by a sync in progress, which writes back everything anyway.
        let Some(mut slot) = self.flush.try_lock() else {
            return false;
        };
        if slot.as_ref().is_some_and(Flusher::busy) {
            return false;
        }
        // A flush that failed since the check above poisoned the handle before it went idle.
        if self.is_poisoned() {
            return false;
        }
        let Some(job) = self.storage.background_sync() else {
            return false;
        };
        let flusher = match slot.as_mut() {
            Some(f) => f,
            None => match Flusher::spawn(self.poisoned.clone(), self.synced_through.clone()) {
                Ok(f) => slot.insert(f),
                Err(_) => return false,
            },
        };
        // Numbered before it starts: it writes back at least what was written before this.
        // (A number the thread never takes, when it has ended, only makes later syncs' larger.)
        let seq = self.syncs_started.fetch_add(1, Ordering::SeqCst) + 1;
        if !flusher.start(job, seq) {
            return false;
        }
        self.counters
            .background_flushes
            .fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Wait until no background flush runs ([`Pager::start_background_flush`]); what it
    /// found is recorded by then ([`Pager::synced_since`], or the handle is poisoned).
    pub fn wait_background_flush(&self) {
        if self.is_poisoned() {
            return;
        }
        self.counters.flush_waits.fetch_add(1, Ordering::Relaxed);
        // Test storage makes the sync it runs due at once: nothing else comes to end it.
        self.storage.flush_awaited();
        if let Some(f) = self.flush.lock().as_ref() {
            f.wait_idle();
        }
    }

    /// A sync numbered `n` or later succeeded and the handle is not poisoned, whether or not
    /// the file's name is durable yet ([`Pager::synced_since`] asks that too).
    pub fn synced_data_since(&self, n: u64) -> bool {
        !self.is_poisoned() && self.synced_through.load(Ordering::SeqCst) >= n
    }

    /// Make every write so far durable. A failure poisons the handle: the kernel may have
    /// dropped the dirty pages, so nothing written since the last good sync can be trusted.
    pub fn sync(&self) -> Result<()> {
        self.check_writable()?;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        // No background flush starts while this sync runs; one that ran meanwhile shares the
        // open file description, so a write error may have been reported to it instead of to
        // this sync: wait for it and look at what it found.
        let flush = self.flush.lock();
        let seq = self.syncs_started.fetch_add(1, Ordering::SeqCst) + 1;
        let r = self.storage.sync();
        if let Some(f) = flush.as_ref() {
            f.wait_idle();
        }
        drop(flush);
        if let Err(e) = r {
            self.poisoned.store(true, Ordering::Release);
            return Err(PagerError::io("fdatasync", &self.path, e));
        }
        if self.is_poisoned() {
            return Err(PagerError::io(
                "fdatasync",
                &self.path,
                std::io::Error::other("a background flush of the file failed"),
            ));
        }
        self.sync_name()?;
        self.synced_through.fetch_max(seq, Ordering::SeqCst);
        Ok(())
    }

    /// The number the next sync to start takes: once [`Pager::synced_since`] of it holds,
    /// every write made before this call is durable.
    pub fn next_sync(&self) -> u64 {
        self.syncs_started.load(Ordering::SeqCst) + 1
    }

    /// A sync numbered `n` or later ([`Pager::next_sync`]) succeeded, in the foreground or
    /// the background, the handle is not poisoned, and the file's name is durable (a
    /// background flush does not fsync the directory: [`Pager::sync_name_at_next_sync`]).
    pub fn synced_since(&self, n: u64) -> bool {
        self.synced_data_since(n) && self.name_unsynced.lock().is_none()
    }

    /// The storage syncs on another thread ([`Storage::syncs_in_background`]): what
    /// [`Pager::start_background_flush`] needs.
    pub fn syncs_in_background(&self) -> bool {
        self.flushes_in_background
    }

    /// If the file's name may not be durable yet ([`Pager::sync_name_at_next_sync`]), fsync
    /// its directory now; a failure poisons the pager. What was synced before is durable in
    /// the file but not under its name until this succeeds, so a caller about to report
    /// commits durable without a [`Pager::sync`] (none was waiting) must call it.
    pub fn sync_name(&self) -> Result<()> {
        let mut name = self.name_unsynced.lock();
        let Some(sync_name) = name.as_ref() else {
            // Nothing pending: no change for a read-only or poisoned handle either.
            return Ok(());
        };
        self.check_writable()?;
        if let Err(e) = (sync_name.0)() {
            // What this sync made durable has no durable name: as after a failed fdatasync,
            // nothing more is written until the file is reopened (whose open fsyncs the
            // directory again).
            self.poisoned.store(true, Ordering::Release);
            return Err(PagerError::io("fsync directory", &self.path, e));
        }
        *name = None;
        Ok(())
    }

    /// The file was just renamed or linked to its path and the directory fsync that makes
    /// the name durable failed: the next [`Pager::sync`] calls `sync_name` too, and fails
    /// (poisoning the pager) if that fails again, so no commit is reported durable under a
    /// name a power cut could undo.
    pub fn sync_name_at_next_sync(&self, sync_name: SyncName) {
        *self.name_unsynced.lock() = Some(sync_name);
    }

    /// A directory fsync is waiting for the next sync (`sync_name_at_next_sync`): commits
    /// durable in the file are not yet durable under its name.
    pub fn name_unsynced(&self) -> bool {
        self.name_unsynced.lock().is_some()
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        // The flush thread may hold a duplicate of the descriptor while it syncs: end it
        // (after that sync) before the storage closes, so the file and its flock are closed
        // when the pager is. Nothing else comes to end a sync of test storage then.
        if self.flush.get_mut().is_some() {
            self.storage.flush_awaited();
        }
        drop(self.flush.get_mut().take());
    }
}

/// Address space to reserve for a file of `len` bytes: well ahead, so remaps are rare.
fn reservation(len: u64) -> usize {
    let min = MIN_RESERVATION.load(Ordering::Relaxed);
    // A sparse file can be longer than 2^63 bytes (tmpfs allows it): no power of two is,
    // so past it the reservation is the most larch maps.
    let want = len
        .saturating_mul(2)
        .max(min)
        .checked_next_power_of_two()
        .unwrap_or(MAX_FILE_BYTES);
    want.min(MAX_FILE_BYTES) as usize
}

/// The newest meta of the database at `path` whose checksum holds (no manifest check, no lock,
/// nothing written): whether `path` is a larch database at all. Errors as an open's would be:
/// missing file, not a database, another format version.
pub fn probe_database(path: &Path) -> Result<Meta> {
    let file = File::open(path).map_err(|e| PagerError::io("open", path, e))?;
    let len = file
        .metadata()
        .map_err(|e| PagerError::io("stat", path, e))?
        .len();
    read_metas(path, &file, len, false, true).map(|m| m.current)
}

/// The least address space a read map reserves (1 GiB).
static MIN_RESERVATION: AtomicU64 = AtomicU64::new(1 << 30);

/// How far ahead of what it needs a file of `bytes` grows (`Pager::ensure_pages`), and the
/// slack a trim leaves: 1/8 of the file, 256 KiB to 64 MiB. Few growths, and a large file does
/// not carry hundreds of MB of allocated zeros (1/8 of a 1.6 GB file is 200 MB).
pub fn growth_step(bytes: u64) -> u64 {
    (bytes / 8).clamp(256 << 10, 64 << 20)
}

/// Make read maps made from now on reserve at least `bytes` (at least one page) instead of
/// 1 GiB, so that tests reach the remap on growth (a new map once the file outgrows the
/// reservation; old snapshots keep theirs) with small files. For tests only.
#[doc(hidden)]
pub fn set_min_map_reservation(bytes: u64) {
    MIN_RESERVATION.store(bytes.max(MAX_PAGE_SIZE as u64), Ordering::Relaxed);
}

/// Read both meta slots and choose the valid one with the highest txid.
fn read_metas(
    path: &Path,
    file: &File,
    file_len: u64,
    fall_back_on_damage: bool,
    live: bool,
) -> Result<OpenedMetas> {
    let not_db = |reason: String| PagerError::NotADatabase {
        path: path.to_path_buf(),
        reason,
    };
    if file_len < MIN_PAGE_SIZE as u64 {
        return Err(not_db(format!(
            "the file is {file_len} bytes, shorter than one {MIN_PAGE_SIZE}-byte page"
        )));
    }
    let read = |off: u64| -> Result<Vec<u8>> {
        let mut b = vec![0u8; META_SIZE];
        if off + META_SIZE as u64 > file_len {
            return Ok(Vec::new());
        }
        file.read_exact_at(&mut b, off)
            .map_err(|e| PagerError::io("read meta", path, e))?;
        Ok(b)
    };
    let check_len = |m: Meta| -> std::result::Result<Meta, String> {
        let need = m.high_water.checked_mul(m.page_size as u64);
        match need {
            Some(n) if n <= file_len && n <= MAX_FILE_BYTES => Ok(m),
            // Pages past the map cannot be read: a commit there could not be read back.
            Some(n) if n <= file_len => Err(format!(
                "meta {} says the file has {} pages of {} bytes, past the {MAX_FILE_BYTES} bytes larch maps",
                m.txid, m.high_water, m.page_size
            )),
            _ => Err(format!(
                "meta {} says the file has {} pages of {} bytes but it is {file_len} bytes (truncated?)",
                m.txid, m.high_water, m.page_size
            )),
        }
    };
    let raw0 = read(0)?;
    let zero = Meta::decode(&raw0).and_then(check_len);
    let mut raw1 = Vec::new();
    // Slot 1 sits one page in; if slot 0 cannot tell the page size, try every size and accept
    // a meta only where its own page size puts it.
    let mut one = Err("meta page 1 is missing".to_string());
    let sizes: Vec<usize> = match &zero {
        Ok(m) => vec![m.page_size as usize],
        Err(_) => (0..)
            .map(|i| MIN_PAGE_SIZE << i)
            .take_while(|&s| s <= MAX_PAGE_SIZE)
            .collect(),
    };
    for ps in sizes {
        let raw = read(ps as u64)?;
        let cand = Meta::decode(&raw).and_then(|m| {
            if m.page_size as usize == ps {
                Ok(m)
            } else {
                Err(format!(
                    "meta page 1 has page size {} but sits at offset {ps}",
                    m.page_size
                ))
            }
        });
        let cand = cand.and_then(check_len);
        let found = cand.is_ok();
        if found || one.is_err() {
            one = cand;
            raw1 = raw;
        }
        if found {
            break;
        }
    }
    // A one-fsync commit's meta is only as good as the pages it lists: verify them.
    let (zero_decoded, one_decoded) = (zero.clone(), one.clone());
    let txid_of = |m: &std::result::Result<Meta, String>| m.as_ref().map_or(0, |m| m.txid);
    let (zero_txid, one_txid) = (txid_of(&zero), txid_of(&one));
    let verify = |m: Meta, offset: u64| {
        if live {
            // The writer that wrote it is alive or left it whole in the page cache; the
            // first opener after a crash checked it (docs/format.md, "The lock file").
            return Ok(m);
        }
        verify_manifest(file, file_len, &m, offset).map_err(|u| (u.page, u.reason))
    };
    let torn = |txid: u64, why: &str| format!("commit {txid} did not fully reach the disk: {why}");
    let zero_verified = zero.map_err(|e| (None, e)).and_then(|m| verify(m, 0));
    let one_verified = one
        .map_err(|e| (None, e))
        .and_then(|m| verify(m, m.page_size as u64));
    // Torn or damaged (docs/format.md): a newest commit whose pages do not verify was cut
    // short by a crash, unless the older meta records a clean close right after it, which
    // proves it was durable: then its pages were damaged since.
    let mut discarded = None;
    for (newer, verified, raw, older) in [
        (&zero_decoded, &zero_verified, &raw0, &one_decoded),
        (&one_decoded, &one_verified, &raw1, &zero_decoded),
    ] {
        let (Ok(n), Err((page, why)), Ok(o)) = (newer, verified, older) else {
            continue;
        };
        if n.txid <= o.txid
            || o.closed_at != n.txid
            || Meta::stored_crc(raw) != Some(o.closed_at_crc)
        {
            continue;
        }
        let reason = format!(
            "commit {} was durable (the file was closed cleanly after it) but the pages it \
             wrote no longer verify: {why}",
            n.txid
        );
        if !fall_back_on_damage {
            return Err(PagerError::Corrupt {
                path: path.to_path_buf(),
                page: page.unwrap_or(0),
                reason: format!(
                    "{reason}; opening at commit {} instead would discard it (the \
                     fall-back-on-damage option, `larch check --fall-back`)",
                    o.txid
                ),
            });
        }
        discarded = Some(format!(
            "{reason}; opened at commit {}, discarding it",
            o.txid
        ));
    }
    let zero = zero_verified.map_err(|(p, e)| if p.is_some() { torn(zero_txid, &e) } else { e });
    let one = one_verified.map_err(|(p, e)| if p.is_some() { torn(one_txid, &e) } else { e });
    let one_blank = is_blank(&one);
    let (current, other, other_blank) = match (zero, one) {
        (Ok(a), Ok(b)) => {
            if a.page_size != b.page_size {
                return Err(not_db(
                    "the two meta pages disagree on the page size".into(),
                ));
            }
            if a.txid >= b.txid {
                (a, Ok(b), false)
            } else {
                (b, Ok(a), false)
            }
        }
        // Only slot 1 of a file that never committed is legitimately blank: slot 0 is written
        // at creation and slot 1 by the first commit. Any other zeroed slot is damage.
        (Ok(a), Err(e)) => (a, Err(e), one_blank && a.txid == 0),
        (Err(e), Ok(b)) => (b, Err(e), false),
        (Err(a), Err(b)) => {
            // A newer (or older) larch's file says so, rather than "no valid meta page".
            if let Some(found) = [&raw0, &raw1]
                .into_iter()
                .find_map(|r| Meta::foreign_version(r))
            {
                return Err(PagerError::UnsupportedVersion {
                    path: path.to_path_buf(),
                    found,
                    supported: FORMAT_VERSION,
                });
            }
            return Err(not_db(format!(
                "no valid meta page (page 0: {a}; page 1: {b})"
            )));
        }
    };
    let other_damaged = !other_blank && other.is_err();
    let newer_unverified = [&zero_decoded, &one_decoded]
        .into_iter()
        .any(|m| m.as_ref().is_ok_and(|m| m.txid > current.txid));
    Ok(OpenedMetas {
        current,
        other,
        other_damaged,
        discarded,
        newer_unverified,
    })
}

fn is_blank(r: &std::result::Result<Meta, String>) -> bool {
    matches!(r, Err(e) if e.contains("all zero"))
}

/// A read-write open that fell back over a damaged durable commit (on request) discards it
/// for good: a copy of the opened meta's page goes over the damaged meta's slot, so the next
/// open, with or without the option, opens here too instead of reporting the damage again.
/// A torn copy leaves that slot invalid, which open already ignores; the opened meta's own
/// slot is not touched. The next commit writes over the copy as usual.
fn discard_damaged_meta(path: &Path, storage: &dyn Storage, current: &Meta) -> Result<()> {
    let ps = current.page_size as u64;
    let at = MetaSlot::for_txid(current.txid).page() * ps;
    let mut page = vec![0u8; ps as usize];
    storage
        .file()
        .read_exact_at(&mut page, at)
        .map_err(|e| PagerError::io("read meta", path, e))?;
    let other = MetaSlot::for_txid(current.txid + 1).page() * ps;
    storage
        .write_at(other, &[&page])
        .map_err(|e| PagerError::io("write meta", path, e))
}

/// A file that holds no database and never held one, so a read-write open may make a new
/// database in it (docs/format.md, "Creating a database").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Uninitialised {
    /// 0 bytes: `touch`, or a temporary-file crate.
    Empty,
    /// What an initialisation cut short by a crash can leave: see [`uninitialised`].
    Interrupted,
}

impl Uninitialised {
    /// Why an open that may not initialise it refuses the file.
    fn refusal(self, read_only: bool) -> String {
        let what = match self {
            Uninitialised::Empty => "the file is empty (0 bytes)",
            Uninitialised::Interrupted => {
                "the file holds only part of a new database's first two pages (an interrupted initialisation)"
            }
        };
        if read_only {
            format!(
                "{what}, so there is nothing to read; a read-write open makes a new database in it"
            )
        } else {
            format!("{what}, and creating a database was not asked for")
        }
    }
}

/// Is the file, `len` bytes long, one a read-write open may initialise? Exactly 0 bytes, or
/// what [`initialise`] leaves if cut short: exactly two pages of some legal page size P, every
/// byte zero except in the first 128, and each of those zero or the byte the empty meta for P
/// has there. A database that committed even once has a meta in page 1 (the first commit
/// writes slot 1) or a txid in slot 0, so it never matches, however damaged its other pages
/// are; a short non-empty file that matches nothing here stays "not a larch database".
fn uninitialised(file: &File, len: u64) -> Option<Uninitialised> {
    if len == 0 {
        return Some(Uninitialised::Empty);
    }
    let page_size = usize::try_from(len / 2).ok()?;
    if 2 * page_size as u64 != len || !valid_page_size(page_size) {
        return None;
    }
    let mut image = vec![0u8; 2 * page_size];
    file.read_exact_at(&mut image, 0).ok()?;
    let empty = Meta::empty(page_size as u32).encode();
    let (head, rest) = image.split_at(META_SIZE);
    let blank =
        rest.iter().all(|&b| b == 0) && head.iter().zip(&empty).all(|(&b, &e)| b == 0 || b == e);
    blank.then_some(Uninitialised::Interrupted)
}

/// Make a new, empty database in the file `storage` writes, which the caller holds locked
/// exclusively and found [`uninitialised`]. The file keeps its inode (a rename over it would
/// leave the lock, and any other name of it, on the old one), so this cannot be atomic the way
/// [`create_file`] is; instead every state a crash can leave is one that [`uninitialised`]
/// accepts again: 0 bytes, then two pages of zeros, then the empty meta written into page 0.
/// Returns the new length.
fn initialise(path: &Path, storage: &dyn Storage, page_size: usize) -> Result<u64> {
    let io = |op| move |e| PagerError::io(op, path, e);
    let len = 2 * page_size as u64;
    // An interrupted initialisation at another page size goes first: shrinking it to the new
    // size would leave bytes of its meta that do not fit the new one.
    if storage.len().map_err(io("stat"))? != 0 {
        storage.set_len(0).map_err(io("truncate"))?;
    }
    storage.set_len(len).map_err(io("initialise empty file"))?;
    let meta = Meta::empty(page_size as u32).encode_page(&[], page_size);
    storage
        .write_at(0, &[&meta])
        .map_err(io("initialise empty file"))?;
    storage.sync().map_err(io("fdatasync"))?;
    // The name may be as new as the file (created a moment ago, never synced): make it as
    // durable as the database about to be committed into it.
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    sync_dir(dir).map_err(io("fsync directory"))?;
    Ok(len)
}

/// Create an empty database atomically: build it under a temporary name, sync it, then link
/// it into place (which fails rather than replace a file another process just created) and
/// sync the directory.
fn create_file(path: &Path, page_size: usize) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(".{name}.creating.{}.{nanos}", std::process::id()));
    let result = (|| -> Result<()> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| PagerError::io("create", path, e))?;
        let mut buf = vec![0u8; page_size * 2];
        buf[..META_SIZE].copy_from_slice(&Meta::empty(page_size as u32).encode());
        f.write_all_at(&buf, 0)
            .map_err(|e| PagerError::io("write new file", path, e))?;
        f.sync_all()
            .map_err(|e| PagerError::io("fsync new file", path, e))?;
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(PagerError::io("link new file into place", path, e)),
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&tmp);
    result?;
    sync_dir(&dir).map_err(|e| PagerError::io("fsync directory", path, e))
}

/// The path a database at `path` lives at: symlinks resolved, absolute. A file that does not
/// exist yet resolves to its canonical directory joined with its name. A dangling symlink is
/// refused rather than followed: it usually means a database was moved or deleted, and
/// creating an empty one at its target would hide that. Background compaction renames its new
/// file over this path (never over a symlink, which would turn it into a regular file and
/// leave the target stale).
pub fn resolve_path(path: &Path) -> Result<PathBuf> {
    let missing = match std::fs::canonicalize(path) {
        Ok(p) => return Ok(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => e,
        Err(e) => return Err(PagerError::io("resolve path", path, e)),
    };
    if let Ok(target) = std::fs::read_link(path) {
        return Err(PagerError::io(
            "open",
            path,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "dangling symlink to {}, which does not exist (a database is not created through a dangling link)",
                    target.display()
                ),
            ),
        ));
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(PagerError::io("resolve path", path, missing));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let dir = std::fs::canonicalize(dir).map_err(|e| PagerError::io("resolve path", path, e))?;
    Ok(dir.join(name))
}

/// fsync a directory so a rename or link in it is durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Check that every page a one-fsync commit lists reached the disk whole: each object (a node
/// page, or an overflow run) carries the txid that wrote it and a matching checksum, and each
/// run's stored checksums match the run's checksum in the manifest (so a whole page left by
/// an aborted attempt or a lost earlier commit, which can carry the same txid, does not pass
/// for the write the commit made). The meta at `offset` is rejected otherwise (its commit was
/// cut short; the other meta is the fallback).
///
/// Reads one page at a time: every length comes from the file, so nothing is allocated from
/// it (a crafted run of 2^31 pages costs reads bounded by the file, not memory).
fn verify_manifest(
    file: &File,
    file_len: u64,
    meta: &Meta,
    offset: u64,
) -> std::result::Result<Meta, Unverified> {
    if meta.manifest_runs == 0 {
        return Ok(*meta);
    }
    let ps = meta.page_size as u64;
    let mut page = vec![0u8; ps as usize];
    file.read_exact_at(&mut page, offset)
        .map_err(|e| Unverified::new(None, format!("cannot read meta page: {e}")))?;
    let runs = meta.manifest(&page).map_err(|e| Unverified::new(None, e))?;
    // The commits whose writes the manifest lists: this one, or (a commit that made earlier
    // Async commits durable) every one since the last durable meta.
    let first = match meta.manifest_first {
        0 => meta.txid,
        f if f <= meta.txid => f,
        f => {
            return Err(Unverified::new(
                None,
                format!("manifest starts at txid {f}, after its meta {}", meta.txid),
            ))
        }
    };
    let torn = |p: u64, why: &str| Unverified::new(Some(p), format!("page {p} {why}"));
    let read = |p: u64, buf: &mut [u8]| {
        file.read_exact_at(buf, p * ps)
            .map_err(|e| Unverified::new(Some(p), format!("cannot read page {p}: {e}")))
    };
    for r in runs {
        let (p, n) = (r.start, r.pages as u64);
        let end = p
            .checked_add(n)
            .filter(|&e| p >= 2 && n > 0 && e <= meta.high_water);
        match end.and_then(|e| e.checked_mul(ps)) {
            Some(bytes) if bytes <= file_len => {}
            _ => return Err(torn(p, "lies outside the file")),
        }
        // Exactly the write listed: an older version of a page reused within the listed
        // commits is whole and carries a txid in range, so the range alone is not enough.
        let want = if r.txid == 0 { meta.txid } else { r.txid };
        let header_ok = |bytes: &[u8]| {
            matches!(PageHeader::read(&bytes[..PAGE_HEADER_SIZE]),
                Some(h) if h.txid == want && want >= first && want <= meta.txid)
        };
        // A listed page in a hole never reached the disk: say so before reading any of it
        // (a crafted run over a sparse file would otherwise cost a read of its whole length).
        if first_hole(file, p * ps).is_some_and(|h| h < (p + n) * ps) {
            return Err(torn(p, "(or a later page of its run) was never written"));
        }
        let checksum = if r.overflow {
            // One checksum over the whole run, streamed page by page.
            read(p, &mut page)?;
            if !header_ok(&page) {
                return Err(torn(p, "does not hold this commit's write"));
            }
            let stored = stored_checksum(&page);
            let mut h = crc32fast::Hasher::new();
            h.update(&page[..4]);
            h.update(&page[8..]);
            for q in p + 1..p + n {
                read(q, &mut page)?;
                h.update(&page);
            }
            if h.finalize() != stored {
                return Err(torn(p, "is torn (checksum mismatch)"));
            }
            stored
        } else {
            let mut pages = crc32fast::Hasher::new();
            for q in p..p + n {
                read(q, &mut page)?;
                if !header_ok(&page) {
                    return Err(torn(q, "does not hold this commit's write"));
                }
                let stored = stored_checksum(&page);
                if stored != run_checksum(&page) {
                    return Err(torn(q, "is torn (checksum mismatch)"));
                }
                pages.update(&stored.to_le_bytes());
            }
            pages.finalize()
        };
        if checksum != r.checksum {
            return Err(torn(
                p,
                &format!(
                    "(or one of pages {p}-{}) holds a whole write other than this commit's",
                    p + n - 1
                ),
            ));
        }
    }
    Ok(*meta)
}

/// Why a manifest did not verify, and the page where it failed, if one.
struct Unverified {
    page: Option<u64>,
    reason: String,
}

impl Unverified {
    fn new(page: Option<u64>, reason: String) -> Unverified {
        Unverified { page, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crafted file's length is input too: a sparse file of 2^63 bytes or more (tmpfs takes
    /// one) made the reservation's next power of two overflow, a panic with overflow checks
    /// and a zero-byte reservation without (found by `cargo fuzz run meta`).
    #[test]
    fn the_reservation_of_any_file_length_is_at_most_what_larch_maps() {
        for len in [
            0,
            1,
            4096,
            1 << 40,
            MAX_FILE_BYTES,
            1 << 62,
            (1 << 63) - 1,
            1 << 63,
            u64::MAX,
        ] {
            let r = reservation(len) as u64;
            assert!(r.is_power_of_two() || r == MAX_FILE_BYTES, "{len}: {r}");
            assert!(r <= MAX_FILE_BYTES, "{len}: {r}");
            assert!(r >= len.min(MAX_FILE_BYTES), "{len}: {r}");
        }
    }
}
