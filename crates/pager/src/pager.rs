//! The pager: opens or atomically creates the file, locks it, picks the valid meta, keeps the
//! read map ahead of the file, and writes pages and metas through [`Storage`].

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{PagerError, Result};
use crate::lock::try_lock;
use crate::map::{Advice, Map};
use crate::meta::{ManifestRun, Meta, MetaSlot, META_SIZE};
use crate::page::{run_checksum, stored_checksum, PageHeader, PAGE_HEADER_SIZE};
use crate::storage::{FileStorage, Storage, WriteMode};
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
    /// Open without write access, under a shared lock.
    pub read_only: bool,
    /// Create the file if it does not exist.
    pub create: bool,
}

impl Default for PagerOptions {
    fn default() -> Self {
        PagerOptions {
            page_size: 4096,
            write_mode: WriteMode::Pwrite,
            advice: Advice::default(),
            read_only: false,
            create: true,
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
    poisoned: AtomicBool,
    file_len: AtomicU64,
    counters: IoCounters,
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
        match try_lock(storage.file(), !opts.read_only) {
            Ok(true) => {}
            Ok(false) => {
                return Err(PagerError::Locked {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(PagerError::io("flock", path, e)),
        }
        let file_len = storage.len().map_err(|e| PagerError::io("stat", path, e))?;
        let metas = read_metas(path, storage.file(), file_len)?;
        let page_size = metas.current.page_size as usize;
        if !opts.read_only {
            // What we read may sit only in the page cache (a process that crashed before its
            // sync); make it durable before building on it as the durable fallback.
            storage
                .sync()
                .map_err(|e| PagerError::io("fdatasync", path, e))?;
        }
        let map = Map::new(storage.file(), reservation(file_len), false, opts.advice)
            .map_err(|e| PagerError::io("mmap", path, e))?;
        let pager = Pager {
            path: path.to_path_buf(),
            storage,
            page_size,
            map: Mutex::new(Arc::new(map)),
            advice: opts.advice,
            read_only: opts.read_only,
            poisoned: AtomicBool::new(false),
            file_len: AtomicU64::new(file_len),
            counters: IoCounters::default(),
        };
        Ok((pager, metas))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
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

    /// Has a sync failed on this handle?
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Make sure the file holds at least `pages` pages, growing it ahead in chunks (so most
    /// commits do not change its size) and the map reservation with it.
    pub fn ensure_pages(&self, pages: PageId) -> Result<()> {
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
        let step = (cur / 8).clamp(256 << 10, 256 << 20);
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
        self.check_writable()?;
        self.count_write(bufs);
        self.storage
            .write_at(first * self.page_size as u64, bufs)
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
        self.storage
            .write_at(slot.page() * self.page_size as u64, &[&page])
            .map_err(|e| PagerError::io("write meta", &self.path, e))
    }

    /// Make every write so far durable. A failure poisons the handle: the kernel may have
    /// dropped the dirty pages, so nothing written since the last good sync can be trusted.
    pub fn sync(&self) -> Result<()> {
        self.check_writable()?;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.storage.sync() {
            self.poisoned.store(true, Ordering::Release);
            return Err(PagerError::io("fdatasync", &self.path, e));
        }
        Ok(())
    }
}

/// Address space to reserve for a file of `len` bytes: well ahead, so remaps are rare.
fn reservation(len: u64) -> usize {
    let want = len.saturating_mul(2).max(1 << 30).next_power_of_two();
    want.min(MAX_FILE_BYTES) as usize
}

/// Read both meta slots and choose the valid one with the highest txid.
fn read_metas(path: &Path, file: &File, file_len: u64) -> Result<OpenedMetas> {
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
    let zero = Meta::decode(&read(0)?).and_then(check_len);
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
        let cand = Meta::decode(&read(ps as u64)?).and_then(|m| {
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
        }
        if found {
            break;
        }
    }
    // A one-fsync commit's meta is only as good as the pages it lists: verify them.
    let zero = zero.and_then(|m| verify_manifest(file, file_len, &m, 0));
    let one = one.and_then(|m| verify_manifest(file, file_len, &m, m.page_size as u64));
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
            return Err(not_db(format!(
                "no valid meta page (page 0: {a}; page 1: {b})"
            )));
        }
    };
    let other_damaged = !other_blank && other.is_err();
    Ok(OpenedMetas {
        current,
        other,
        other_damaged,
    })
}

fn is_blank(r: &std::result::Result<Meta, String>) -> bool {
    matches!(r, Err(e) if e.contains("all zero"))
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

/// fsync a directory so a rename or link in it is durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Check that every page a one-fsync commit lists reached the disk whole: each object (a node
/// page, or an overflow run) carries the commit's txid and a matching checksum. The meta at
/// `offset` is rejected otherwise (its commit was cut short; the other meta is the fallback).
fn verify_manifest(
    file: &File,
    file_len: u64,
    meta: &Meta,
    offset: u64,
) -> std::result::Result<Meta, String> {
    if meta.manifest_runs == 0 {
        return Ok(*meta);
    }
    let ps = meta.page_size as u64;
    let mut page = vec![0u8; ps as usize];
    file.read_exact_at(&mut page, offset)
        .map_err(|e| format!("cannot read meta page: {e}"))?;
    let runs = meta.manifest(&page)?;
    // The commits whose writes the manifest lists: this one, or (a commit that made earlier
    // Async commits durable) every one since the last durable meta.
    let first = match meta.manifest_first {
        0 => meta.txid,
        f if f <= meta.txid => f,
        f => {
            return Err(format!(
                "manifest starts at txid {f}, after its meta {}",
                meta.txid
            ))
        }
    };
    let torn = |p: u64, why: &str| {
        format!(
            "commit {} did not fully reach the disk: page {p} {why}",
            meta.txid
        )
    };
    for r in runs {
        let objects: Vec<(u64, u64)> = if r.overflow {
            vec![(r.start, r.pages as u64)]
        } else {
            (0..r.pages as u64).map(|i| (r.start + i, 1)).collect()
        };
        for (p, n) in objects {
            let end = p.checked_add(n).filter(|&e| p >= 2 && e <= meta.high_water);
            if end.is_none() || (p + n) * ps > file_len {
                return Err(torn(p, "lies outside the file"));
            }
            let mut bytes = vec![0u8; (n * ps) as usize];
            file.read_exact_at(&mut bytes, p * ps)
                .map_err(|e| format!("cannot read page {p}: {e}"))?;
            // Exactly the write listed: an older version of a page reused within the listed
            // commits is whole and carries a txid in range, so the range alone is not enough.
            let want = if r.txid == 0 { meta.txid } else { r.txid };
            match PageHeader::read(&bytes[..PAGE_HEADER_SIZE]) {
                Some(h) if h.txid == want && want >= first && want <= meta.txid => {}
                _ => return Err(torn(p, "does not hold this commit's write")),
            }
            if stored_checksum(&bytes) != run_checksum(&bytes) {
                return Err(torn(p, "is torn (checksum mismatch)"));
            }
        }
    }
    Ok(*meta)
}
