//! Giving the C allocator's free memory back to the system after a large transaction.
//!
//! A write transaction holds its dirty nodes in the heap; a one-transaction load of 5,000,000
//! random keys holds 1.7 GB of them. At the end the engine frees them, but glibc's malloc
//! returns to the system only the free memory at the top of its heap: the rest stays in the
//! process, counted in its resident memory and unusable by the page cache, until the process
//! allocates it again (docs/performance.md, "Memory after a large transaction").

/// Ask the C allocator to return the free memory of its heap to the system
/// (`malloc_trim(0)` with glibc: every arena's free pages, not only the top's, are released
/// with `MADV_DONTNEED`). It takes time in proportion to the free memory (0.13 s for 1.7 GB
/// here), so callers do it only after freeing a large amount. Elsewhere than Linux with
/// glibc, and under another global allocator, it does nothing useful and costs little.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes a padding size and touches only the allocator's own free
    // chunks, under the allocator's locks; no Rust memory is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}
