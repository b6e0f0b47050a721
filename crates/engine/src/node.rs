//! B+tree node pages: zero-copy readers over the map, and the in-memory node a write
//! transaction edits and encodes at commit.
//!
//! ## Format
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
const FLAG_OVERFLOW: u8 = 1;

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
fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]) as usize)
}
#[inline]
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
#[inline]
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Byte-wise (lexicographic) order of keys, as `<[u8]>::cmp`, eight bytes at a time: the
/// keys of a search are short, and a call to memcmp per probe cost more than the compare.
#[inline(always)]
fn compare_keys(mut a: &[u8], mut b: &[u8]) -> std::cmp::Ordering {
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

    fn bad(&self, i: usize) -> Error {
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
        let flags = *b.get(off + 2).ok_or_else(|| self.bad(i))?;
        let vlen = u32_at(b, off + 4).ok_or_else(|| self.bad(i))? as usize;
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
        u64_at(self.bytes, off + 2).ok_or_else(|| self.bad(i))
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

/// Index of a dirty node in a write transaction's arena (`WriteTx::nodes`). Valid for that
/// transaction only; a node's page is `WriteTx::nodes[i].page`.
pub(crate) type NodeIdx = usize;

/// A child pointer inside a write transaction: a committed page, or a dirty node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Child {
    /// A page of the committed tree, not yet copied.
    Page(PageId),
    /// A node in the transaction's arena.
    Node(NodeIdx),
}

/// A value as a dirty leaf takes it in or hands it out: inline bytes are borrowed, so an
/// insert copies the value once, into the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Val<'a> {
    /// Stored in the leaf.
    Inline(&'a [u8]),
    /// An overflow run; `fresh` when written by this transaction (freeing it is immediate).
    Overflow {
        /// First page.
        page: PageId,
        /// Value length.
        len: u64,
        /// Written by this transaction.
        fresh: bool,
    },
}

impl Val<'_> {
    fn stored_len(&self) -> usize {
        match self {
            Val::Inline(v) => v.len(),
            Val::Overflow { .. } => 8,
        }
    }
}

/// An overflow run a leaf entry refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// First page.
    pub page: PageId,
    /// Value length.
    pub len: u64,
    /// Written by this transaction.
    pub fresh: bool,
}

/// One entry of a dirty node: where its key (and inline value) sit in the node's byte arena.
#[derive(Clone, Copy, Debug)]
struct Ent {
    /// Offset of the key in `Node::bytes`; an inline value follows the key.
    at: u32,
    klen: u16,
    /// Inline value length (0 in branches).
    vlen: u32,
    /// The value lives in an overflow run instead.
    run: Option<Run>,
}

impl Ent {
    fn held(&self) -> usize {
        self.klen as usize + self.vlen as usize
    }
}

/// A node being edited by a write transaction. Keys and inline values are kept in one byte
/// arena per node (no allocation per entry), so copying a page into a node, editing it and
/// dropping it cost a few allocations, not two per entry. Branches keep key 0 empty.
#[derive(Clone, Debug)]
pub struct Node {
    /// Page this node will be written to (allocated when it became dirty).
    pub page: PageId,
    /// Leaf or branch.
    pub leaf: bool,
    /// Key and inline value bytes of the entries, in any order; bytes no entry refers to
    /// any more are counted in `dead` and dropped when they are the larger part.
    bytes: Vec<u8>,
    dead: usize,
    /// Entries (leaf) or separators (branch), in key order.
    ents: Vec<Ent>,
    /// Branch children.
    pub children: Vec<Child>,
    /// Encoded size of slots and cells (the header excluded).
    pub size: usize,
    /// False once merged away: not written at commit.
    pub live: bool,
    /// The tree it belongs to.
    pub role: PageRole,
}

impl Node {
    /// An empty leaf (or branch) on `page`.
    pub fn empty(page: PageId, leaf: bool, role: PageRole) -> Node {
        Node {
            page,
            leaf,
            bytes: Vec::new(),
            dead: 0,
            ents: Vec::new(),
            children: Vec::new(),
            size: 0,
            live: true,
            role,
        }
    }

    /// Bytes leaf entry `key`/`val` takes.
    pub fn leaf_entry_size(key: &[u8], val: &Val<'_>) -> usize {
        SLOT + LEAF_CELL + key.len() + val.stored_len()
    }

    /// Bytes branch entry `key` takes.
    pub fn branch_entry_size(key: &[u8]) -> usize {
        SLOT + BRANCH_CELL + key.len()
    }

    /// Entries (leaf) or separators, the empty first one included (branch).
    #[inline]
    pub fn len(&self) -> usize {
        self.ents.len()
    }

    /// No entries.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ents.is_empty()
    }

    /// Key (leaf) or separator (branch) `i`.
    #[inline]
    pub fn key(&self, i: usize) -> &[u8] {
        let e = &self.ents[i];
        &self.bytes[e.at as usize..e.at as usize + e.klen as usize]
    }

    /// The last key.
    pub fn last_key(&self) -> &[u8] {
        match self.ents.len() {
            0 => &[],
            n => self.key(n - 1),
        }
    }

    /// Value of leaf entry `i`.
    #[inline]
    pub fn val(&self, i: usize) -> Val<'_> {
        let e = &self.ents[i];
        match e.run {
            Some(r) => Val::Overflow {
                page: r.page,
                len: r.len,
                fresh: r.fresh,
            },
            None => {
                let s = e.at as usize + e.klen as usize;
                Val::Inline(&self.bytes[s..s + e.vlen as usize])
            }
        }
    }

    /// The overflow run of leaf entry `i`, if its value is not inline.
    #[inline]
    pub fn run(&self, i: usize) -> Option<Run> {
        self.ents[i].run
    }

    /// Every overflow run the leaf refers to.
    pub fn runs(&self) -> impl Iterator<Item = Run> + '_ {
        self.ents.iter().filter_map(|e| e.run)
    }

    /// Leaf: position of `key`, or where it would be inserted.
    #[inline]
    pub fn search(&self, key: &[u8]) -> std::result::Result<usize, usize> {
        self.ents.binary_search_by(|e| {
            self.bytes[e.at as usize..e.at as usize + e.klen as usize].cmp(key)
        })
    }

    /// Branch: the child holding `key` (the last separator <= key; separator 0 is ignored).
    #[inline]
    pub fn child_index(&self, key: &[u8]) -> usize {
        self.ents[1..]
            .partition_point(|e| &self.bytes[e.at as usize..e.at as usize + e.klen as usize] <= key)
    }

    /// Bytes entry `i` takes.
    pub fn entry_size(&self, i: usize) -> usize {
        let e = &self.ents[i];
        if self.leaf {
            SLOT + LEAF_CELL + e.klen as usize + if e.run.is_some() { 8 } else { e.vlen as usize }
        } else {
            SLOT + BRANCH_CELL + e.klen as usize
        }
    }

    /// Recompute `size` from the entries.
    pub fn recompute_size(&mut self) {
        self.size = (0..self.ents.len()).map(|i| self.entry_size(i)).sum();
    }

    fn ent(&mut self, key: &[u8], val: Val<'_>) -> Ent {
        let at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(key);
        let (vlen, run) = match val {
            Val::Inline(v) => {
                self.bytes.extend_from_slice(v);
                (v.len() as u32, None)
            }
            Val::Overflow { page, len, fresh } => (0, Some(Run { page, len, fresh })),
        };
        Ent {
            at,
            klen: key.len() as u16,
            vlen,
            run,
        }
    }

    /// Entry `e` has left the node: its bytes are dead.
    fn forget(&mut self, e: Ent) {
        self.dead += e.held();
        self.shed();
    }

    /// Drop arena bytes no entry refers to, once they are most of it.
    fn shed(&mut self) {
        if self.dead > 1024 && self.dead * 2 > self.bytes.len() {
            let mut bytes = Vec::with_capacity(self.bytes.len() - self.dead);
            for e in &mut self.ents {
                let s = e.at as usize;
                e.at = bytes.len() as u32;
                bytes.extend_from_slice(&self.bytes[s..s + e.held()]);
            }
            self.bytes = bytes;
            self.dead = 0;
        }
    }

    /// Leaf: insert `key`/`val` at position `i` (`size` is the caller's to keep).
    pub fn insert_entry(&mut self, i: usize, key: &[u8], val: Val<'_>) {
        let e = self.ent(key, val);
        self.ents.insert(i, e);
    }

    /// Add an entry (leaf) or separator (branch) after the last one.
    pub fn push(&mut self, key: &[u8], val: Val<'_>) {
        let e = self.ent(key, val);
        self.ents.push(e);
    }

    /// Leaf: replace the value of entry `i`; the key stays. An inline value of the same
    /// length is overwritten where it is.
    pub fn set_val(&mut self, i: usize, val: Val<'_>) {
        let e = self.ents[i];
        if let (Val::Inline(v), None) = (val, e.run) {
            if v.len() == e.vlen as usize {
                let s = e.at as usize + e.klen as usize;
                self.bytes[s..s + v.len()].copy_from_slice(v);
                return;
            }
        }
        let at = self.bytes.len() as u32;
        self.bytes
            .extend_from_within(e.at as usize..e.at as usize + e.klen as usize);
        let new = self.ent(&[], val);
        self.ents[i] = Ent {
            at,
            klen: e.klen,
            vlen: new.vlen,
            run: new.run,
        };
        self.forget(e);
    }

    /// Branch: replace separator `i`.
    pub fn set_key(&mut self, i: usize, key: &[u8]) {
        let old = self.ents[i];
        let e = self.ent(key, Val::Inline(&[]));
        self.ents[i] = e;
        self.forget(old);
    }

    /// Branch: insert separator `key` with child `child` at position `i`.
    pub fn insert_child(&mut self, i: usize, key: &[u8], child: Child) {
        let e = self.ent(key, Val::Inline(&[]));
        self.ents.insert(i, e);
        self.children.insert(i, child);
    }

    /// Remove entry (and, in a branch, child) `i` (`size` is the caller's to keep).
    pub fn remove(&mut self, i: usize) {
        let e = self.ents.remove(i);
        if !self.leaf {
            self.children.remove(i);
        }
        self.forget(e);
    }

    /// Branch: remove separator `i` alone (children are the caller's to fix).
    pub fn remove_key(&mut self, i: usize) {
        let e = self.ents.remove(i);
        self.forget(e);
    }

    /// Move entries `at..` (and their children) into a new node on `page`.
    pub fn split_off(&mut self, at: usize, page: PageId) -> Node {
        let mut right = Node::empty(page, self.leaf, self.role);
        let moved = self.ents.split_off(at);
        let held: usize = moved.iter().map(Ent::held).sum();
        right.bytes.reserve(held);
        right.ents.reserve(moved.len() + 1);
        for e in &moved {
            let s = e.at as usize;
            let at = right.bytes.len() as u32;
            right.bytes.extend_from_slice(&self.bytes[s..s + e.held()]);
            right.ents.push(Ent { at, ..*e });
        }
        if !self.leaf {
            right.children = self.children.split_off(at);
        }
        // All at once: shedding in between would drop bytes the next entries' count assumes.
        self.dead += held;
        self.shed();
        right
    }

    /// Move every entry (and child) of `other` after this node's own.
    pub fn append(&mut self, other: &mut Node) {
        let base = self.bytes.len() as u32;
        self.bytes.extend_from_slice(&other.bytes);
        self.dead += other.dead;
        self.ents.extend(other.ents.drain(..).map(|e| Ent {
            at: e.at + base,
            ..e
        }));
        self.children.append(&mut other.children);
        other.bytes.clear();
        other.dead = 0;
    }

    /// Decode a committed page into an editable node that will be written to `new_page`.
    /// The page is copied whole into the arena (one copy, not one per entry); its entries
    /// point at their keys and values inside it, and the headers around them count as dead.
    /// A cell that does not fit the page is an error, as when reading it in place.
    pub fn decode(page: &NodePage<'_>, new_page: PageId, role: PageRole) -> Result<Node> {
        let mut n = Node::empty(new_page, page.leaf, role);
        n.ents.reserve(page.count + 1);
        // Room for a few more entries before the arena grows.
        n.bytes.reserve(page.bytes.len() + page.bytes.len() / 2);
        n.bytes.extend_from_slice(page.bytes);
        // One pass over the slots with the same checks as `NodePage::entry` and `child`.
        let b = page.bytes;
        let first_cell = PAGE_HEADER_SIZE + page.count * SLOT;
        let hdr = if page.leaf { LEAF_CELL } else { BRANCH_CELL };
        let mut held = 0;
        if !page.leaf {
            n.children.reserve(page.count + 1);
        }
        for i in 0..page.count {
            let off = u16_at(b, PAGE_HEADER_SIZE + i * SLOT)
                .filter(|&o| o >= first_cell && o < b.len())
                .ok_or_else(|| {
                    Error::corrupt(page.id, format!("cell offset {i} out of the page"))
                })?;
            let mut klen = u16_at(b, off).ok_or_else(|| page.bad(i))?;
            if !page.leaf && i == 0 {
                // Separator 0 is empty whatever the page holds.
                klen = 0;
            }
            let at = off + hdr;
            if at + klen > b.len() {
                return Err(page.bad(i));
            }
            let e = if page.leaf {
                let flags = *b.get(off + 2).ok_or_else(|| page.bad(i))?;
                let vlen = u32_at(b, off + 4).ok_or_else(|| page.bad(i))?;
                let vs = at + klen;
                if flags & FLAG_OVERFLOW != 0 {
                    let first = u64_at(b, vs).ok_or_else(|| page.bad(i))?;
                    Ent {
                        at: at as u32,
                        klen: klen as u16,
                        vlen: 0,
                        run: Some(Run {
                            page: first,
                            len: vlen as u64,
                            fresh: false,
                        }),
                    }
                } else {
                    // The value follows the key in the cell.
                    if vs + vlen as usize > b.len() {
                        return Err(page.bad(i));
                    }
                    Ent {
                        at: at as u32,
                        klen: klen as u16,
                        vlen,
                        run: None,
                    }
                }
            } else {
                n.children
                    .push(Child::Page(u64_at(b, off + 2).ok_or_else(|| page.bad(i))?));
                Ent {
                    at: at as u32,
                    klen: klen as u16,
                    vlen: 0,
                    run: None,
                }
            };
            held += e.held();
            n.ents.push(e);
        }
        n.dead = n.bytes.len() - held;
        n.recompute_size();
        Ok(n)
    }

    /// Append the page this node encodes to (`page_size` bytes) to `out`; `page_of` gives the
    /// page of a dirty child. The cells are appended from the lowest address up (the last
    /// entry's cell is lowest), so only the header, slots and free gap are zeroed first.
    pub fn encode(
        &self,
        out: &mut Vec<u8>,
        page_size: usize,
        txid: TxId,
        page_of: impl Fn(NodeIdx) -> PageId,
    ) {
        let start = out.len();
        let header = PageHeader {
            page_type: if self.leaf {
                PageType::Leaf
            } else {
                PageType::Branch
            },
            role: self.role,
            count: self.ents.len() as u16,
            txid,
        };
        // Header, slots and the gap: zeroed, then filled in place; the cells are appended.
        let mut end = page_size;
        for i in 0..self.ents.len() {
            end -= self.entry_size(i) - SLOT;
        }
        let slots_end = PAGE_HEADER_SIZE + self.ents.len() * SLOT;
        debug_assert!(slots_end <= end, "a dirty node outgrew its page");
        out.resize(start + end.max(slots_end), 0);
        let head = &mut out[start..];
        header.write(head);
        let mut cell = page_size;
        for i in 0..self.ents.len() {
            cell -= self.entry_size(i) - SLOT;
            let slot = PAGE_HEADER_SIZE + i * SLOT;
            head[slot..slot + SLOT].copy_from_slice(&(cell as u16).to_le_bytes());
        }
        for (i, e) in self.ents.iter().enumerate().rev() {
            let k = e.klen.to_le_bytes();
            if self.leaf {
                match e.run {
                    None => {
                        let v = e.vlen.to_le_bytes();
                        out.extend_from_slice(&[k[0], k[1], 0, 0, v[0], v[1], v[2], v[3]]);
                        // Key and value sit together in the arena, as in the cell.
                        let s = e.at as usize;
                        out.extend_from_slice(&self.bytes[s..s + e.held()]);
                    }
                    Some(r) => {
                        let v = (r.len as u32).to_le_bytes();
                        out.extend_from_slice(&[
                            k[0],
                            k[1],
                            FLAG_OVERFLOW,
                            0,
                            v[0],
                            v[1],
                            v[2],
                            v[3],
                        ]);
                        let s = e.at as usize;
                        out.extend_from_slice(&self.bytes[s..s + e.klen as usize]);
                        out.extend_from_slice(&r.page.to_le_bytes());
                    }
                }
            } else {
                let child = match self.children[i] {
                    Child::Page(p) => p,
                    Child::Node(n) => page_of(n),
                };
                let c = child.to_le_bytes();
                out.extend_from_slice(&[
                    k[0], k[1], c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
                ]);
                let s = e.at as usize;
                out.extend_from_slice(&self.bytes[s..s + e.klen as usize]);
            }
        }
        debug_assert_eq!(out.len(), start + page_size);
        larch_pager::set_page_checksum(&mut out[start..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(n: usize) -> Node {
        let mut node = Node::empty(9, true, PageRole::Data);
        for i in 0..n {
            node.push(format!("key{i:04}").as_bytes(), Val::Inline(&[i as u8; 40]));
        }
        node.recompute_size();
        node
    }

    #[test]
    fn overwrites_and_splits_keep_every_key_and_value_once_dead_bytes_are_shed() {
        let mut node = leaf(200);
        // Values of another length go to the end of the arena: the old ones die.
        for i in 0..200 {
            node.set_val(i, Val::Inline(&[i as u8; 41]));
        }
        let right = node.split_off(50, 10);
        assert_eq!((node.len(), right.len()), (50, 150));
        for i in 0..200 {
            let (n, j) = if i < 50 { (&node, i) } else { (&right, i - 50) };
            assert_eq!(n.key(j), format!("key{i:04}").as_bytes());
            assert_eq!(n.val(j), Val::Inline(&[i as u8; 41]));
        }
        assert!(node.bytes.len() - node.dead >= 50 * 48);
        assert!(node.dead <= node.bytes.len());
    }

    #[test]
    fn a_decoded_page_encodes_back_to_the_same_bytes() {
        let mut node = leaf(30);
        node.set_val(
            3,
            Val::Overflow {
                page: 77,
                len: 5000,
                fresh: false,
            },
        );
        node.recompute_size();
        let mut buf = Vec::new();
        node.encode(&mut buf, 4096, 5, |_| 0);
        let page = NodePage::parse(9, &buf, PageRole::Data).unwrap();
        let back = Node::decode(&page, 9, PageRole::Data).unwrap();
        assert_eq!(back.size, node.size);
        let mut again = vec![0xff; 3];
        back.encode(&mut again, 4096, 5, |_| 0);
        let again = again.split_off(3);
        assert_eq!(buf, again);
        assert_eq!(back.run(3).map(|r| r.page), Some(77));
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
