//! The persisted free-space state: a bitmap of pages not reachable from the commit (free or
//! pending), kept as a B+tree of 256-byte chunks keyed by chunk number (big-endian u64).
//!
//! A commit rewrites only the chunks whose bits it changed (and their tree path), so its cost
//! is proportional to the pages it touched, not to the free pages in the file. A missing chunk
//! means "every page in it is in use"; a chunk once written is kept even when it returns to all
//! zeros, so the free map only grows and the fixpoint below settles.

use std::collections::BTreeMap;

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

/// Pages per block of [`Changes`] (two 512-byte bitmaps).
const CHANGE_BLOCK_PAGES: u64 = 4096;
const CHANGE_BLOCK_WORDS: usize = (CHANGE_BLOCK_PAGES / 64) as usize;

/// Free-map bits to write: page -> unreachable, the newest change of each page. Up to
/// [`SMALL_CHANGES`] of them in a sorted list (a one-key commit changes a dozen pages, spread
/// over as many blocks as pages: a list costs it no allocation of a 1 KiB block per page);
/// past that, bitmaps in blocks of 4,096 pages, allocated where pages change: a commit
/// records each page it takes or frees in a few instructions, and the writer folds a commit's
/// changes into the ones it carries a word at a time ([`Changes::apply`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Changes {
    /// The changes while there are at most [`SMALL_CHANGES`], by page; empty once `blocks`
    /// holds them.
    small: Vec<(PageId, bool)>,
    blocks: BTreeMap<u64, Box<ChangeBlock>>,
    len: usize,
}

/// The most changes [`Changes`] keeps as a list.
const SMALL_CHANGES: usize = 48;

#[derive(Clone, Debug)]
struct ChangeBlock {
    /// Pages with a change.
    changed: [u64; CHANGE_BLOCK_WORDS],
    /// Of those, the ones now unreachable.
    unreachable: [u64; CHANGE_BLOCK_WORDS],
}

impl ChangeBlock {
    fn new() -> Box<ChangeBlock> {
        Box::new(ChangeBlock {
            changed: [0; CHANGE_BLOCK_WORDS],
            unreachable: [0; CHANGE_BLOCK_WORDS],
        })
    }
}

impl Changes {
    /// Page `p` is now unreachable (free or pending) or not.
    pub fn insert(&mut self, p: PageId, unreachable: bool) {
        if self.blocks.is_empty() {
            match self.small.binary_search_by_key(&p, |&(q, _)| q) {
                Ok(i) => {
                    self.small[i].1 = unreachable;
                    return;
                }
                Err(i) if self.small.len() < SMALL_CHANGES => {
                    if self.small.capacity() == 0 {
                        // One allocation for the list's life, not one per doubling.
                        self.small.reserve_exact(SMALL_CHANGES);
                    }
                    self.small.insert(i, (p, unreachable));
                    self.len += 1;
                    return;
                }
                Err(_) => {
                    // One more than a list holds: every change goes to the blocks.
                    self.len = 0;
                    for (q, u) in std::mem::take(&mut self.small) {
                        self.insert_in_block(q, u);
                    }
                }
            }
        }
        self.insert_in_block(p, unreachable);
    }

    fn insert_in_block(&mut self, p: PageId, unreachable: bool) {
        let b = self
            .blocks
            .entry(p / CHANGE_BLOCK_PAGES)
            .or_insert_with(ChangeBlock::new);
        let off = p % CHANGE_BLOCK_PAGES;
        let (w, bit) = ((off / 64) as usize, 1u64 << (off % 64));
        if b.changed[w] & bit == 0 {
            b.changed[w] |= bit;
            self.len += 1;
        }
        if unreachable {
            b.unreachable[w] |= bit;
        } else {
            b.unreachable[w] &= !bit;
        }
    }

    /// Pages with a change.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        self.small.clear();
        self.blocks.clear();
        self.len = 0;
    }

    /// Every change, in page order.
    pub fn iter(&self) -> impl Iterator<Item = (PageId, bool)> + '_ {
        let blocks = self.blocks.iter().flat_map(|(&b, block)| {
            (0..CHANGE_BLOCK_WORDS).flat_map(move |w| {
                let mut word = block.changed[w];
                let base = b * CHANGE_BLOCK_PAGES + w as u64 * 64;
                std::iter::from_fn(move || {
                    if word == 0 {
                        return None;
                    }
                    let bit = word.trailing_zeros();
                    word &= word - 1;
                    Some((base + u64::from(bit), block.unreachable[w] >> bit & 1 == 1))
                })
            })
        });
        // At most one of the two holds anything.
        self.small.iter().copied().chain(blocks)
    }

    /// Lay `newer` over these: its changes win.
    pub fn apply(&mut self, newer: &Changes) {
        for &(p, u) in &newer.small {
            self.insert(p, u);
        }
        if newer.blocks.is_empty() {
            return;
        }
        if !self.small.is_empty() {
            self.len = 0;
            for (q, u) in std::mem::take(&mut self.small) {
                self.insert_in_block(q, u);
            }
        }
        for (&b, nb) in &newer.blocks {
            let block = self.blocks.entry(b).or_insert_with(ChangeBlock::new);
            for w in 0..CHANGE_BLOCK_WORDS {
                let c = nb.changed[w];
                if c == 0 {
                    continue;
                }
                self.len += (c & !block.changed[w]).count_ones() as usize;
                block.changed[w] |= c;
                block.unreachable[w] = (block.unreachable[w] & !c) | (nb.unreachable[w] & c);
            }
        }
    }
}

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
///
/// A meta whose free map is behind (`Meta::freemap_behind`: it records an earlier commit) is
/// trusted for nothing but its shape: the free pages are those below the high-water mark the
/// walk does not reach, which must number what the meta counted, and the bits the free map
/// lacks (at most `carried_max`, `CARRIED_MAX` (options.rs) unless a test lowers it, else the file is
/// not one larch wrote) are returned for the
/// writer to carry into the next commit that saves it.
pub fn load(
    view: &View<'_>,
    meta: &Meta,
    free: &mut FreeSpace,
    pinned_by: Option<crate::TxId>,
    carried_max: usize,
) -> Result<Changes> {
    let checked = View {
        verify: true,
        ..*view
    };
    let runs = unreachable_runs(&checked, meta)?;
    let marked: u64 = runs.iter().map(|&(_, n)| n).sum();
    if !meta.freemap_behind && marked != meta.unreachable_pages {
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
    let mut carried = Changes::default();
    let free_runs = if meta.freemap_behind {
        let unreached = reachable.gaps(2, meta.high_water);
        let n: u64 = unreached.iter().map(|&(_, n)| n).sum();
        if n != meta.unreachable_pages {
            return Err(Error::corrupt(
                meta.catalog.root,
                format!(
                    "the meta counts {} unreachable pages but its trees leave {n}; {NOT_FOR_WRITING}",
                    meta.unreachable_pages
                ),
            ));
        }
        for (p, len, unreachable) in differences(&runs, &unreached) {
            if carried.len() as u64 + len > carried_max as u64 {
                return Err(Error::corrupt(
                    meta.freemap.root,
                    format!(
                        "the free map is behind its meta by more than {carried_max} pages; {NOT_FOR_WRITING}"
                    ),
                ));
            }
            for q in p..p + len {
                carried.insert(q, unreachable);
            }
        }
        unreached
    } else {
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
        runs
    };
    for (p, n) in free_runs {
        match pinned_by {
            // Readers of older snapshots may reach these: reusable once none is older.
            Some(t) => free.free(t, p, n),
            None => free.policy.insert(p, n),
        }
    }
    Ok(carried)
}

/// Where two sorted lists of disjoint runs differ: `(start, len, in b)` for every stretch of
/// pages that one holds and the other does not, in order.
fn differences(a: &[(PageId, u64)], b: &[(PageId, u64)]) -> Vec<(PageId, u64, bool)> {
    // Every run start and end, with which list it belongs to: between two consecutive
    // positions, membership in either list does not change.
    let mut edges: Vec<(PageId, bool, bool)> = Vec::with_capacity(2 * (a.len() + b.len()));
    for (list, in_b) in [(a, false), (b, true)] {
        for &(p, n) in list {
            edges.push((p, in_b, true));
            edges.push((p + n, in_b, false));
        }
    }
    // A run's end before a start at the same page (the lists' runs never touch, but a run of
    // one may end where a run of the other starts).
    edges.sort_unstable_by_key(|&(p, _, start)| (p, start));
    let (mut in_a, mut in_b) = (false, false);
    let mut out: Vec<(PageId, u64, bool)> = Vec::new();
    let mut at = 0;
    for (p, list_b, start) in edges {
        if p > at && in_a != in_b {
            match out.last_mut() {
                Some((q, n, b)) if *b == in_b && *q + *n == at => *n += p - at,
                _ => out.push((at, p - at, in_b)),
            }
        }
        at = p;
        if list_b {
            in_b = start;
        } else {
            in_a = start;
        }
    }
    out
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
            let changes: Vec<(PageId, bool)> = changes.iter().collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_keep_the_newest_change_of_each_page_in_page_order() {
        let mut next = crate::test_rng(0x6a09_e667_f3bc_c908u64);
        for _ in 0..300 {
            let span = 1 + next(20_000);
            let (mut older, mut newer) = (Changes::default(), Changes::default());
            let (mut m_older, mut m_newer) = (BTreeMap::new(), BTreeMap::new());
            // Sizes on both sides of the list's limit (SMALL_CHANGES), each side.
            let size = |next: &mut dyn FnMut(u64) -> u64| {
                if next(2) == 0 {
                    next(2 * SMALL_CHANGES as u64)
                } else {
                    next(400)
                }
            };
            for _ in 0..size(&mut next) {
                let (p, v) = (next(span), next(2) == 1);
                older.insert(p, v);
                m_older.insert(p, v);
            }
            for _ in 0..size(&mut next) {
                let (p, v) = (next(span), next(2) == 1);
                newer.insert(p, v);
                m_newer.insert(p, v);
            }
            assert_eq!(newer.len(), m_newer.len());
            assert_eq!(
                newer.iter().collect::<Vec<_>>(),
                m_newer.clone().into_iter().collect::<Vec<_>>()
            );
            assert_eq!(
                older.iter().collect::<Vec<_>>(),
                m_older.clone().into_iter().collect::<Vec<_>>()
            );
            assert_eq!(older.len(), m_older.len());
            older.apply(&newer);
            m_older.extend(m_newer);
            assert_eq!(
                older.iter().collect::<Vec<_>>(),
                m_older.into_iter().collect::<Vec<_>>()
            );
            assert_eq!(older.len(), older.iter().count());
        }
    }

    #[test]
    fn differences_are_the_pages_one_list_holds_and_the_other_does_not() {
        let mut next = crate::test_rng(0xda94_2042_e4dd_58b5u64);
        let runs = |set: &std::collections::BTreeSet<u64>| {
            let mut out: Vec<(PageId, u64)> = Vec::new();
            for &p in set {
                match out.last_mut() {
                    Some((s, n)) if *s + *n == p => *n += 1,
                    _ => out.push((p, 1)),
                }
            }
            out
        };
        for _ in 0..500 {
            let span = 2 + next(200);
            let a: std::collections::BTreeSet<u64> = (0..next(span)).map(|_| next(span)).collect();
            let b: std::collections::BTreeSet<u64> = (0..next(span)).map(|_| next(span)).collect();
            let want: Vec<(u64, bool)> = (0..span)
                .filter(|p| a.contains(p) != b.contains(p))
                .map(|p| (p, b.contains(&p)))
                .collect();
            let d = differences(&runs(&a), &runs(&b));
            let got: Vec<(u64, bool)> = d
                .iter()
                .flat_map(|&(p, n, in_b)| (p..p + n).map(move |q| (q, in_b)))
                .collect();
            assert_eq!(got, want, "{a:?} {b:?}");
            assert!(d.iter().all(|&(_, n, _)| n > 0));
        }
    }
}
