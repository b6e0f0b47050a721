//! The narrow I/O interface every write, sync and resize goes through.
//!
//! Reads come from the map; everything that changes the file goes through [`Storage`], so a
//! test can record each operation and build the image a power cut would leave
//! (tests/crash.rs). [`FileStorage`] is the real thing, writing with pwritev or through a
//! writable shared map.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::map::{Advice, Map};

/// How large the kernel's page-cache folios are for the pages a write brings into the cache
/// (Linux with large folios, ext4 among others): a folio is as large as the write that made
/// it, every later write into it walks all of its blocks, and reads through the map run
/// faster over large ones (docs/performance.md, "Page-cache folios").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CacheFolios {
    /// Up to 64 KiB ([`WRITE_PIECE`]), as large as the runs a commit writes: point reads
    /// through the map run up to 5% faster over them.
    Large,
    /// One page each, the default: a run written past what the file held so far is first
    /// brought into the cache one page per folio (`readahead` of the new range, zeros), so
    /// each later one-page rewrite, which every commit makes, costs the kernel a page, not
    /// 16. Runs written in key order ([`Storage::write_in_order`]: a sorted append's full
    /// pages, which later commits seldom rewrite and whose single-page folios made a sorted
    /// append 0.69x as fast) are written as `Large`. Measured against `Large`
    /// (docs/performance.md, "Page-cache folios"): loads 1.18-1.23x, async overwrites
    /// 1.09-1.24x, point reads 0.95x at 500,000 documents and 1.05x at 10,000,000.
    /// Pwrite (and Hybrid's pwrites) only. A compaction's copy is written this way whatever
    /// the database's option, though in key order: the commits after a compaction rewrite
    /// its pages one at a time (docs/performance.md, "Page-cache folios").
    #[default]
    Small,
}

/// How dirty pages reach the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum WriteMode {
    /// pwrite/pwritev from private buffers, fdatasync to make them durable (as LMDB does).
    #[default]
    Pwrite,
    /// memcpy into a writable shared map, then one msync over the span of the ranges written
    /// since the last sync (the kernel writes back only their dirty pages). The map is
    /// advised MADV_RANDOM so a 4 KiB store does not dirty a large folio.
    Mmap,
    /// Writes no sync waits for (an Async commit's pages) go through the writable map as in
    /// `Mmap` (a copy and one fstat per run, the guard against a store past the end of the
    /// file, instead of a pwrite); everything else (a Sync commit's pages, every meta) by
    /// pwrite as in `Pwrite`; fdatasync makes both durable (the map and pwrite share the page
    /// cache). A store into a page that is not cached reads it first: a read error there, or
    /// a full copy-on-write file system, raises SIGBUS.
    Hybrid,
}

impl WriteMode {
    /// Every mode.
    pub const ALL: [WriteMode; 3] = [WriteMode::Pwrite, WriteMode::Mmap, WriteMode::Hybrid];

    /// Inverse of [`WriteMode::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Lowercase name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            WriteMode::Pwrite => "pwrite",
            WriteMode::Mmap => "mmap",
            WriteMode::Hybrid => "hybrid",
        }
    }
}

/// A sync to run on another thread ([`Storage::background_sync`]).
pub type BackgroundSync = Box<dyn FnOnce() -> io::Result<()> + Send>;

/// Everything that changes the file. Implementations must be usable from any thread; the
/// engine calls the mutating methods from one writer at a time.
// A file's length is not a collection's: an `is_empty` would mean nothing here.
#[allow(clippy::len_without_is_empty)]
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// The file's length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Grow (allocating the blocks, so a later write cannot fail for space) or shrink the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Write `bufs` back to back starting at `offset`: all of it, or an error.
    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()>;
    /// As [`Storage::write_at`], for a write that no caller waits to make durable soon (an
    /// Async commit's pages): the implementation may take a path that is cheaper to write and
    /// dearer to sync. Durable, as every write, after the next [`Storage::sync`].
    fn write_deferred(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.write_at(offset, bufs)
    }
    /// As [`Storage::write_deferred`] (`deferred`) or [`Storage::write_at`], for pages filled
    /// in key order and left full, which later writes seldom rewrite (a sorted append's): the
    /// implementation may keep them in large page-cache folios ([`CacheFolios`]). The default
    /// is the plain write.
    fn write_in_order(&self, offset: u64, bufs: &[&[u8]], deferred: bool) -> io::Result<()> {
        if deferred {
            self.write_deferred(offset, bufs)
        } else {
            self.write_at(offset, bufs)
        }
    }
    /// Make every write completed so far durable (fdatasync or msync).
    fn sync(&self) -> io::Result<()>;
    /// Write `bufs` at `offset` as [`Storage::write_at`] does and make that range durable
    /// before returning, as a write through a descriptor opened `O_DSYNC` does: nothing else
    /// need be durable after it (a meta page whose commit's pages a sync already covered).
    /// The default writes, then syncs everything: durable, and more.
    fn write_durable(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.write_at(offset, bufs)?;
        self.sync()
    }
    /// How the pages it writes sit in the page cache; storage that has no page cache (test
    /// storage) ignores it, the default.
    fn set_cache_folios(&self, folios: CacheFolios) {
        let _ = folios;
    }
    /// A duplicate of the file's descriptor that another thread may fdatasync to write back
    /// what was written so far (`Pager::start_background_flush`), or `None` if that would
    /// not write back this storage's writes (the default: test storage records its own).
    fn flush_handle(&self) -> Option<File> {
        None
    }
    /// A sync that another thread runs (`Pager::start_background_flush`): when it returns Ok,
    /// every write completed before this call is durable. `None` when the storage has none
    /// (a caller then syncs in the foreground). The default fdatasyncs
    /// [`Storage::flush_handle`].
    fn background_sync(&self) -> Option<BackgroundSync> {
        let file = self.flush_handle()?;
        Some(Box::new(move || file.sync_data()))
    }
    /// The pager waits for the sync [`Storage::background_sync`] gave, with no other call to
    /// come meanwhile (`Pager::wait_background_flush`, and a pager dropped). Storage that
    /// ends its syncs by what it sees (test storage that logs calls) ends it now; the default
    /// does nothing.
    fn flush_awaited(&self) {}
    /// Whether [`Storage::background_sync`] gives a sync, asked once at open.
    fn syncs_in_background(&self) -> bool {
        self.flush_handle().is_some()
    }
    /// The file, for mapping it read-only.
    fn file(&self) -> &File;
}

/// The most bytes one `pwrite` call writes, and the boundaries of the file its calls end at.
///
/// The page cache holds a range of the file in folios as large as the write that brought it
/// in (large folios: ext4 on Linux 6.18 among others), and every later write into a folio,
/// and its writeback, walks all of the folio's blocks: a 4 KiB page rewritten inside a 2 MiB
/// folio costs 512 of those steps, twice. A commit's long runs (a bulk load, a compaction)
/// written in one call would leave such folios for every later commit to pay; written in
/// 64 KiB pieces, they leave folios of at most 64 KiB, which reads through the map do not
/// miss (docs/performance.md, "Page-cache folios").
pub const WRITE_PIECE: u64 = 64 << 10;

/// The part of a write of `len` bytes at `offset` that [`CacheFolios::Small`] brings into the
/// cache a page at a time before writing it, `(start, len)`: what lies past `fresh` (the end
/// of what the file held or had written), if the write is more than one page (a one-page
/// write makes a one-page folio by itself) and not `in_order` (pages filled in key order and
/// left full, [`Storage::write_in_order`]: a sorted append, whose pages are written once and
/// which single-page folios made 0.69x as fast, docs/performance.md, "Page-cache folios").
/// Also returns where the fresh mark moves to: the write's end, when it holds more than a
/// page past the mark.
fn fresh_range(
    offset: u64,
    len: u64,
    fresh: u64,
    in_order: bool,
) -> (Option<(u64, u64)>, Option<u64>) {
    let Some(end) = offset.checked_add(len) else {
        return (None, None);
    };
    if end <= fresh || len <= 4096 {
        return (None, None);
    }
    let from = offset.max(fresh);
    ((!in_order).then_some((from, end - from)), Some(end))
}

/// The real storage: a file written with pwritev or through a writable map.
#[derive(Debug)]
pub struct FileStorage {
    file: File,
    mode: WriteMode,
    /// Writable map (Mmap and Hybrid modes) and the ranges written through it since the last
    /// sync (Mmap mode only).
    mapped: Mutex<MappedWrites>,
    /// [`CacheFolios::Small`]: bring new ranges into the cache a page at a time.
    small_folios: AtomicBool,
    /// Bytes below this offset were in the file when it was opened or have been written
    /// since: a write past it is a write of fresh pages.
    fresh_from: AtomicU64,
}

#[derive(Debug, Default)]
struct MappedWrites {
    map: Option<Map>,
    dirty: Vec<(u64, u64)>,
    resized: bool,
}

impl FileStorage {
    /// Wrap an open file.
    pub fn new(file: File, mode: WriteMode) -> FileStorage {
        let len = file.metadata().map_or(0, |m| m.len());
        FileStorage {
            small_folios: AtomicBool::new(false),
            fresh_from: AtomicU64::new(len),
            file,
            mode,
            mapped: Mutex::new(MappedWrites::default()),
        }
    }

    /// The write mode.
    pub fn mode(&self) -> WriteMode {
        self.mode
    }

    /// [`FileStorage::pwritev_all`] in calls that each end at a [`WRITE_PIECE`] boundary of
    /// the file (or at the end of the data); `in_order`: [`Storage::write_in_order`].
    fn write_in_pieces(&self, offset: u64, bufs: &[&[u8]], in_order: bool) -> io::Result<()> {
        if self.small_folios.load(Ordering::Relaxed) {
            let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
            let fresh = self.fresh_from.load(Ordering::Relaxed);
            let (range, mark) = fresh_range(offset, len, fresh, in_order);
            if let Some((from, n)) = range {
                // Advice only: an error (or a kernel that ignores it) leaves large folios.
                // SAFETY: readahead on a valid descriptor; no memory involved.
                unsafe {
                    libc::readahead(self.file.as_raw_fd(), from as libc::off64_t, n as usize)
                };
            }
            if let Some(mark) = mark {
                self.fresh_from.fetch_max(mark, Ordering::Relaxed);
            }
        }
        for_each_piece(offset, bufs, WRITE_PIECE, |at, piece| {
            self.pwritev_all(at, piece)
        })
    }

    fn pwritev_all(&self, mut offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        if bufs.len() == 1 {
            return self.file.write_all_at(bufs[0], offset);
        }
        // Skip over fully written buffers and a partially written head after short writes.
        let mut idx = 0;
        let mut skip = 0usize;
        while idx < bufs.len() {
            let iov: Vec<libc::iovec> = bufs[idx..]
                .iter()
                .take(1024)
                .enumerate()
                .map(|(i, b)| {
                    let b = if i == 0 { &b[skip..] } else { &b[..] };
                    libc::iovec {
                        iov_base: b.as_ptr() as *mut _,
                        iov_len: b.len(),
                    }
                })
                .collect();
            // SAFETY: every iovec points into a live `&[u8]` borrowed for this call; pwritev
            // only reads them. Not an access to the map.
            let n = unsafe {
                libc::pwritev(
                    self.file.as_raw_fd(),
                    iov.as_ptr(),
                    iov.len() as libc::c_int,
                    offset as libc::off_t,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwritev wrote nothing",
                ));
            }
            let mut n = n as usize;
            offset += n as u64;
            while n > 0 && idx < bufs.len() {
                let left = bufs[idx].len() - skip;
                if n >= left {
                    n -= left;
                    idx += 1;
                    skip = 0;
                } else {
                    skip += n;
                    n = 0;
                }
            }
            while idx < bufs.len() && bufs[idx].len() == skip {
                idx += 1;
                skip = 0;
            }
        }
        Ok(())
    }

    /// Grow the file from `cur` to `len` bytes where the file system has no fallocate.
    /// Pwrite mode extends it sparsely: a later pwrite into the hole reports ENOSPC. Mmap and
    /// Hybrid modes must not leave holes (a store through the map into one on a full disk
    /// raises SIGBUS), so they write zeros over the new range: the blocks are allocated now
    /// and a full disk is an error from the growth, which then shrinks the file back to `cur`.
    fn grow_without_fallocate(&self, cur: u64, len: u64) -> io::Result<()> {
        match self.mode {
            WriteMode::Pwrite => self.file.set_len(len),
            WriteMode::Mmap | WriteMode::Hybrid => {
                let zeros = vec![0u8; (len - cur).min(1 << 20) as usize];
                let mut off = cur;
                while off < len {
                    let n = (len - off).min(zeros.len() as u64) as usize;
                    if let Err(e) = self.file.write_all_at(&zeros[..n], off) {
                        let _ = self.file.set_len(cur);
                        return Err(e);
                    }
                    off += n as u64;
                }
                Ok(())
            }
        }
    }

    fn map_write(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let end = offset + total;
        let mut m = self.mapped.lock();
        let need = m.map.as_ref().is_none_or(|map| (map.len() as u64) < end);
        if need {
            // Reserve well ahead so growth rarely remaps; the old writable map has no
            // outstanding slices (only copy_in uses it), so replacing it is safe.
            // A crafted sparse file can be longer than 2^63 bytes, past any power of two:
            // then (and past what larch maps at all) reserve what larch maps, or the write.
            let reserve = end
                .max(self.file.metadata()?.len())
                .checked_next_power_of_two()
                .unwrap_or(u64::MAX)
                .clamp(1 << 30, crate::MAX_FILE_BYTES.max(end));
            m.map = Some(Map::new(
                &self.file,
                reserve as usize,
                true,
                Advice::Random,
            )?);
        }
        if let Some(map) = m.map.as_ref() {
            map.copy_in(offset, bufs)?;
        }
        if self.mode == WriteMode::Mmap {
            // Hybrid syncs with fdatasync, which needs no ranges.
            m.dirty.push((offset, total));
        }
        Ok(())
    }

    /// A write through the map, refused past the end of the file.
    fn checked_map_write(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let len = self.len()?;
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        if offset + total > len {
            // A store past EOF through a map raises SIGBUS; the engine grows the file
            // first, so this is a bug guard, not a path.
            return Err(io::Error::other("mapped write past the end of the file"));
        }
        self.map_write(offset, bufs)
    }
}

impl Storage for FileStorage {
    fn flush_handle(&self) -> Option<File> {
        // fdatasync writes back what pwrite and the writable map (every mode) dirtied.
        self.file.try_clone().ok()
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let cur = self.len()?;
        if len > cur {
            // SAFETY: posix_fallocate on a valid descriptor; no memory involved.
            let rc = unsafe {
                libc::posix_fallocate(
                    self.file.as_raw_fd(),
                    cur as libc::off_t,
                    (len - cur) as libc::off_t,
                )
            };
            match rc {
                0 => {}
                libc::EOPNOTSUPP | libc::EINVAL => self.grow_without_fallocate(cur, len)?,
                e => return Err(io::Error::from_raw_os_error(e)),
            }
        } else if len < cur {
            self.file.set_len(len)?;
            self.fresh_from.fetch_min(len, Ordering::Relaxed);
        }
        self.mapped.lock().resized = true;
        Ok(())
    }

    fn set_cache_folios(&self, folios: CacheFolios) {
        self.small_folios
            .store(folios == CacheFolios::Small, Ordering::Relaxed);
    }

    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        match self.mode {
            WriteMode::Pwrite | WriteMode::Hybrid => self.write_in_pieces(offset, bufs, false),
            WriteMode::Mmap => self.checked_map_write(offset, bufs),
        }
    }

    fn write_deferred(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        match self.mode {
            WriteMode::Pwrite => self.write_in_pieces(offset, bufs, false),
            WriteMode::Mmap | WriteMode::Hybrid => self.checked_map_write(offset, bufs),
        }
    }

    fn write_in_order(&self, offset: u64, bufs: &[&[u8]], deferred: bool) -> io::Result<()> {
        match (self.mode, deferred) {
            (WriteMode::Pwrite, _) | (WriteMode::Hybrid, false) => {
                self.write_in_pieces(offset, bufs, true)
            }
            (WriteMode::Mmap, _) | (WriteMode::Hybrid, true) => {
                self.checked_map_write(offset, bufs)
            }
        }
    }

    fn sync(&self) -> io::Result<()> {
        if self.mode != WriteMode::Mmap {
            // fdatasync writes back what pwrite and the map (Hybrid) dirtied alike; without
            // the map's lock, so a writer's stores do not wait behind the flush.
            return self.file.sync_data();
        }
        let mut m = self.mapped.lock();
        // One msync over the span of every range written since the last sync: the kernel
        // writes back only the dirty pages in it, and one call is one flush, where a call per
        // range would cost a flush (an fdatasync, on Linux) each.
        let dirty = std::mem::take(&mut m.dirty);
        let start = dirty.iter().map(|&(o, _)| o).min();
        let end = dirty.iter().map(|&(o, l)| o + l).max();
        if let (Some(map), Some(start), Some(end)) = (m.map.as_ref(), start, end) {
            if let Err(e) = map.sync_range(start, end - start) {
                // Keep the ranges so a caller that ignores poisoning still has them.
                m.dirty = dirty;
                return Err(e);
            }
        }
        if !m.resized {
            return Ok(());
        }
        self.file.sync_data()?;
        m.resized = false;
        Ok(())
    }

    fn write_durable(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let data = bufs.concat();
        let mut done = 0usize;
        while done < data.len() {
            let rest = &data[done..];
            let iov = libc::iovec {
                iov_base: rest.as_ptr() as *mut _,
                iov_len: rest.len(),
            };
            // SAFETY: the iovec points into `data`, alive and unchanged for this call;
            // pwritev2 only reads it. Not an access to the map.
            let n = unsafe {
                libc::pwritev2(
                    self.file.as_raw_fd(),
                    &iov,
                    1,
                    (offset + done as u64) as libc::off_t,
                    libc::RWF_DSYNC,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    // A kernel before 4.7 (no pwritev2, or no RWF_DSYNC): write it, then
                    // sync everything, which makes this range durable too.
                    Some(libc::ENOSYS | libc::EOPNOTSUPP) => {
                        self.file.write_all_at(rest, offset + done as u64)?;
                        return self.file.sync_data();
                    }
                    _ => return Err(e),
                }
            }
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwritev2 wrote nothing",
                ));
            }
            done += n as usize;
        }
        Ok(())
    }

    fn file(&self) -> &File {
        &self.file
    }
}

/// Offset of the first hole at or after `from` in `file` (SEEK_HOLE), or None where the
/// file system cannot say. The end of the file counts as a hole. A page a commit wrote is
/// never in a hole once it reached the disk (compressed or deduplicated data is not a hole),
/// so this proves cheaply that a listed run was cut short, however long a crafted run is.
pub(crate) fn first_hole(file: &File, from: u64) -> Option<u64> {
    let from = libc::off_t::try_from(from).ok()?;
    // SAFETY: lseek on a valid descriptor; no memory involved. It moves the file offset,
    // which nothing in larch uses (every read and write is positional).
    let at = unsafe { libc::lseek(file.as_raw_fd(), from, libc::SEEK_HOLE) };
    u64::try_from(at).ok()
}

/// Call `write(offset, bufs)` for consecutive pieces of the data `bufs` holds (to be written
/// at `offset`), each ending at a multiple of `piece` in the file or at the data's end.
fn for_each_piece(
    offset: u64,
    bufs: &[&[u8]],
    piece: u64,
    mut write: impl FnMut(u64, &[&[u8]]) -> io::Result<()>,
) -> io::Result<()> {
    let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
    if offset % piece + total <= piece {
        return write(offset, bufs);
    }
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut start = offset;
    let mut at = offset;
    for &b in bufs {
        let mut b = b;
        while !b.is_empty() {
            let end = (at / piece + 1) * piece;
            let take = usize::try_from(end - at).map_or(b.len(), |n| n.min(b.len()));
            parts.push(&b[..take]);
            b = &b[take..];
            at += take as u64;
            if at == end {
                write(start, &parts)?;
                parts.clear();
                start = at;
            }
        }
    }
    if !parts.is_empty() {
        write(start, &parts)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// An empty read-write file at `path`, created or truncated.
    fn new_file(path: &std::path::Path) -> File {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .unwrap()
    }

    /// A write through the map of a sparse file longer than 2^63 bytes (tmpfs allows one; the
    /// length is a crafted file's input too): the map's reservation took the next power of two
    /// of the length, which overflowed (a panic with overflow checks).
    #[test]
    fn a_map_write_to_a_file_longer_than_any_power_of_two_reserves_what_larch_maps() {
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            return; // no tmpfs here: other file systems refuse such a length
        };
        let path = dir.path().join("huge");
        let file = new_file(&path);
        if file.set_len((1 << 63) - 4096).is_err() {
            return;
        }
        let storage = FileStorage::new(file, WriteMode::Mmap);
        storage.write_at(8192, &[&[7u8; 4096]]).unwrap();
        let mut back = [0u8; 4096];
        storage.file().read_exact_at(&mut back, 8192).unwrap();
        assert_eq!(back, [7u8; 4096]);
    }

    #[test]
    fn fresh_range_is_the_part_of_a_multi_page_write_past_the_fresh_mark() {
        let fresh = |offset, len, mark| fresh_range(offset, len, mark, false);
        // One page: its own write makes a one-page folio.
        assert_eq!(fresh(8192, 4096, 0), (None, None));
        // Wholly below the mark: nothing is fresh.
        assert_eq!(fresh(0, 16384, 16384), (None, None));
        // Wholly past it, or across it.
        assert_eq!(
            fresh(32768, 8192, 16384),
            (Some((32768, 8192)), Some(40960))
        );
        assert_eq!(
            fresh(8192, 16384, 16384),
            (Some((16384, 8192)), Some(24576))
        );
        // An end past u64::MAX is no range.
        assert_eq!(fresh(u64::MAX - 10, 8192, 0), (None, None));
    }

    /// A write of more than a page past the fresh mark is brought into the cache a page at a
    /// time from the mark on, however long the streak of such writes (a bulk load of random
    /// keys in one transaction is rewritten a page at a time later), unless it is written in
    /// key order; either way the mark moves to its end. A write below the mark or of one page
    /// is left alone and leaves the mark.
    #[test]
    fn fresh_writes_get_single_page_folios_unless_written_in_key_order() {
        const MIB: u64 = 1 << 20;
        let mut mark = 0;
        let mut write = |offset: u64, len: u64, in_order: bool| {
            let (range, moved) = fresh_range(offset, len, mark, in_order);
            if let Some(m) = moved {
                mark = mark.max(m);
            }
            (range, mark)
        };
        // 64 MiB in 1 MiB writes: every one brought in a page at a time.
        for i in 0..64 {
            assert_eq!(
                write(i * MIB, MIB, false),
                (Some((i * MIB, MIB)), (i + 1) * MIB)
            );
        }
        // In key order: large folios, the mark moving on; then a write that is not.
        assert_eq!(write(64 * MIB, MIB, true), (None, 65 * MIB));
        assert_eq!(
            write(65 * MIB, MIB, false),
            (Some((65 * MIB, MIB)), 66 * MIB)
        );
        // Below the mark (a meta, a reused page), or one page past it: nothing.
        assert_eq!(write(0, 4096, false), (None, 66 * MIB));
        assert_eq!(write(10 * MIB, MIB, false), (None, 66 * MIB));
        assert_eq!(write(70 * MIB, 4096, false), (None, 66 * MIB));
    }

    /// With single-page folios, writes past what the file held bring their range into the
    /// cache first and move the fresh mark; shrinking lowers it; the bytes written are the
    /// same either way.
    #[test]
    fn small_folios_track_the_fresh_mark_and_write_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        for folios in [CacheFolios::Large, CacheFolios::Small] {
            let path = dir.path().join(format!("{folios:?}"));
            let file = new_file(&path);
            file.set_len(8192).unwrap();
            let s = FileStorage::new(file, WriteMode::Pwrite);
            s.set_cache_folios(folios);
            assert_eq!(s.fresh_from.load(Ordering::Relaxed), 8192);
            s.set_len(1 << 20).unwrap();
            let a = vec![0xa5u8; 5 * 4096];
            let b = vec![0x5au8; 3 * 4096];
            s.write_at(4096, &[&a, &b]).unwrap();
            let moved = 4096 + 8 * 4096;
            let want = if folios == CacheFolios::Small {
                moved
            } else {
                8192
            };
            assert_eq!(s.fresh_from.load(Ordering::Relaxed), want);
            // A single page past the mark leaves it.
            s.write_at(100 * 4096, &[&b[..4096]]).unwrap();
            assert_eq!(s.fresh_from.load(Ordering::Relaxed), want);
            s.set_len(16384).unwrap();
            assert_eq!(s.fresh_from.load(Ordering::Relaxed), want.min(16384));
            let mut back = vec![0u8; 4 * 4096];
            s.file().read_exact_at(&mut back, 0).unwrap();
            assert_eq!(&back[..4096], &[0u8; 4096][..]);
            assert_eq!(&back[4096..], &a[..3 * 4096]);
        }
    }

    /// A write in key order past the fresh mark moves it as any write does, in every mode
    /// and whether deferred or not, and writes the same bytes.
    #[test]
    fn writes_in_key_order_move_the_fresh_mark_and_write_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        for mode in WriteMode::ALL {
            for deferred in [false, true] {
                let path = dir.path().join(format!("{mode:?}{deferred}"));
                let file = new_file(&path);
                file.set_len(8192).unwrap();
                let s = FileStorage::new(file, mode);
                s.set_cache_folios(CacheFolios::Small);
                s.set_len(1 << 20).unwrap();
                let a: Vec<u8> = (0..6 * 4096u32).map(|i| (i % 253) as u8).collect();
                s.write_in_order(4096, &[&a[..4096], &a[4096..]], deferred)
                    .unwrap();
                let pwrite = mode == WriteMode::Pwrite || (mode == WriteMode::Hybrid && !deferred);
                let want = if pwrite { 7 * 4096 } else { 8192 };
                assert_eq!(
                    s.fresh_from.load(Ordering::Relaxed),
                    want,
                    "{mode:?} {deferred}"
                );
                s.sync().unwrap();
                let mut back = vec![0u8; a.len()];
                s.file().read_exact_at(&mut back, 4096).unwrap();
                assert!(back == a, "{mode:?} {deferred}: the bytes differ");
            }
        }
    }

    /// Every piece ends on a boundary or at the data's end, none is empty or crosses a
    /// boundary, and together they are the data at its offsets, whatever the buffers' split.
    #[test]
    fn pieces_end_on_boundaries_and_cover_the_data_in_order() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for &offset in &[0u64, 1, 4095, 4096, 16_383, 16_384, 100_000] {
            for cuts in [
                vec![],
                vec![5],
                vec![4096, 20_000],
                vec![16_384, 16_385, 69_999],
            ] {
                let mut bufs: Vec<&[u8]> = Vec::new();
                let mut from = 0;
                for &c in &cuts {
                    bufs.push(&data[from..c]);
                    from = c;
                }
                bufs.push(&data[from..]);
                let mut got: Vec<(u64, Vec<u8>)> = Vec::new();
                for_each_piece(offset, &bufs, 16_384, |at, parts| {
                    got.push((at, parts.concat()));
                    Ok(())
                })
                .unwrap();
                let mut next = offset;
                for (i, (at, bytes)) in got.iter().enumerate() {
                    assert_eq!(*at, next, "pieces must follow one another");
                    assert!(!bytes.is_empty());
                    let end = at + bytes.len() as u64;
                    assert!(
                        (at / 16_384) == ((end - 1) / 16_384),
                        "piece {at}..{end} crosses a boundary"
                    );
                    if i + 1 < got.len() {
                        assert_eq!(end % 16_384, 0, "a piece but the last ends on a boundary");
                    }
                    next = end;
                }
                let joined: Vec<u8> = got.into_iter().flat_map(|(_, b)| b).collect();
                assert_eq!(joined, data, "offset {offset}, cuts {cuts:?}");
            }
        }
    }

    /// A run written through `write_at` in pieces reads back whole.
    #[test]
    fn a_long_write_in_pieces_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("pieces"))
            .unwrap();
        let s = FileStorage::new(file, WriteMode::Pwrite);
        let a: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let b = vec![0xabu8; 12_345];
        s.write_at(3 * 4096, &[&a, &b]).unwrap();
        let mut back = vec![0u8; a.len() + b.len()];
        s.file().read_exact_at(&mut back, 3 * 4096).unwrap();
        assert_eq!(&back[..a.len()], &a[..]);
        assert_eq!(&back[a.len()..], &b[..]);
    }

    /// The branch `set_len` takes when posix_fallocate is unsupported (EOPNOTSUPP/EINVAL):
    /// in Mmap mode every block of the grown range is allocated, not a hole.
    #[test]
    fn mmap_growth_without_fallocate_allocates_every_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grow");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        let s = FileStorage::new(file, WriteMode::Mmap);
        s.file().write_all_at(&[7u8; 8192], 0).unwrap();
        let grown = 8192 + (3 << 20) + 4096;
        s.grow_without_fallocate(8192, grown).unwrap();
        let m = s.file().metadata().unwrap();
        assert_eq!(m.len(), grown);
        assert!(
            m.blocks() * 512 >= grown,
            "{} bytes allocated of {grown}: the growth left holes",
            m.blocks() * 512
        );
        // The old contents are kept, the new range reads as zeros, and it takes mapped writes.
        let mut buf = vec![1u8; grown as usize];
        s.file().read_exact_at(&mut buf, 0).unwrap();
        assert!(buf[..8192].iter().all(|&b| b == 7));
        assert!(buf[8192..].iter().all(|&b| b == 0));
        s.write_at(grown - 4096, &[&[9u8; 4096]]).unwrap();
        s.sync().unwrap();
    }
}
