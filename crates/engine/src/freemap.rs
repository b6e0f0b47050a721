//! The persisted free-space state: a bitmap of pages not reachable from the commit (free or
//! pending), kept as a B+tree of 256-byte chunks keyed by chunk number (big-endian u64).
//!
//! A commit rewrites only the chunks whose bits it changed (and their tree path), so its cost
//! is proportional to the pages it touched, not to the free pages in the file. A missing chunk
//! means "every page in it is in use"; a chunk once written is kept even when it returns to all
//! zeros, so the free map only grows and the fixpoint below settles.

use larch_freelist::FreeSpace;
use larch_pager::{Meta, PageRole};

use crate::cursor::Range;
use crate::error::{Error, Result};
use crate::view::View;
use crate::write::{Txn, FREEMAP};
use crate::PageId;

/// Bytes of a chunk value.
pub const CHUNK_BYTES: usize = 256;
/// Pages a chunk covers.
pub const CHUNK_PAGES: u64 = (CHUNK_BYTES * 8) as u64;

/// Decode a chunk key.
pub fn chunk_index(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

/// Every page marked unreachable in the free map of `meta`, as sorted runs. Fails on bits
/// outside the file's pages or malformed chunks.
pub fn unreachable_runs(view: &View<'_>, meta: &Meta) -> Result<Vec<(PageId, u64)>> {
    let mut runs: Vec<(PageId, u64)> = Vec::new();
    let range = Range::new(
        *view,
        meta.freemap,
        PageRole::FreeMap,
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
    );
    for entry in range {
        let (k, v) = entry?;
        let idx = chunk_index(k)
            .ok_or_else(|| Error::corrupt(meta.freemap.root, "free-map key is not 8 bytes"))?;
        if v.len() != CHUNK_BYTES {
            return Err(Error::corrupt(
                meta.freemap.root,
                format!("free-map chunk {idx} is {} bytes", v.len()),
            ));
        }
        for (byte_i, &byte) in v.iter().enumerate() {
            if byte == 0 {
                continue;
            }
            for bit in 0..8 {
                if byte & (1 << bit) == 0 {
                    continue;
                }
                let page = idx
                    .checked_mul(CHUNK_PAGES)
                    .and_then(|b| b.checked_add((byte_i * 8 + bit) as u64))
                    .filter(|&p| p >= 2 && p < meta.high_water)
                    .ok_or_else(|| {
                        Error::corrupt(
                            meta.freemap.root,
                            format!("free map marks a page of chunk {idx} outside the file"),
                        )
                    })?;
                match runs.last_mut() {
                    Some((s, n)) if *s + *n == page => *n += 1,
                    _ => runs.push((page, 1)),
                }
            }
        }
    }
    Ok(runs)
}

/// Fill `free` from the free map at open: with no reader and a durable meta, every
/// unreachable page is reusable. `pinned_by: Some(t)`: readers may hold snapshots older than
/// the meta `t` (another process wrote it, process.rs), so every unreachable page waits, as
/// if commit `t` freed it, until none is older.
///
/// The writer will overwrite what this says is free, so a damaged free map would destroy live
/// data: every free-map page's checksum is verified (whatever `verify_checksums` says; the free
/// map is a few pages per GiB), the marked pages must number what the meta counted, and none of
/// them may be reachable from the meta. That last check walks every tree (walk.rs): a free map
/// can be whole, consistent with the counters and still wrong (a bug that lost a bit, a crafted
/// file), and only reachability says which pages are really free.
pub fn load(
    view: &View<'_>,
    meta: &Meta,
    free: &mut FreeSpace,
    pinned_by: Option<crate::TxId>,
) -> Result<()> {
    let checked = View {
        verify: true,
        ..*view
    };
    let runs = unreachable_runs(&checked, meta)?;
    let marked: u64 = runs.iter().map(|&(_, n)| n).sum();
    if marked != meta.unreachable_pages {
        return Err(Error::corrupt(
            meta.freemap.root,
            format!(
                "the free map marks {marked} pages free but the meta counts {}; {NOT_FOR_WRITING}",
                meta.unreachable_pages
            ),
        ));
    }
    let reachable = crate::walk::reachable_pages(view, meta).map_err(|e| match e {
        Error::Corrupt { page, reason } => {
            Error::corrupt(page, format!("{reason}; {NOT_FOR_WRITING}"))
        }
        other => other,
    })?;
    for &(p, n) in &runs {
        if let Some(q) = (p..p + n).find(|&q| reachable.contains(q)) {
            return Err(Error::corrupt(
                q,
                format!(
                    "the free map marks page {q} free but the meta's trees reach it; {NOT_FOR_WRITING}"
                ),
            ));
        }
    }
    for (p, n) in runs {
        match pinned_by {
            // Readers of older snapshots may reach these: reusable once none is older.
            Some(t) => free.free(t, p, n),
            None => free.policy.insert(p, n),
        }
    }
    Ok(())
}

/// What a read-write open that cannot trust the free map says to do.
const NOT_FOR_WRITING: &str =
    "the file cannot be opened for writing: open it read-only and copy the data out (larch compact SRC DST)";

impl Txn {
    /// Write the bits this transaction changed into the free map. Changing the free map
    /// copies its pages, which changes more bits; repeat until nothing changes (every touched
    /// free-map page is dirty by then, so this ends in a few rounds).
    pub(crate) fn save_free_map(&mut self) -> Result<()> {
        for _round in 0..1000 {
            let changes = std::mem::take(&mut self.freemap_changes);
            if changes.is_empty() {
                return Ok(());
            }
            // By chunk (the changes are in page order, so a chunk's are adjacent); the hot
            // chunks first, so the nodes that hold them are the first the free map copies and
            // take the slots next to the hot run.
            let changes: Vec<(PageId, bool)> = changes.into_iter().collect();
            let mut groups: Vec<(u64, usize, usize)> = Vec::new();
            for (i, &(p, _)) in changes.iter().enumerate() {
                let idx = p / CHUNK_PAGES;
                match groups.last_mut() {
                    Some((g, _, end)) if *g == idx => *end = i + 1,
                    _ => groups.push((idx, i, i + 1)),
                }
            }
            let hot = std::mem::take(&mut self.hot_chunks);
            groups.sort_by_key(|&(idx, _, _)| !hot.contains(&idx));
            let mut chunk: Vec<u8> = Vec::with_capacity(CHUNK_BYTES);
            for (idx, from, to) in groups {
                let key = idx.to_be_bytes();
                chunk.clear();
                match self.get_in(FREEMAP, &key)? {
                    Some(v) if v.len() == CHUNK_BYTES => chunk.extend_from_slice(v),
                    Some(v) => {
                        return Err(Error::corrupt(
                            self.base.meta.freemap.root,
                            format!("free-map chunk {idx} is {} bytes", v.len()),
                        ))
                    }
                    None => chunk.resize(CHUNK_BYTES, 0),
                }
                let mut changed = false;
                for &(p, unreachable) in &changes[from..to] {
                    let off = (p % CHUNK_PAGES) as usize;
                    let (byte, mask) = (off / 8, 1u8 << (off % 8));
                    let was = chunk[byte] & mask != 0;
                    if was != unreachable {
                        chunk[byte] ^= mask;
                        changed = true;
                    }
                }
                if changed {
                    // An all-zero chunk is overwritten, not deleted: deleting can merge
                    // free-map pages, which frees a page, which sets a bit again.
                    self.insert(FREEMAP, &key, &chunk)?;
                }
            }
        }
        Err(Error::corrupt(
            self.base.meta.freemap.root,
            "free map did not settle",
        ))
    }
}
