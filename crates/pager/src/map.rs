//! The memory map: a read-only shared mapping that reserves address space ahead of the file,
//! and (for `WriteMode::Mmap`) a writable one.
//!
//! Why the slices handed out here are sound (docs/format.md, "Zero-copy reads", has the long
//! form):
//! - A [`Map`] is never unmapped or moved while anyone holds it: snapshots hold an `Arc<Map>`,
//!   and when the file outgrows the reservation a *new* `Map` is made; the old one lives until
//!   its last snapshot drops it.
//! - A slice of page p handed to a snapshot is never written while that snapshot lives: the
//!   engine overwrites only pages that no open snapshot can reach (docs/format.md, invariant 1).
//! - Every slice is bounds-checked against the mapping and against the file length the caller
//!   proved (the high-water mark of a meta validated against the file size at open), so no
//!   access reaches past the end of the file (which would raise SIGBUS).
//! - No cooperating process truncates the file under a page a snapshot can reach: a writer (in
//!   any process, docs/format.md "Several processes") cuts only pages past its high-water mark
//!   that every reader's snapshot, in every process, leaves unreachable.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::ptr::NonNull;

/// Access-pattern advice for the read mapping, applied with madvise(2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Advice {
    /// The kernel's default readahead.
    Normal,
    /// No readahead: each fault reads one page. Best for point reads on files larger than
    /// memory, and avoids large-folio write amplification through a writable map.
    #[default]
    Random,
    /// Aggressive readahead: scans, compaction, copies.
    Sequential,
}

impl Advice {
    fn flag(self) -> libc::c_int {
        match self {
            Advice::Normal => libc::MADV_NORMAL,
            Advice::Random => libc::MADV_RANDOM,
            Advice::Sequential => libc::MADV_SEQUENTIAL,
        }
    }

    /// The lowercase name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Advice::Normal => "normal",
            Advice::Random => "random",
            Advice::Sequential => "sequential",
        }
    }
}

/// A shared mapping of a file, `len` bytes of address space starting at `ptr`. Only the part
/// below the file's length may be touched.
#[derive(Debug)]
pub struct Map {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
}

// SAFETY: the mapping is plain shared memory; `Map` hands out only shared slices (reads) and
// raw copies made by the single writer under its lock (`copy_in`), so sharing the pointer
// between threads adds no data race beyond what the engine's page-reuse invariant excludes.
unsafe impl Send for Map {}
// SAFETY: as above; `&Map` only allows reads and `copy_in`, whose callers are serialized.
unsafe impl Sync for Map {}

impl Map {
    /// Map `len` bytes of `file` (which may be longer than the file: the tail is address space
    /// reserved for growth, never touched until the file covers it).
    pub fn new(file: &File, len: usize, writable: bool, advice: Advice) -> io::Result<Map> {
        let len = len.max(1);
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of a valid descriptor at an address the kernel picks;
        // it aliases no Rust object. MAP_NORESERVE: the reservation past EOF costs no memory.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = Map {
            ptr: NonNull::new(ptr as *mut u8)
                .ok_or_else(|| io::Error::other("mmap returned null"))?,
            len,
            writable,
        };
        map.advise(advice)?;
        Ok(map)
    }

    /// Bytes of address space reserved.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a map reserves at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Apply access-pattern advice to the whole mapping.
    pub fn advise(&self, advice: Advice) -> io::Result<()> {
        self.madvise(0, self.len, advice.flag())
    }

    /// Ask the kernel to read `len` bytes at `offset` ahead (MADV_WILLNEED); a hint only.
    pub fn will_need(&self, offset: usize, len: usize) {
        let _ = self.madvise(offset, len, libc::MADV_WILLNEED);
    }

    fn madvise(&self, offset: usize, len: usize, flag: libc::c_int) -> io::Result<()> {
        let page = 4096;
        let start = offset & !(page - 1);
        if start >= self.len {
            return Ok(());
        }
        let end = (offset + len).min(self.len);
        // SAFETY: the range lies inside our own mapping (clamped above); madvise with these
        // flags changes no memory contents.
        let rc =
            unsafe { libc::madvise(self.ptr.as_ptr().add(start) as *mut _, end - start, flag) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The bytes `offset..offset+len`, or None if that runs past `limit` (the part of the file
    /// the caller knows exists) or past the mapping.
    #[inline]
    pub fn slice(&self, offset: u64, len: usize, limit: u64) -> Option<&[u8]> {
        let end = offset.checked_add(len as u64)?;
        if end > limit || end > self.len as u64 {
            return None;
        }
        // SAFETY: offset..end lies inside the mapping and below `limit`, which the caller
        // guarantees is within the file, so no byte touched is past EOF. The returned slice
        // borrows `self`, so it cannot outlive the mapping; the engine never writes a page
        // that a holder of this map can still reach (module docs).
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset as usize), len) })
    }

    /// Copy `bufs` back to back into the (writable) mapping at `offset`. The caller must have
    /// extended the file past `offset + total` first.
    pub(crate) fn copy_in(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let end = offset
            .checked_add(total as u64)
            .filter(|&e| e <= self.len as u64)
            .ok_or_else(|| io::Error::other("write past the end of the mapping"))?;
        if !self.writable {
            return Err(io::Error::other("mapping is read-only"));
        }
        let mut at = offset as usize;
        debug_assert!(end as usize <= self.len);
        for b in bufs {
            // SAFETY: at..at+b.len() is inside the writable mapping (checked above) and below
            // the file length (the caller grew the file). No live slice covers these bytes: the
            // pages being written are reachable from no open snapshot (invariant 1), and the
            // source is a separate buffer, so the copy aliases nothing.
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), self.ptr.as_ptr().add(at), b.len())
            };
            at += b.len();
        }
        Ok(())
    }

    /// msync(MS_SYNC) the bytes `offset..offset+len` of a writable mapping.
    pub fn sync_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let page = 4096u64;
        let start = offset & !(page - 1);
        let end = (offset + len).min(self.len as u64);
        if start >= end {
            return Ok(());
        }
        // SAFETY: the range is inside our mapping and page-aligned at the start; msync does not
        // change memory contents.
        let rc = unsafe {
            libc::msync(
                self.ptr.as_ptr().add(start as usize) as *mut _,
                (end - start) as usize,
                libc::MS_SYNC,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Ask the CPU to start loading the cache line that holds `bytes[at]`, so that a later read
/// of it finds it loaded. A hint: it reads nothing the program sees, so an `at` past the end
/// of the slice (a damaged page's offset) costs a wasted load at most; it does nothing on a
/// target without a prefetch instruction. A search that knows which lines of a page it will
/// read (`NodePage::prefetch_search` in the engine) asks for them all at once, and their
/// misses overlap instead of coming one after another.
#[inline(always)]
pub fn prefetch(bytes: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 reads nothing architecturally visible and cannot fault, whatever
    // the address (Intel SDM, "PREFETCHh"); `wrapping_add` makes the address without
    // dereferencing it, so no bound of the slice is relied on.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            bytes.as_ptr().wrapping_add(at).cast(),
        )
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, at);
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; every slice borrowed from this map
        // borrowed `&self`, so none outlives this drop.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut _, self.len);
        }
    }
}
