//! The on-disk node page, read in place: the layout constants, the size `Limits` that follow
//! from the page size, and `NodePage`, a zero-copy view of a committed branch or leaf page in
//! the map (parse, key and entry accessors, binary search). Nothing here allocates or edits;
//! the editable, dirty node a write transaction builds is `node.rs` (the split of bbolt's
//! page.go and node.go, or redb's `LeafAccessor` and `LeafBuilder`).
//!
//! ## Format
//! The byte layout is specified in docs/format.md ("Leaf page", "Branch page", "Overflow run");
//! in short:
//!
//! Leaf: the common header (count = entries), then `count` u16 cell offsets in key order; cells
//! are packed at the end of the page:
//! ```text
//! cell: klen u16 | flags u8 | 0 u8 | vlen u32 | key | value (inline) or first page u64 (overflow)
//! ```
//! Branch: header (count = children), `count` u16 cell offsets; cell `i` holds separator `i`
//! and child `i`; separator 0 is empty. Child `i` holds the keys in `[sep i, sep i+1)`.
//! ```text
//! cell: klen u16 | child u64 | key
//! ```
//! Overflow run: header (count = 0), value length u64, the value; the crc covers the run.

use larch_pager::map::prefetch;
use larch_pager::{PageHeader, PageRole, PageType, PAGE_HEADER_SIZE};

use crate::error::{Error, Result};
use crate::{PageId, TxId};

/// Bytes of a slot (cell offset).
pub const SLOT: usize = 2;
/// Bytes of a leaf cell header.
pub const LEAF_CELL: usize = 8;
/// Bytes of a branch cell header.
pub const BRANCH_CELL: usize = 10;
/// Bytes before the value in an overflow run.
pub const OVERFLOW_HEADER: usize = PAGE_HEADER_SIZE + 8;
/// Leaf cell flag: the value is in an overflow run.
pub const FLAG_OVERFLOW: u8 = 1;
/// Offset of the flags byte in a leaf cell.
pub const LEAF_FLAGS: usize = 2;
/// Offset of the value length (u32) in a leaf cell.
pub const LEAF_VLEN: usize = 4;
/// Offset of the child page id (u64) in a branch cell.
pub const BRANCH_CHILD: usize = 2;

/// Bytes of a cache line (the unit `NodePage::prefetch_search` asks for).
const LINE: usize = 64;
/// The levels, counted up from the leaves (1), whose pages a search prefetches
/// (`NodePage::prefetch_search`): each level up holds about 1/200 of the pages below it, so
/// the pages above the leaves' parents are few, stay in the caches, and would only pay the
/// instructions.
pub const PREFETCHED_LEVELS: u32 = 2;
/// Branch pages of at most this many bytes have every line prefetched before a search
/// (`NodePage::prefetch_search`): a 4 KiB branch's 63 lines are asked for at once, where the
/// probes' cells would wait for the slot lines that locate them (docs/performance.md, "Reads
/// as the tree grows"). Larger branches prefetch their slots and first probes only.
const WHOLE_BRANCH_PREFETCH: usize = 4096;

/// Leaves of at most this many entries have every cell prefetched before a search (a search
/// of 16 reads 4 or 5 of them); a range scan stepping into a leaf prefetches this many.
const SMALL_LEAF: usize = 16;

/// Size limits that follow from the page size.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Page size.
    pub page_size: usize,
    /// Bytes available to slots and cells.
    pub capacity: usize,
    /// Largest key.
    pub max_key: usize,
    /// Largest encoded entry kept inline; bigger values go to an overflow run. At most a third
    /// of the capacity, so an overfull node always splits into two that fit.
    pub max_entry: usize,
}

impl Limits {
    /// Limits for a page size.
    pub fn new(page_size: usize) -> Limits {
        let capacity = page_size - PAGE_HEADER_SIZE;
        Limits {
            page_size,
            capacity,
            max_key: page_size / 4,
            max_entry: capacity / 3,
        }
    }
    /// Does a value of `vlen` bytes under a key of `klen` bytes stay in the leaf?
    pub fn inline(&self, klen: usize, vlen: usize) -> bool {
        SLOT + LEAF_CELL + klen + vlen <= self.max_entry
    }
    /// Pages an overflow run of `vlen` bytes takes.
    pub fn overflow_pages(&self, vlen: u64) -> u64 {
        (OVERFLOW_HEADER as u64 + vlen).div_ceil(self.page_size as u64)
    }
}

/// A value as stored in a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValRef<'a> {
    /// In the leaf.
    Inline(&'a [u8]),
    /// In an overflow run starting at `page`.
    Overflow {
        /// First page of the run.
        page: PageId,
        /// Value length.
        len: u64,
    },
}

/// A branch or leaf page read in place.
#[derive(Clone, Copy, Debug)]
pub struct NodePage<'a> {
    /// The page id (for error messages).
    pub id: PageId,
    /// The page bytes.
    pub bytes: &'a [u8],
    /// Entries (leaf) or children (branch).
    pub count: usize,
    /// Leaf or branch.
    pub leaf: bool,
}

#[inline]
pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]) as usize)
}
#[inline]
pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
#[inline]
pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Byte-wise (lexicographic) order of keys, as `<[u8]>::cmp`, eight bytes at a time: the
/// keys of a search are short, and a call to memcmp per probe cost more than the compare.
#[inline(always)]
pub(crate) fn compare_keys(mut a: &[u8], mut b: &[u8]) -> std::cmp::Ordering {
    while let (Some((x, ra)), Some((y, rb))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
        (a, b) = (ra, rb);
    }
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

impl<'a> NodePage<'a> {
    /// Read the header of `bytes` as a node of `role`; checks type, role and that the slots fit.
    pub fn parse(id: PageId, bytes: &'a [u8], role: PageRole) -> Result<NodePage<'a>> {
        let h = PageHeader::read(bytes).ok_or_else(|| Error::corrupt(id, "unknown page type"))?;
        let leaf = match h.page_type {
            PageType::Leaf => true,
            PageType::Branch => false,
            PageType::Overflow => {
                return Err(Error::corrupt(
                    id,
                    "expected a tree node, found an overflow page",
                ))
            }
        };
        if h.role != role {
            return Err(Error::corrupt(
                id,
                format!(
                    "page of the {} tree found inside the {} tree",
                    h.role.name(),
                    role.name()
                ),
            ));
        }
        let count = h.count as usize;
        if PAGE_HEADER_SIZE + count * SLOT > bytes.len() || (!leaf && count == 0) {
            return Err(Error::corrupt(
                id,
                format!("impossible entry count {count}"),
            ));
        }
        Ok(NodePage {
            id,
            bytes,
            count,
            leaf,
        })
    }

    /// The txid in the header.
    pub fn txid(&self) -> TxId {
        u64_at(self.bytes, 8).unwrap_or(0)
    }

    #[inline]
    fn cell(&self, i: usize) -> Result<usize> {
        u16_at(self.bytes, PAGE_HEADER_SIZE + i * SLOT)
            .filter(|&o| o >= PAGE_HEADER_SIZE + self.count * SLOT && o < self.bytes.len())
            .ok_or_else(|| Error::corrupt(self.id, format!("cell offset {i} out of the page")))
    }

    /// Key of entry (leaf) or separator (branch) `i`.
    #[inline]
    pub fn key(&self, i: usize) -> Result<&'a [u8]> {
        self.key_in_page(i).ok_or_else(|| self.key_error(i))
    }

    /// The key of cell `i`, or None if its slot or cell does not lie in the page. The same
    /// checks as `cell` and `key`, with one branch each: binary searches call it per probe.
    #[inline(always)]
    fn key_in_page(&self, i: usize) -> Option<&'a [u8]> {
        let b = self.bytes;
        let off = u16::from_le_bytes(*b.get(PAGE_HEADER_SIZE + i * SLOT..)?.first_chunk()?);
        let off = off as usize;
        if off < PAGE_HEADER_SIZE + self.count * SLOT {
            return None;
        }
        let cell = b.get(off..)?;
        let klen = u16::from_le_bytes(*cell.first_chunk()?) as usize;
        let start = if self.leaf { LEAF_CELL } else { BRANCH_CELL };
        cell.get(start..start + klen)
    }

    #[cold]
    fn key_error(&self, i: usize) -> Error {
        match self.cell(i) {
            Err(e) => e,
            Ok(_) => self.bad(i),
        }
    }

    pub(crate) fn bad(&self, i: usize) -> Error {
        Error::corrupt(self.id, format!("cell {i} runs past the end of the page"))
    }

    /// Key and value of leaf entry `i`.
    #[inline]
    pub fn entry(&self, i: usize) -> Result<(&'a [u8], ValRef<'a>)> {
        match self.entry_in_page(i) {
            Some(e) => Ok(e),
            None => Err(self.entry_error(i)),
        }
    }

    /// Leaf entry `i`, or None if any part of it lies outside the page: the checks of
    /// `entry_checked`, one branch each (range scans call it per entry).
    #[inline(always)]
    fn entry_in_page(&self, i: usize) -> Option<(&'a [u8], ValRef<'a>)> {
        let b = self.bytes;
        let off = u16::from_le_bytes(*b.get(PAGE_HEADER_SIZE + i * SLOT..)?.first_chunk()?);
        let off = off as usize;
        if off < PAGE_HEADER_SIZE + self.count * SLOT {
            return None;
        }
        let (head, rest) = b.get(off..)?.split_first_chunk::<LEAF_CELL>()?;
        let klen = u16::from_le_bytes([head[0], head[1]]) as usize;
        let flags = head[2];
        let vlen = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let (key, rest) = rest.split_at_checked(klen)?;
        let val = if flags & FLAG_OVERFLOW != 0 {
            ValRef::Overflow {
                page: u64::from_le_bytes(*rest.first_chunk()?),
                len: vlen as u64,
            }
        } else {
            ValRef::Inline(rest.get(..vlen as usize)?)
        };
        Some((key, val))
    }

    #[cold]
    fn entry_error(&self, i: usize) -> Error {
        match self.entry_checked(i) {
            Err(e) => e,
            Ok(_) => self.bad(i),
        }
    }

    /// `entry`, one field at a time, for the error that names what is wrong.
    fn entry_checked(&self, i: usize) -> Result<(&'a [u8], ValRef<'a>)> {
        let off = self.cell(i)?;
        let b = self.bytes;
        let klen = u16_at(b, off).ok_or_else(|| self.bad(i))?;
        let flags = *b.get(off + LEAF_FLAGS).ok_or_else(|| self.bad(i))?;
        let vlen = u32_at(b, off + LEAF_VLEN).ok_or_else(|| self.bad(i))? as usize;
        let ks = off + LEAF_CELL;
        let key = b.get(ks..ks + klen).ok_or_else(|| self.bad(i))?;
        let vs = ks + klen;
        let val = if flags & FLAG_OVERFLOW != 0 {
            ValRef::Overflow {
                page: u64_at(b, vs).ok_or_else(|| self.bad(i))?,
                len: vlen as u64,
            }
        } else {
            ValRef::Inline(b.get(vs..vs + vlen).ok_or_else(|| self.bad(i))?)
        };
        Ok((key, val))
    }

    /// Child page `i` of a branch.
    #[inline]
    pub fn child(&self, i: usize) -> Result<PageId> {
        let off = self.cell(i)?;
        u64_at(self.bytes, off + BRANCH_CHILD).ok_or_else(|| self.bad(i))
    }

    /// Start loading the cache lines a search of this page will read, so that their misses
    /// overlap instead of coming one per probe: every line of a branch page of at most
    /// [`WHOLE_BRANCH_PREFETCH`] bytes; otherwise the lines of the slot array, then the cells
    /// of every entry of a small leaf, or of the first three probes of the binary search
    /// (`search`'s and `child_index`'s, whichever way they go: 7 cells, 3 of them read).
    /// Hints only: nothing here fails, and a page already in the caches costs about a
    /// hundred instructions more.
    #[inline]
    pub fn prefetch_search(&self) {
        let b = self.bytes;
        if !self.leaf && b.len() <= WHOLE_BRANCH_PREFETCH {
            // Every line at once: a branch of ~200 separators fills its page, and asking for
            // the probes' cells waits for the slot lines that say where they are.
            for line in (LINE..b.len()).step_by(LINE) {
                prefetch(b, line);
            }
            return;
        }
        let slots_end = PAGE_HEADER_SIZE + self.count * SLOT;
        // Line 0 (the header) is loaded: parse read it.
        for line in (LINE..slots_end).step_by(LINE) {
            prefetch(b, line);
        }
        if self.leaf && self.count <= SMALL_LEAF {
            return self.prefetch_cells(0..self.count);
        }
        let (lo, hi) = (usize::from(!self.leaf), self.count);
        let m = (lo + hi) / 2;
        let (l, r) = ((lo + m) / 2, (m + 1 + hi) / 2);
        for i in [
            m,
            l,
            r,
            (lo + l) / 2,
            (l + 1 + m) / 2,
            (m + 1 + r) / 2,
            (r + 1 + hi) / 2,
        ] {
            self.prefetch_cell(i);
        }
    }

    /// Start loading the first line of cells `range` (their lengths and their keys' first
    /// bytes): of a small leaf a search will probe, or of the entries a range scan reads next
    /// when it steps into a leaf (`SMALL_LEAF` of them, `prefetch_scan`).
    #[inline]
    pub fn prefetch_cells(&self, range: std::ops::Range<usize>) {
        for i in range {
            self.prefetch_cell(i);
        }
    }

    /// `prefetch_cells` of the first (`forward`) or last `SMALL_LEAF` entries of a leaf a
    /// range scan steps into.
    #[inline]
    pub fn prefetch_scan(&self, forward: bool) {
        let n = self.count.min(SMALL_LEAF);
        if forward {
            self.prefetch_cells(0..n);
        } else {
            self.prefetch_cells(self.count - n..self.count);
        }
    }

    /// Start loading the line(s) of cell `i` that a compare reads: the key length and the
    /// key's first eight bytes, which decide almost every compare.
    #[inline(always)]
    fn prefetch_cell(&self, i: usize) {
        let Some(slot) = self.bytes.get(PAGE_HEADER_SIZE + i * SLOT..) else {
            return;
        };
        if let Some(&s) = slot.first_chunk::<SLOT>() {
            let off = u16::from_le_bytes(s) as usize;
            let key = if self.leaf { LEAF_CELL } else { BRANCH_CELL };
            prefetch(self.bytes, off);
            prefetch(self.bytes, off + key + 7);
        }
    }

    /// Leaf: position of `key`, or where it would be inserted.
    #[inline]
    pub fn search(&self, key: &[u8]) -> Result<std::result::Result<usize, usize>> {
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let Some(k) = self.key_in_page(mid) else {
                return Err(self.key_error(mid));
            };
            match compare_keys(k, key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Ok(mid)),
            }
        }
        Ok(Err(lo))
    }

    /// Branch: the child whose range holds `key` (the last separator <= key).
    #[inline]
    pub fn child_index(&self, key: &[u8]) -> Result<usize> {
        // Separators 1..count; find how many are <= key.
        let (mut lo, mut hi) = (1, self.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let Some(k) = self.key_in_page(mid) else {
                return Err(self.key_error(mid));
            };
            if compare_keys(k, key) != std::cmp::Ordering::Greater {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo - 1)
    }
}

#[cfg(test)]
mod key_order_tests {
    use super::compare_keys;

    #[test]
    fn compare_keys_orders_as_slices_do() {
        let keys: [&[u8]; 12] = [
            b"",
            b"a",
            b"ab",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefgi",
            b"abcdefghabcdefgh",
            b"abcdefghabcdefgg",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\x01",
            b"\x00\x00\x00\x00\x00\x00\x00\x00",
            b"\x00\x00\x00\x00\x00\x00\x00",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(compare_keys(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }
}

#[cfg(test)]
mod prefetch_tests {
    use super::*;

    /// A page of `leaf`-ness with `count` slots all pointing at `off`.
    fn page(leaf: bool, count: u16, off: u16) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        PageHeader {
            page_type: if leaf {
                PageType::Leaf
            } else {
                PageType::Branch
            },
            role: PageRole::Data,
            count,
            txid: 1,
        }
        .write(&mut b);
        for i in 0..count as usize {
            let at = PAGE_HEADER_SIZE + i * SLOT;
            b[at..at + SLOT].copy_from_slice(&off.to_le_bytes());
        }
        b
    }

    #[test]
    fn prefetching_a_page_with_cells_out_of_it_does_not_panic() {
        // Slot offsets past the page (u16::MAX) and at its last byte: hints only, so the
        // search that follows reports the damage, not the prefetch.
        for (leaf, count) in [
            (true, 3),
            (true, 200),
            (false, 1),
            (false, 300),
            (true, 2040),
        ] {
            for off in [u16::MAX, 4095] {
                let b = page(leaf, count, off);
                let p = NodePage::parse(9, &b, PageRole::Data).unwrap();
                p.prefetch_search();
                p.prefetch_scan(true);
                p.prefetch_scan(false);
                p.prefetch_cells(0..p.count + 5);
                assert!(p.search(b"k").is_err() || p.count == 0);
            }
        }
    }
}
