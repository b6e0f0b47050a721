//! The dirty node: the in-memory, editable form of a branch or leaf that a write transaction
//! copies a page into (`Node::decode`), edits, and encodes back into a page at commit
//! (`Node::encode`), with the child pointers (`Child`) and values (`Val`, `Run`) it holds. The
//! committed page it reads from and writes to is `node_page.rs` (the split of bbolt's node.go
//! and page.go, or redb's `LeafBuilder` and `LeafAccessor`); the byte layout it encodes is
//! specified in docs/format.md.

use larch_pager::{PageHeader, PageRole, PageType, PAGE_HEADER_SIZE};

use crate::error::{Error, Result};
use crate::node_page::{
    compare_keys, u16_at, NodePage, BRANCH_CELL, BRANCH_CHILD, FLAG_OVERFLOW, LEAF_CELL, SLOT,
};
use crate::{PageId, TxId};

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

/// Emptied buffers of nodes that finished transactions no longer need (the writer keeps them
/// in `WriterState::spare_nodes`): [`Node::decode_reusing`] takes them, so that copying a
/// page on write allocates nothing, for a one-key commit's path and for most of the leaves a
/// batch of inserts dirties. Buffers of at most two pages each are kept, up to
/// [`SpareNodes::MAX_BYTES`] in all: the most a writer holds between transactions.
#[derive(Debug, Default)]
pub struct SpareNodes {
    kept: Vec<(Vec<u8>, Vec<Ent>, Vec<Child>)>,
    /// Capacity of the kept buffers, in bytes.
    bytes: usize,
    /// The most dirty nodes one tree of the last transaction had ([`SpareNodes::arena_hint`]).
    arena_len: usize,
}

impl SpareNodes {
    /// The most bytes of buffers kept (at 4 KiB pages, about 3,200 nodes' worth: a load commit
    /// of 1,000 random keys into a tree of 500,000 dirties about 900 leaves, a commit of a few
    /// thousand index entries more).
    pub const MAX_BYTES: usize = 16 << 20;

    /// The most dirty nodes a tree's arena reserves room for at once.
    const MAX_ARENA_HINT: usize = 1 << 16;

    /// Note the most dirty nodes one tree of a finished transaction had.
    pub fn note_arena_len(&mut self, len: usize) {
        self.arena_len = len.min(Self::MAX_ARENA_HINT);
    }

    /// How many dirty nodes a tree's arena that is growing past a few should make room for:
    /// a quarter more than the last transaction's largest had, so that a transaction like
    /// the last one grows it once instead of doubling it from empty (each doubling copies
    /// every node).
    pub fn arena_hint(&self) -> usize {
        self.arena_len + self.arena_len / 4
    }

    /// Keep `n`'s buffers, emptied, unless enough are kept, they grew past two pages, or
    /// there are none (a placeholder: a leaf written before the commit, `Txn::spill`).
    pub fn put(&mut self, n: Node, page_size: usize) {
        let Node {
            mut bytes,
            mut ents,
            mut children,
            ..
        } = n;
        let size = Self::size(&bytes, &ents, &children);
        if size == 0
            || self.bytes + size > Self::MAX_BYTES
            || bytes.capacity() > 2 * page_size
            || ents.capacity() > page_size / 4
        {
            return;
        }
        bytes.clear();
        ents.clear();
        children.clear();
        self.bytes += size;
        self.kept.push((bytes, ents, children));
    }

    /// The buffers of a kept node, if any.
    fn take(&mut self) -> Option<(Vec<u8>, Vec<Ent>, Vec<Child>)> {
        let b = self.kept.pop()?;
        self.bytes -= Self::size(&b.0, &b.1, &b.2);
        Some(b)
    }

    fn size(bytes: &Vec<u8>, ents: &Vec<Ent>, children: &Vec<Child>) -> usize {
        bytes.capacity()
            + ents.capacity() * std::mem::size_of::<Ent>()
            + children.capacity() * std::mem::size_of::<Child>()
    }
}

/// The nodes the writer's last commits wrote, kept as they were encoded, so that the next
/// transactions copy a page they wrote without decoding it again (`Txn::touch`): a one-key
/// commit copies the same root, upper branches and catalog leaf as the commit before it, and
/// decoding those (~150 separators each) was a third of an Async overwrite's instructions; a
/// load commit of 1,000 random keys copies nearly every lowest branch the commit before it
/// wrote. Branches are kept from every commit and leaves from commits of at most
/// [`WrittenNodes::SMALL_COMMIT`] pages, oldest out first beyond [`WrittenNodes::MAX_BYTES`].
///
/// A kept node stands for page `page` only while that page is what the commit with txid
/// `txid` wrote there: pages are written only by commits, every commit under a txid no other
/// commit had (a failed commit keeps nothing here), so a page whose header carries that txid
/// still holds those bytes. `take` checks the header's txid, role, type and entry count;
/// anything else decodes the page.
#[derive(Debug, Default)]
pub struct WrittenNodes {
    kept: std::collections::HashMap<PageId, (TxId, Node), PageIdHash>,
    /// Pages in the order they were kept, with their txids; an entry whose page was taken or
    /// kept again since is skipped when it comes up.
    order: std::collections::VecDeque<(PageId, TxId)>,
    /// Buffer bytes of the kept nodes.
    bytes: usize,
}

/// Page ids hashed by one multiplication (they are not chosen by anyone who could collide
/// them on purpose, and the table's control bits come from the high bits it fills).
type PageIdHash = std::hash::BuildHasherDefault<PageIdHasher>;

#[derive(Debug, Default)]
pub struct PageIdHasher(u64);

impl std::hash::Hasher for PageIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl WrittenNodes {
    /// A commit of at most this many pages keeps its leaves too (a few one-key commits' paths).
    pub const SMALL_COMMIT: usize = 32;

    /// The most buffer bytes kept: at 4 KiB pages about 800 branches of ~150 separators,
    /// every lowest branch of a tree of 500,000 harness documents.
    pub const MAX_BYTES: usize = 8 << 20;

    /// The node written to `page` by commit `txid`, if it is kept and matches the page's
    /// header (`role`, `leaf`, `count` entries). It leaves the set: the transaction edits it.
    #[inline]
    pub fn take(
        &mut self,
        page: PageId,
        txid: TxId,
        role: PageRole,
        leaf: bool,
        count: usize,
    ) -> Option<Node> {
        if self.kept.is_empty() {
            return None;
        }
        let (t, n) = self.kept.remove(&page)?;
        self.bytes -= n.buffer_bytes();
        if t == txid && n.role == role && n.leaf == leaf && n.ents.len() == count {
            return Some(n);
        }
        // The page was written again since: this node is stale.
        None
    }

    /// Keep `n`, written to its page by commit `txid`; the oldest kept nodes go to `spare`
    /// beyond [`WrittenNodes::MAX_BYTES`].
    pub fn keep(&mut self, txid: TxId, n: Node, spare: &mut SpareNodes, page_size: usize) {
        let page = n.page;
        self.bytes += n.buffer_bytes();
        if let Some((_, old)) = self.kept.insert(page, (txid, n)) {
            // An older node of the same page (the page was freed and written again).
            self.bytes -= old.buffer_bytes();
            spare.put(old, page_size);
        }
        self.order.push_back((page, txid));
        while self.bytes > Self::MAX_BYTES {
            let Some((p, t)) = self.order.pop_front() else {
                break;
            };
            if self.kept.get(&p).is_some_and(|(kt, _)| *kt == t) {
                if let Some((_, old)) = self.kept.remove(&p) {
                    self.bytes -= old.buffer_bytes();
                    spare.put(old, page_size);
                }
            }
        }
        if self.order.len() > 2 * self.kept.len() + 64 {
            let kept = &self.kept;
            self.order
                .retain(|(p, t)| kept.get(p).is_some_and(|(kt, _)| kt == t));
        }
    }

    /// Drop what is kept for `page` (a commit wrote it and did not keep its node).
    #[inline]
    pub fn forget(&mut self, page: PageId) {
        if self.kept.is_empty() {
            return;
        }
        if let Some((_, old)) = self.kept.remove(&page) {
            self.bytes -= old.buffer_bytes();
        }
    }
}

/// One entry of a dirty node: where its key and value sit in the node's byte arena. An inline
/// value follows the key; for a value in an overflow run, the run's first page id follows the
/// key (8 bytes, little-endian, as in the page's cell) and `vlen` is the value's length.
/// Twenty-four bytes: a transaction's dirty leaves cost little more than their pages.
#[derive(Clone, Copy, Debug)]
struct Ent {
    /// The key's first eight bytes as a big-endian number, zeros past its end ([`key_prefix`]):
    /// a search decides most probes on it without reading the key in the arena, a cache
    /// miss of its own in a tree much larger than the caches.
    pre: u64,
    /// Offset of the key in `Node::bytes`.
    at: u32,
    /// Inline value length, or the overflow value's length (0 in branches).
    vlen: u32,
    klen: u16,
    /// `OVERFLOW`, `FRESH`.
    flags: u8,
}

/// The first eight bytes of `key`, big-endian, zeros past its end: where two keys' prefixes
/// differ, they order as the keys do (a key that ends inside the eight bytes is a prefix of any
/// longer key with the same bytes, and the zero padding sorts it first or equal); where they
/// are equal the keys must be compared.
#[inline(always)]
fn key_prefix(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(k) => u64::from_be_bytes(*k),
        None => {
            let mut b = [0u8; 8];
            b[..key.len()].copy_from_slice(key);
            u64::from_be_bytes(b)
        }
    }
}

/// [`key_prefix`] of the `klen`-byte key at `at` in `b`, with one load where eight bytes lie
/// there (decode does it for every entry of every page it copies); 0 for a key outside `b`
/// (decode fails then anyway).
#[inline(always)]
fn key_prefix_at(b: &[u8], at: usize, klen: usize) -> u64 {
    match b.get(at..).and_then(|c| c.first_chunk::<8>()) {
        Some(k) => {
            // Zero the bytes past the key's end: shifting by 64 (klen >= 8) keeps them all.
            let keep = (!0u64).checked_shr(8 * klen.min(8) as u32).unwrap_or(0);
            u64::from_be_bytes(*k) & !keep
        }
        None => b.get(at..at + klen).map_or(0, key_prefix),
    }
}

/// The value is in an overflow run.
const OVERFLOW: u8 = 1;
/// That run was written by this transaction.
const FRESH: u8 = 2;

impl Ent {
    fn overflow(&self) -> bool {
        self.flags & OVERFLOW != 0
    }

    /// Bytes after the key in the arena.
    fn stored(&self) -> usize {
        if self.overflow() {
            8
        } else {
            self.vlen as usize
        }
    }

    fn held(&self) -> usize {
        self.klen as usize + self.stored()
    }
}

/// The error `Node::decode` reports for `page`: the first slot whose offset points outside
/// the cells, or whose cell runs past the end of the page (the checks of `NodePage::entry`
/// and `NodePage::child`, in their order).
#[cold]
fn decode_error(page: &NodePage<'_>) -> Error {
    let b = page.bytes;
    let first_cell = PAGE_HEADER_SIZE + page.count * SLOT;
    for i in 0..page.count {
        let Some(off) =
            u16_at(b, PAGE_HEADER_SIZE + i * SLOT).filter(|&o| o >= first_cell && o < b.len())
        else {
            return Error::corrupt(page.id, format!("cell offset {i} out of the page"));
        };
        let fits = if page.leaf {
            b.get(off..)
                .and_then(|c| c.first_chunk::<LEAF_CELL>())
                .is_some_and(|h| {
                    let klen = u16::from_le_bytes([h[0], h[1]]) as usize;
                    let vlen = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
                    let stored = if h[2] & FLAG_OVERFLOW != 0 { 8 } else { vlen };
                    off + LEAF_CELL + klen + stored <= b.len()
                })
        } else {
            let klen = if i == 0 { Some(0) } else { u16_at(b, off) };
            klen.is_some_and(|k| off + BRANCH_CELL + k <= b.len())
        };
        if !fits {
            return page.bad(i);
        }
    }
    Error::corrupt(page.id, "slots run past the end of the page")
}

/// The zeros a page is encoded over.
static ZERO_PAGE: [u8; larch_pager::MAX_PAGE_SIZE] = [0; larch_pager::MAX_PAGE_SIZE];

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
    /// Branch children. In a node whose arena is its page image (`image`), a `Child::Page`
    /// is the page id its cell in the arena holds: a child that moves to another page is a
    /// `Child::Node` (a dirty node) until [`Node::settle_written`] writes its new id into the
    /// cell, so encoding the image sets only the dirty children's ids.
    pub children: Vec<Child>,
    /// Encoded size of slots and cells (the header excluded); every edit keeps it.
    size: usize,
    /// False once merged away: not written at commit.
    pub live: bool,
    /// The tree it belongs to.
    pub role: PageRole,
    /// Copied from a page the previous commit wrote: likely copied by the next commit too
    /// (`Txn::gather_hot_pages`).
    pub hot: bool,
    /// Filled by keys in ascending order and left full behind them (a sorted append's nodes,
    /// the left half of a split at the end of the tree): a page later commits seldom rewrite,
    /// written into large page-cache folios (`Pager::write_pages_in_order`).
    pub sequential: bool,
    /// `bytes` is still the page this node was decoded from, edited in place: every entry's
    /// slot and cell lie in it, in key order, so `encode` copies it and sets only the header
    /// and (branch) the child ids instead of rebuilding every cell. Edits that keep it so:
    /// an inline value overwritten with one of the same length, a leaf entry inserted whose
    /// cell fits the free gap (`insert_entry`), a child pointer changed. Any other edit
    /// appends to or rebuilds the arena and ends it.
    image: bool,
    /// With `image`: offset of the lowest cell, the end of the free gap.
    low: usize,
    /// Every entry's `Ent::pre` is its key's prefix, so searches may decide on it. A branch
    /// copied from a page is not: a one-key commit copies two or three branches of ~200
    /// separators and searches each once, and their prefixes would cost it more than they
    /// save (8% of an Async one-key overwrite's instructions); branches are few and stay in
    /// the caches, where a leaf search in a large dirty tree misses on every key it reads.
    /// Entries made by edits always carry their prefix; moving entries out of a node
    /// without them takes the flag along; [`Node::child_index_counted`] gives a branch its
    /// prefixes once it has been searched [`PREFIX_AFTER`] times.
    prefixed: bool,
    /// Searches of this node through [`Node::child_index_counted`] while not `prefixed`.
    searches: u8,
}

/// An arena that must grow ([`Node::make_room`]) doubles up to this size, as a `Vec` does,
/// and past it grows by a quarter of what it then holds: a leaf's live bytes stay below a
/// page, so doubling a nearly full leaf's arena would leave half of it unused.
const SMALL_ARENA: usize = 2048;
/// How many entries a node's entry index doubles up to before it too grows by a quarter.
const SMALL_INDEX: usize = 8;

/// Capacity for an arena or index that must hold `want`: double up to `small`, then a
/// quarter more.
#[inline]
fn grown(want: usize, small: usize) -> usize {
    if want < small {
        (2 * want).max(8)
    } else {
        want + want / 4
    }
}

/// Searches of a branch copied without prefixes after which it computes them: a one-key
/// commit searches each branch once, a bulk insert thousands of times.
const PREFIX_AFTER: u8 = 8;

impl Node {
    /// Bytes of heap its buffers hold (their capacity).
    pub fn heap_bytes(&self) -> usize {
        SpareNodes::size(&self.bytes, &self.ents, &self.children)
    }

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
            hot: false,
            sequential: false,
            image: false,
            low: 0,
            prefixed: true,
            searches: 0,
        }
    }

    /// Bytes leaf entry `key`/`val` takes.
    pub fn leaf_entry_size(key: &[u8], val: &Val<'_>) -> usize {
        Node::leaf_entry_len(key.len(), val.stored_len())
    }

    /// Bytes a leaf entry takes with a key of `klen` bytes and `stored` bytes after it in the
    /// cell (the inline value, or 8 for an overflow run's first page).
    pub fn leaf_entry_len(klen: usize, stored: usize) -> usize {
        SLOT + LEAF_CELL + klen + stored
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

    /// The arena's bytes are what the entries hold plus the dead ones (tests: growth and
    /// shedding decide by `dead`).
    #[cfg(test)]
    fn dead_holds(&self) -> bool {
        self.dead + self.ents.iter().map(Ent::held).sum::<usize>() == self.bytes.len()
    }

    /// Every entry's cached prefix is its key's (tests: a key edited without its prefix
    /// would misorder searches).
    #[cfg(test)]
    fn prefixes_hold(&self) -> bool {
        !self.prefixed || (0..self.len()).all(|i| self.ents[i].pre == key_prefix(self.key(i)))
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
        match self.run_of(e) {
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

    fn run_of(&self, e: &Ent) -> Option<Run> {
        if !e.overflow() {
            return None;
        }
        let s = e.at as usize + e.klen as usize;
        let mut page = [0u8; 8];
        page.copy_from_slice(&self.bytes[s..s + 8]);
        Some(Run {
            page: u64::from_le_bytes(page),
            len: e.vlen as u64,
            fresh: e.flags & FRESH != 0,
        })
    }

    /// The overflow run of leaf entry `i`, if its value is not inline.
    #[inline]
    pub fn run(&self, i: usize) -> Option<Run> {
        self.run_of(&self.ents[i])
    }

    /// Every overflow run the leaf refers to.
    pub fn runs(&self) -> impl Iterator<Item = Run> + '_ {
        self.ents.iter().filter_map(|e| self.run_of(e))
    }

    /// The overflow runs this transaction wrote that the leaf refers to (none in a branch,
    /// whose entries hold no values: its entries are not looked at).
    pub fn fresh_runs(&self) -> impl Iterator<Item = Run> + '_ {
        let ents = if self.leaf { &self.ents[..] } else { &[] };
        ents.iter()
            .filter(|e| e.flags & FRESH != 0)
            .filter_map(|e| self.run_of(e))
    }

    /// After [`Node::encode`] wrote this node as `page`: unless its arena is still its page
    /// image, make `page` the arena, with every entry pointing at its cell there, as decoding
    /// `page` would. Nothing else changes (entries, prefixes, children, size), so the node
    /// encodes to the same page; but it encodes by one copy again, and a kept node
    /// ([`WrittenNodes`]) stays cheap through the commits that take it.
    pub fn reimage(&mut self, page: &[u8]) {
        if self.image && self.bytes.len() == page.len() {
            return;
        }
        debug_assert!(PAGE_HEADER_SIZE + self.size <= page.len());
        self.bytes.clear();
        self.bytes.extend_from_slice(page);
        let hdr = if self.leaf { LEAF_CELL } else { BRANCH_CELL };
        let (mut low, mut held) = (page.len(), 0);
        for (i, e) in self.ents.iter_mut().enumerate() {
            let at = PAGE_HEADER_SIZE + i * SLOT;
            let off = u16::from_le_bytes([page[at], page[at + 1]]) as usize;
            low = low.min(off);
            e.at = (off + hdr) as u32;
            held += e.held();
        }
        self.dead = self.bytes.len() - held;
        self.low = low;
        self.image = true;
    }

    /// Bytes of the buffers this node holds (what keeping it costs).
    fn buffer_bytes(&self) -> usize {
        SpareNodes::size(&self.bytes, &self.ents, &self.children)
    }

    /// Make this node, just written by a commit, what decoding its page would give the next
    /// transaction in the ways that matter: every dirty child's page id resolved (`page_of`),
    /// and no entry marked as written by this transaction. False, and the node unchanged,
    /// when an entry refers to an overflow run this transaction wrote (such nodes are not
    /// kept: [`WrittenNodes`]).
    ///
    /// Nor is a node whose arena is no longer its page image (`image`; the commit re-images
    /// the nodes it means to keep, [`Node::reimage`]): encoding it rebuilds every cell and
    /// zeroes the gap, which costs more than decoding the page it was written to, and it
    /// would stay that way through every commit that took it again.
    pub fn settle_written(
        &mut self,
        page_size: usize,
        page_of: impl Fn(NodeIdx) -> PageId,
    ) -> bool {
        let image = self.image && self.bytes.len() == page_size;
        if !(self.live && image) || (self.leaf && self.ents.iter().any(|e| e.flags & FRESH != 0)) {
            return false;
        }
        // A dirty child's page goes into its cell of the arena too: in an image node a
        // `Child::Page` is the id its cell holds (`children`), so encode leaves it.
        for (e, c) in self.ents.iter().zip(&mut self.children) {
            if let Child::Node(i) = *c {
                let p = page_of(i);
                *c = Child::Page(p);
                let at = e.at as usize - BRANCH_CELL + BRANCH_CHILD;
                self.bytes[at..at + 8].copy_from_slice(&p.to_le_bytes());
            }
        }
        self.searches = 0;
        true
    }

    /// Branch: child `i` is written at `page` now (a leaf `Txn::spill` wrote before the
    /// commit), so it is a `Child::Page` from here on, and in its cell of the arena too when
    /// the arena is the page image (as [`Node::settle_written`] does for every dirty child).
    pub fn set_child_written(&mut self, i: usize, page: PageId, page_size: usize) {
        self.children[i] = Child::Page(page);
        if self.image && self.bytes.len() == page_size {
            let at = self.ents[i].at as usize - BRANCH_CELL + BRANCH_CHILD;
            self.bytes[at..at + 8].copy_from_slice(&page.to_le_bytes());
        }
    }

    /// Same type, role, entries (keys, values, overflow references) and children as `other`:
    /// what a kept node must share with its page decoded (checked in debug builds and unit
    /// tests).
    #[cfg(any(test, debug_assertions))]
    pub fn same_entries(&self, other: &Node) -> bool {
        self.leaf == other.leaf
            && self.role == other.role
            && self.len() == other.len()
            && self.children == other.children
            && (0..self.len()).all(|i| {
                self.key(i) == other.key(i)
                    && self.val(i) == other.val(i)
                    && self.entry_size(i) == other.entry_size(i)
            })
            && self.size() == other.size()
    }

    /// Leaf: position of `key`, or where it would be inserted.
    #[inline]
    pub fn search(&self, key: &[u8]) -> std::result::Result<usize, usize> {
        if !self.prefixed {
            return self.ents.binary_search_by(|e| {
                compare_keys(
                    &self.bytes[e.at as usize..e.at as usize + e.klen as usize],
                    key,
                )
            });
        }
        let pre = key_prefix(key);
        self.ents.binary_search_by(|e| match e.pre.cmp(&pre) {
            std::cmp::Ordering::Equal => compare_keys(
                &self.bytes[e.at as usize..e.at as usize + e.klen as usize],
                key,
            ),
            o => o,
        })
    }

    /// Branch: the child holding `key` (the last separator <= key; separator 0 is ignored).
    #[inline]
    pub fn child_index(&self, key: &[u8]) -> usize {
        if !self.prefixed {
            return self.ents[1..].partition_point(|e| {
                compare_keys(
                    &self.bytes[e.at as usize..e.at as usize + e.klen as usize],
                    key,
                ) != std::cmp::Ordering::Greater
            });
        }
        let pre = key_prefix(key);
        self.ents[1..].partition_point(|e| match e.pre.cmp(&pre) {
            std::cmp::Ordering::Equal => {
                compare_keys(
                    &self.bytes[e.at as usize..e.at as usize + e.klen as usize],
                    key,
                ) != std::cmp::Ordering::Greater
            }
            o => o == std::cmp::Ordering::Less,
        })
    }

    /// [`Node::child_index`] on the path of an edit: a branch without prefixes that has been
    /// searched [`PREFIX_AFTER`] times computes them first.
    pub fn child_index_counted(&mut self, key: &[u8]) -> usize {
        if !self.prefixed {
            self.searches = self.searches.saturating_add(1);
            if self.searches >= PREFIX_AFTER {
                self.set_prefixes();
            }
        }
        self.child_index(key)
    }

    /// Give every entry its key's prefix.
    fn set_prefixes(&mut self) {
        for e in &mut self.ents {
            e.pre = key_prefix(&self.bytes[e.at as usize..e.at as usize + e.klen as usize]);
        }
        self.prefixed = true;
    }

    /// Bytes entry `i` takes.
    pub fn entry_size(&self, i: usize) -> usize {
        let e = &self.ents[i];
        if self.leaf {
            SLOT + LEAF_CELL + e.held()
        } else {
            SLOT + BRANCH_CELL + e.klen as usize
        }
    }

    /// Encoded size of the slots and cells (the page header excluded).
    #[inline]
    pub fn size(&self) -> usize {
        self.size
    }

    /// Recompute `size` from the entries.
    fn recompute_size(&mut self) {
        self.size = (0..self.ents.len()).map(|i| self.entry_size(i)).sum();
    }

    /// Room in the arena for `need` more bytes. Where it would have to grow, its live bytes
    /// are copied into a new arena sized for them, `need` and a quarter more, instead of
    /// doubling the old one dead bytes and all: a leaf of a large transaction holds about
    /// a page of arena, not two (docs/performance.md, "Memory of a large transaction").
    #[inline]
    fn make_room(&mut self, need: usize) {
        if self.bytes.len() + need > self.bytes.capacity() {
            self.regrow(need);
        }
    }

    /// Room for one more entry, grown by the same rule as the arena.
    #[inline]
    fn ents_room(&mut self) {
        if self.ents.len() == self.ents.capacity() {
            let n = self.ents.len();
            self.ents.reserve_exact(grown(n + 1, SMALL_INDEX) - n);
        }
    }

    #[inline(never)]
    fn regrow(&mut self, need: usize) {
        let live = self.bytes.len().saturating_sub(self.dead);
        // A branch's arena is mostly its page's headers (a copied branch of ~150 short
        // separators): copying entry by entry would cost far more than it saves, and
        // branches are few.
        if !self.leaf || self.dead * 8 < self.bytes.len() {
            // Little to drop: grow in place where the allocator can.
            let cap = grown(self.bytes.len() + need, SMALL_ARENA);
            self.bytes.reserve_exact(cap - self.bytes.len());
            return;
        }
        self.compact(grown(live + need, SMALL_ARENA));
    }

    /// Copy the live bytes into a new arena of `cap` bytes, in key order.
    fn compact(&mut self, cap: usize) {
        let mut bytes = Vec::with_capacity(cap);
        for e in &mut self.ents {
            let s = e.at as usize;
            e.at = bytes.len() as u32;
            bytes.extend_from_slice(&self.bytes[s..s + e.held()]);
        }
        self.bytes = bytes;
        self.dead = 0;
        self.image = false;
    }

    fn ent(&mut self, key: &[u8], val: Val<'_>) -> Ent {
        self.make_room(key.len() + val.stored_len());
        // The entry goes past the page: the arena is no longer the page.
        self.image = false;
        let at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(key);
        let (vlen, flags) = match val {
            Val::Inline(v) => {
                self.bytes.extend_from_slice(v);
                (v.len() as u32, 0)
            }
            Val::Overflow { page, len, fresh } => {
                self.bytes.extend_from_slice(&page.to_le_bytes());
                // Values are at most u32::MAX bytes (checked before they are written).
                (len as u32, OVERFLOW | if fresh { FRESH } else { 0 })
            }
        };
        Ent {
            pre: key_prefix(key),
            at,
            vlen,
            klen: key.len() as u16,
            flags,
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
            self.compact(self.bytes.len() - self.dead);
        }
    }

    /// Leaf: insert `key`/`val` at position `i`.
    pub fn insert_entry(&mut self, i: usize, key: &[u8], val: Val<'_>) {
        if self.insert_in_image(i, key, val) {
            return;
        }
        let e = self.ent(key, val);
        self.ents_room();
        self.ents.insert(i, e);
        self.size += self.entry_size(i);
    }

    /// `insert_entry` into the page image when the new cell fits its free gap: the cell goes
    /// just below the lowest one and slot `i` is opened in the slot array, as LMDB's
    /// `mdb_node_add` does. False (nothing changed) when the node is no image or the cell
    /// does not fit.
    fn insert_in_image(&mut self, i: usize, key: &[u8], val: Val<'_>) -> bool {
        let stored = val.stored_len();
        let cell = LEAF_CELL + key.len() + stored;
        let slots = PAGE_HEADER_SIZE + self.ents.len() * SLOT;
        if !self.image || !self.leaf || self.low < slots + SLOT + cell {
            return false;
        }
        let at = self.low - cell;
        let (vlen, flags, disk_flags) = match val {
            Val::Inline(v) => (v.len() as u32, 0, 0),
            // Values are at most u32::MAX bytes (checked before they are written).
            Val::Overflow { len, fresh, .. } => (
                len as u32,
                OVERFLOW | if fresh { FRESH } else { 0 },
                FLAG_OVERFLOW,
            ),
        };
        let k = (key.len() as u16).to_le_bytes();
        let v = vlen.to_le_bytes();
        let b = &mut self.bytes;
        b[at..at + LEAF_CELL].copy_from_slice(&[k[0], k[1], disk_flags, 0, v[0], v[1], v[2], v[3]]);
        let ks = at + LEAF_CELL;
        b[ks..ks + key.len()].copy_from_slice(key);
        let vs = ks + key.len();
        match val {
            Val::Inline(v) => b[vs..vs + v.len()].copy_from_slice(v),
            Val::Overflow { page, .. } => b[vs..vs + 8].copy_from_slice(&page.to_le_bytes()),
        }
        let slot = PAGE_HEADER_SIZE + i * SLOT;
        b.copy_within(slot..slots, slot + SLOT);
        b[slot..slot + SLOT].copy_from_slice(&(at as u16).to_le_bytes());
        self.low = at;
        self.ents_room();
        self.ents.insert(
            i,
            Ent {
                pre: key_prefix(key),
                at: ks as u32,
                vlen,
                klen: key.len() as u16,
                flags,
            },
        );
        self.size += SLOT + cell;
        // The gap's bytes were dead; the key and value are held now.
        self.dead -= key.len() + stored;
        true
    }

    /// Make room for `bytes` more bytes of keys and values and `entries` more entries.
    pub fn reserve(&mut self, bytes: usize, entries: usize) {
        self.bytes.reserve(bytes);
        self.ents.reserve(entries);
    }

    /// Room for one more entry of `size` bytes within `capacity`? An empty node always
    /// has room. The fill rule of nodes built in key order (compaction's copy, `append`):
    /// each node takes entries until the next would not fit, then the next node starts.
    #[inline]
    pub fn has_room(&self, size: usize, capacity: usize) -> bool {
        self.ents.is_empty() || self.size + size <= capacity
    }

    /// Branch built in key order: add `child` after the last child, with separator `sep`
    /// (ignored for the first child, whose separator is always empty).
    pub fn push_child(&mut self, sep: &[u8], child: Child) {
        let key = if self.ents.is_empty() { &[][..] } else { sep };
        self.push(key, Val::Inline(&[]));
        self.children.push(child);
    }

    /// Add an entry (leaf) or separator (branch) after the last one.
    pub fn push(&mut self, key: &[u8], val: Val<'_>) {
        let e = self.ent(key, val);
        self.ents_room();
        self.ents.push(e);
        self.size += self.entry_size(self.ents.len() - 1);
    }

    /// Leaf: replace the value of entry `i`; the key stays. An inline value of the same
    /// length is overwritten where it is.
    pub fn set_val(&mut self, i: usize, val: Val<'_>) {
        let e = self.ents[i];
        if let (Val::Inline(v), false) = (val, e.overflow()) {
            if v.len() == e.vlen as usize {
                let s = e.at as usize + e.klen as usize;
                self.bytes[s..s + v.len()].copy_from_slice(v);
                return;
            }
        }
        // Before the key is copied: moving the arena after it would drop the copy.
        self.make_room(e.klen as usize + val.stored_len());
        let e = self.ents[i];
        let at = self.bytes.len() as u32;
        self.bytes
            .extend_from_within(e.at as usize..e.at as usize + e.klen as usize);
        let new = self.ent(&[], val);
        self.size -= self.entry_size(i);
        self.ents[i] = Ent {
            pre: e.pre,
            at,
            klen: e.klen,
            vlen: new.vlen,
            flags: new.flags,
        };
        self.size += self.entry_size(i);
        self.forget(e);
    }

    /// Branch: replace separator `i`. A key no longer than the old one is written over it,
    /// so evening out two leaves does not grow (and soon shed) the parent's arena.
    pub fn set_key(&mut self, i: usize, key: &[u8]) {
        let old = self.ents[i];
        if key.len() <= old.klen as usize {
            // The cell's length field would disagree.
            self.image = false;
            let s = old.at as usize;
            self.bytes[s..s + key.len()].copy_from_slice(key);
            let shorter = old.klen as usize - key.len();
            self.ents[i].klen = key.len() as u16;
            self.ents[i].pre = key_prefix(key);
            self.size -= shorter;
            self.dead += shorter;
            return;
        }
        let e = self.ent(key, Val::Inline(&[]));
        self.size -= self.entry_size(i);
        self.ents[i] = e;
        self.size += self.entry_size(i);
        self.forget(old);
    }

    /// Branch: insert separator `key` with child `child` at position `i`.
    pub fn insert_child(&mut self, i: usize, key: &[u8], child: Child) {
        let e = self.ent(key, Val::Inline(&[]));
        self.ents_room();
        self.ents.insert(i, e);
        self.children.insert(i, child);
        self.size += self.entry_size(i);
    }

    /// Remove entry (and, in a branch, child) `i`.
    pub fn remove(&mut self, i: usize) {
        self.image = false;
        self.size -= self.entry_size(i);
        let e = self.ents.remove(i);
        if !self.leaf {
            self.children.remove(i);
        }
        self.forget(e);
    }

    /// Branch: remove separator `i` alone (children are the caller's to fix).
    pub fn remove_key(&mut self, i: usize) {
        self.image = false;
        self.size -= self.entry_size(i);
        let e = self.ents.remove(i);
        self.forget(e);
    }

    /// Move entries `at..` (and their children) into a new node on `page`.
    pub fn split_off(&mut self, at: usize, page: PageId) -> Node {
        self.image = false;
        let mut right = Node::empty(page, self.leaf, self.role);
        right.prefixed = self.prefixed;
        let moved = self.ents.split_off(at);
        let held: usize = moved.iter().map(Ent::held).sum();
        // Room for the inserts to come, as `make_room` would grow it.
        right.bytes.reserve_exact(grown(held, SMALL_ARENA));
        right
            .ents
            .reserve_exact(grown(moved.len() + 1, SMALL_INDEX));
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
        // Where a quarter of the arena or more is dead now (a split in the middle, not at the
        // end of keys in order), this node keeps only its live bytes, or a split leaf would
        // hold its old arena through the inserts that fill it again.
        self.dead += held;
        if self.leaf && self.dead * 4 >= self.bytes.len() {
            self.compact(grown(self.bytes.len() - self.dead, SMALL_ARENA));
        } else {
            self.shed();
        }
        self.recompute_size();
        right.recompute_size();
        right
    }

    /// Move entries `from` (and their children) into `dst`, before its entry `at`. Only the
    /// moved entries' bytes are copied, so evening out two siblings costs what moves.
    pub fn move_entries(&mut self, from: std::ops::Range<usize>, dst: &mut Node, at: usize) {
        self.image = false;
        dst.image = false;
        dst.prefixed &= self.prefixed;
        let mut held = 0;
        let mut size = 0;
        for e in &self.ents[from.clone()] {
            held += e.held();
            size += if self.leaf {
                SLOT + LEAF_CELL + e.held()
            } else {
                SLOT + BRANCH_CELL + e.klen as usize
            };
        }
        dst.make_room(held);
        let mut ents = Vec::with_capacity(dst.ents.len() + from.len() + 1);
        ents.extend_from_slice(&dst.ents[..at]);
        for e in self.ents.drain(from.clone()) {
            let s = e.at as usize;
            let to = dst.bytes.len() as u32;
            dst.bytes.extend_from_slice(&self.bytes[s..s + e.held()]);
            ents.push(Ent { at: to, ..e });
        }
        ents.extend_from_slice(&dst.ents[at..]);
        dst.ents = ents;
        if !self.leaf {
            dst.children.splice(at..at, self.children.drain(from));
        }
        dst.size += size;
        self.size -= size;
        self.dead += held;
        self.shed();
    }

    /// Move every entry (and child) of `other` after this node's own.
    pub fn append(&mut self, other: &mut Node) {
        self.image = false;
        other.image = false;
        self.prefixed &= other.prefixed;
        self.make_room(other.bytes.len());
        let base = self.bytes.len() as u32;
        self.bytes.extend_from_slice(&other.bytes);
        self.dead += other.dead;
        self.ents.extend(other.ents.drain(..).map(|e| Ent {
            at: e.at + base,
            ..e
        }));
        self.children.append(&mut other.children);
        self.size += other.size;
        other.bytes.clear();
        other.dead = 0;
        other.size = 0;
    }

    /// Decode a committed page into an editable node that will be written to `new_page`.
    /// The page is copied whole into the arena (one copy, not one per entry); its entries
    /// point at their keys and values inside it, and the headers around them count as dead.
    /// A cell that does not fit the page is an error, as when reading it in place.
    #[cfg(test)]
    pub fn decode(page: &NodePage<'_>, new_page: PageId, role: PageRole) -> Result<Node> {
        Node::decode_reusing(page, new_page, role, &mut SpareNodes::default())
    }

    /// An empty node as [`Node::empty`], in the buffers of a node `spare` keeps when there is
    /// one (a sorted append's next leaf, in the buffers of the leaves it wrote before the
    /// commit: `Txn::spill`).
    pub fn empty_reusing(page: PageId, leaf: bool, role: PageRole, spare: &mut SpareNodes) -> Node {
        let mut n = Node::empty(page, leaf, role);
        if let Some((bytes, ents, children)) = spare.take() {
            (n.bytes, n.ents, n.children) = (bytes, ents, children);
        }
        n
    }

    /// [`Node::decode`] into the buffers of a node a finished transaction left in `spare`,
    /// when there is one, so that copying a page on write does not allocate.
    pub fn decode_reusing(
        page: &NodePage<'_>,
        new_page: PageId,
        role: PageRole,
        spare: &mut SpareNodes,
    ) -> Result<Node> {
        let mut n = Node::empty(new_page, page.leaf, role);
        if let Some((bytes, ents, children)) = spare.take() {
            (n.bytes, n.ents, n.children) = (bytes, ents, children);
        }
        // Room for a few more entries before the arena grows. A kept buffer too small for it
        // is replaced, not grown: `reserve` on an emptied Vec reallocates, and realloc copies
        // the old buffer's whole capacity (it cannot know the Vec is empty).
        let want = page.bytes.len() + page.bytes.len() / 8;
        if n.bytes.capacity() < want {
            n.bytes = Vec::with_capacity(want);
        }
        if n.ents.capacity() < page.count + 1 {
            n.ents = Vec::with_capacity(page.count + 1);
        }
        n.bytes.extend_from_slice(page.bytes);
        // One pass over the slots with the same checks as `NodePage::entry` and `child`,
        // noting only whether one failed (`decode_error` says which): with no branch out of
        // it, the loop keeps its state in registers and fills `ents` without a capacity
        // check per entry.
        let b = page.bytes;
        let first_cell = PAGE_HEADER_SIZE + page.count * SLOT;
        let slots = b
            .get(PAGE_HEADER_SIZE..first_cell)
            .ok_or_else(|| decode_error(page))?;
        let hdr = if page.leaf { LEAF_CELL } else { BRANCH_CELL };
        let mut ok = true;
        let mut held = 0;
        let mut low = b.len();
        if page.leaf {
            n.ents.extend(slots.chunks_exact(SLOT).map(|slot| {
                let off = u16::from_le_bytes([slot[0], slot[1]]) as usize;
                let head = b
                    .get(off..)
                    .and_then(|c| c.first_chunk::<LEAF_CELL>())
                    .copied()
                    .unwrap_or_default();
                let klen = u16::from_le_bytes([head[0], head[1]]) as usize;
                let vlen = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
                // An overflow cell holds the run's first page after the key, as the arena
                // does; an inline one the value.
                let overflow = head[2] & FLAG_OVERFLOW != 0;
                let stored = if overflow { 8 } else { vlen as usize };
                ok &= off >= first_cell && off + LEAF_CELL + klen + stored <= b.len();
                low = low.min(off);
                held += klen + stored;
                let ks = off + LEAF_CELL;
                Ent {
                    pre: key_prefix_at(b, ks, klen),
                    at: ks as u32,
                    vlen,
                    klen: klen as u16,
                    flags: if overflow { OVERFLOW } else { 0 },
                }
            }));
        } else {
            n.ents
                .extend(slots.chunks_exact(SLOT).enumerate().map(|(i, slot)| {
                    let off = u16::from_le_bytes([slot[0], slot[1]]) as usize;
                    // Separator 0 is empty whatever the page holds.
                    let klen = match b.get(off..).and_then(|c| c.first_chunk::<2>()) {
                        Some(k) if i > 0 => u16::from_le_bytes(*k) as usize,
                        _ => 0,
                    };
                    ok &= off >= first_cell && off + BRANCH_CELL + klen <= b.len();
                    held += klen;
                    let ks = off + BRANCH_CELL;
                    Ent {
                        pre: 0,
                        at: ks as u32,
                        vlen: 0,
                        klen: klen as u16,
                        flags: 0,
                    }
                }));
            if ok {
                if n.children.capacity() < page.count + 1 {
                    n.children = Vec::with_capacity(page.count + 1);
                }
                // Every cell's header lies in the page: its child id is there.
                n.children.extend(n.ents.iter().map(|e| {
                    let at = e.at as usize - BRANCH_CELL + BRANCH_CHILD;
                    let id = b.get(at..).and_then(|c| c.first_chunk::<8>());
                    Child::Page(id.map_or(0, |id| u64::from_le_bytes(*id)))
                }));
            }
        }
        if !ok {
            return Err(decode_error(page));
        }
        n.dead = n.bytes.len() - held;
        n.image = true;
        n.prefixed = page.leaf;
        n.low = low;
        // Every entry's slot and cell header, plus what it holds (`entry_size`).
        n.size = page.count * (SLOT + hdr) + held;
        debug_assert_eq!(
            n.size,
            (0..n.ents.len()).map(|i| n.entry_size(i)).sum::<usize>()
        );
        Ok(n)
    }

    /// Append the page this node encodes to (`page_size` bytes) to `out`; `page_of` gives the
    /// page of a dirty child. Entry 0's cell is highest in the page, the last entry's lowest,
    /// with the free gap (zeros) between the slots and the cells.
    pub fn encode(
        &self,
        out: &mut Vec<u8>,
        page_size: usize,
        txid: TxId,
        page_of: impl Fn(NodeIdx) -> PageId,
    ) {
        debug_assert_eq!(
            self.size,
            (0..self.ents.len())
                .map(|i| self.entry_size(i))
                .sum::<usize>(),
            "a node's kept size disagrees with its entries"
        );
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
        debug_assert!(
            PAGE_HEADER_SIZE + self.size <= page_size,
            "a dirty node outgrew its page"
        );
        // Zeros up to the lowest cell (header, slots, free gap); then the cells from the
        // last entry's (lowest) up to entry 0's, each one's slot set as it is appended. Only
        // the gap is zeroed, and each byte is written once.
        if self.image && self.bytes.len() == page_size {
            return self.encode_image(out, header, page_of);
        }
        let low = page_size - (self.size - self.ents.len() * SLOT);
        out.reserve(page_size);
        out.extend_from_slice(&ZERO_PAGE[..low]);
        header.write(&mut out[start..]);
        let slot_of = |i: usize| start + PAGE_HEADER_SIZE + i * SLOT;
        if self.leaf {
            for (i, e) in self.ents.iter().enumerate().rev() {
                let cell = (out.len() - start) as u16;
                out[slot_of(i)..slot_of(i) + SLOT].copy_from_slice(&cell.to_le_bytes());
                let k = e.klen.to_le_bytes();
                let v = e.vlen.to_le_bytes();
                let flags = if e.overflow() { FLAG_OVERFLOW } else { 0 };
                out.extend_from_slice(&[k[0], k[1], flags, 0, v[0], v[1], v[2], v[3]]);
                // Key and value (or the run's first page) sit together in the arena, as in
                // the cell.
                let at = e.at as usize;
                out.extend_from_slice(&self.bytes[at..at + e.held()]);
            }
        } else {
            debug_assert_eq!(self.ents.len(), self.children.len());
            for (i, (e, child)) in self.ents.iter().zip(&self.children).enumerate().rev() {
                let cell = (out.len() - start) as u16;
                out[slot_of(i)..slot_of(i) + SLOT].copy_from_slice(&cell.to_le_bytes());
                let child = match *child {
                    Child::Page(p) => p,
                    Child::Node(n) => page_of(n),
                };
                let k = e.klen.to_le_bytes();
                let c = child.to_le_bytes();
                out.extend_from_slice(&[
                    k[0], k[1], c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
                ]);
                let at = e.at as usize;
                out.extend_from_slice(&self.bytes[at..at + e.klen as usize]);
            }
        }
        debug_assert_eq!(out.len(), start + page_size);
        larch_pager::set_page_checksum(&mut out[start..]);
    }

    /// `encode` of a node whose arena is its page (`image`): the page with this header and,
    /// in a branch, each dirty child's page id set in its cell (a `Child::Page` is the id its
    /// cell holds already: `children`).
    fn encode_image(
        &self,
        out: &mut Vec<u8>,
        header: PageHeader,
        page_of: impl Fn(NodeIdx) -> PageId,
    ) {
        let start = out.len();
        out.extend_from_slice(&self.bytes);
        let page = &mut out[start..];
        header.write(page);
        if !self.leaf {
            debug_assert_eq!(self.ents.len(), self.children.len());
            for (e, child) in self.ents.iter().zip(&self.children) {
                // The child id sits between the cell's key length and its key.
                let at = e.at as usize - BRANCH_CELL + BRANCH_CHILD;
                match *child {
                    Child::Node(n) => page[at..at + 8].copy_from_slice(&page_of(n).to_le_bytes()),
                    Child::Page(p) => debug_assert_eq!(
                        page[at..at + 8],
                        p.to_le_bytes(),
                        "a clean child whose cell holds another page"
                    ),
                }
            }
        }
        larch_pager::set_page_checksum(page);
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

    /// Keys that are prefixes of each other, empty, of 7/8/9/16/17 bytes, with 0x00 and 0xff
    /// bytes: `search` and `child_index` (eight bytes at a time, `compare_keys`) find what a
    /// search by slice order finds, for every probe.
    #[test]
    fn a_kept_node_is_taken_only_for_the_page_and_txid_it_was_written_with() {
        let mut spare = SpareNodes::default();
        let mut kept = WrittenNodes::default();
        let mut n = leaf(3);
        n.page = 7;
        kept.keep(10, n, &mut spare, 4096);
        // Another txid on the page: written again since; the stale node is dropped.
        assert!(kept.take(7, 11, PageRole::Data, true, 3).is_none());
        assert!(kept.take(7, 10, PageRole::Data, true, 3).is_none());
        let mut n = leaf(3);
        n.page = 7;
        kept.keep(10, n, &mut spare, 4096);
        // Another role, type or entry count than the page's header says: not this node.
        assert!(kept.take(7, 10, PageRole::Catalog, true, 3).is_none());
        let mut n = leaf(3);
        n.page = 7;
        kept.keep(10, n, &mut spare, 4096);
        assert!(kept.take(7, 10, PageRole::Data, true, 4).is_none());
        let mut n = leaf(3);
        n.page = 7;
        kept.keep(10, n, &mut spare, 4096);
        assert!(kept.take(8, 10, PageRole::Data, true, 3).is_none());
        let n = kept.take(7, 10, PageRole::Data, true, 3).unwrap();
        assert_eq!((n.page, n.len()), (7, 3));
        // Keeping a page again replaces the older node; the oldest go beyond MAX_BYTES.
        let each = leaf(1).buffer_bytes().max(1);
        let fit = (WrittenNodes::MAX_BYTES / each) as u64;
        for p in 0..fit + 5 {
            let mut n = leaf(1);
            n.page = p;
            kept.keep(20, n, &mut spare, 4096);
        }
        assert!(kept.bytes <= WrittenNodes::MAX_BYTES);
        let mut n = leaf(2);
        n.page = 10;
        kept.keep(21, n, &mut spare, 4096);
        assert!(kept.take(0, 20, PageRole::Data, true, 1).is_none());
        assert!(kept.take(10, 20, PageRole::Data, true, 1).is_none());
        assert!(kept.take(10, 21, PageRole::Data, true, 2).is_none());
        assert!(kept.take(12, 20, PageRole::Data, true, 1).is_some());
        kept.forget(13);
        assert!(kept.take(13, 20, PageRole::Data, true, 1).is_none());
        assert!(kept.take(fit + 4, 20, PageRole::Data, true, 1).is_some());
        // What is kept and what the byte count says agree after all of it.
        let sum: usize = kept.kept.values().map(|(_, n)| n.buffer_bytes()).sum();
        assert_eq!(kept.bytes, sum);
    }

    #[test]
    fn search_and_child_index_order_keys_as_slices_do() {
        let mut keys: Vec<Vec<u8>> = vec![Vec::new()];
        for len in [1usize, 7, 8, 9, 15, 16, 17, 24, 25] {
            for fill in [0x00u8, 0x01, 0x7f, 0x80, 0xfe, 0xff] {
                keys.push(vec![fill; len]);
                let mut k = vec![fill; len];
                k[len - 1] = fill.wrapping_add(1);
                keys.push(k);
                let mut k = vec![fill; len];
                k[len / 2] ^= 0x80;
                keys.push(k);
            }
            keys.push(b"abcdefghijklmnopqrstuvwxy"[..len].to_vec());
        }
        keys.sort();
        keys.dedup();
        let mut probes = keys.clone();
        for k in &keys {
            let mut longer = k.clone();
            longer.push(0);
            probes.push(longer);
            let mut longer = k.clone();
            longer.push(0xff);
            probes.push(longer);
            if let Some((_, shorter)) = k.split_last() {
                probes.push(shorter.to_vec());
            }
        }
        let mut leaf = Node::empty(9, true, PageRole::Data);
        let mut branch = Node::empty(10, false, PageRole::Data);
        for (i, k) in keys.iter().enumerate() {
            leaf.push(k, Val::Inline(b"v"));
            branch.insert_child(i, k, Child::Page(100 + i as PageId));
        }
        for p in &probes {
            assert_eq!(leaf.search(p), keys.binary_search(p), "search for {p:?}");
            let by_slices = keys[1..].partition_point(|k| k.as_slice() <= p.as_slice());
            assert_eq!(branch.child_index(p), by_slices, "child_index for {p:?}");
        }
    }

    #[test]
    fn leaves_of_random_inserts_hold_little_more_arena_than_their_live_bytes() {
        // Leaves as a large transaction's random inserts leave them: each insert lands in a
        // random leaf at its key's place, and a leaf past a page splits in the middle.
        let mut leaves = vec![Node::empty(1, true, PageRole::Data)];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let value = [9u8; 150];
        for _ in 0..40_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let l = (x % leaves.len() as u64) as usize;
            let key = x.to_be_bytes();
            let n = &mut leaves[l];
            let i = n.search(&key).unwrap_or_else(|i| i);
            n.insert_entry(i, &key, Val::Inline(&value));
            if n.size() > 4096 - PAGE_HEADER_SIZE {
                let half = n.len() / 2;
                let right = n.split_off(half, 2);
                leaves.push(right);
            }
        }
        let cap: usize = leaves.iter().map(|n| n.bytes.capacity()).sum();
        let live: usize = leaves.iter().map(|n| n.bytes.len() - n.dead).sum();
        let ents: usize = leaves.iter().map(|n| n.ents.capacity()).sum();
        let count: usize = leaves.iter().map(Node::len).sum();
        assert_eq!(count, 40_000);
        // Here a `Vec`'s own growth (doubling) left 1.35 times the live bytes in arenas and
        // 1.52 entry slots per entry; the growth rule leaves 1.27 and 1.38.
        assert!(
            cap * 100 <= live * 130,
            "arenas {cap} bytes for {live} live bytes in {} leaves",
            leaves.len()
        );
        assert!(
            ents * 100 <= count * 145,
            "{ents} entry slots for {count} entries"
        );
    }

    #[test]
    fn a_same_length_overwrite_stays_in_the_page_image_whatever_the_arena_has_room_for() {
        // Three entries of 1,200-byte values fill a page: the arena decoded from it has
        // room for no such value more, and an overwrite of the same length needs none.
        let mut node = Node::empty(9, true, PageRole::Data);
        for i in 0..3u8 {
            node.push(&[b'k', i], Val::Inline(&[i; 1200]));
        }
        let mut page = Vec::new();
        node.encode(&mut page, 4096, 3, |_| 0);
        let parsed = NodePage::parse(9, &page, PageRole::Data).unwrap();
        let mut n = Node::decode(&parsed, 9, PageRole::Data).unwrap();
        assert!(n.image);
        let cap = n.bytes.capacity();
        n.set_val(1, Val::Inline(&[7; 1200]));
        assert!(n.image, "a same-length overwrite left the page image");
        assert_eq!(n.bytes.capacity(), cap);
        assert_eq!(n.val(1), Val::Inline(&[7; 1200]));
        // Another length goes to the end of the arena, which grows.
        n.set_val(1, Val::Inline(&[8; 1100]));
        assert!(!n.image);
        assert_eq!(n.val(1), Val::Inline(&[8; 1100]));
        assert_eq!(
            (n.val(0), n.val(2)),
            (Val::Inline(&[0; 1200]), Val::Inline(&[2; 1200]))
        );
        assert!(n.dead_holds());
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

    #[test]
    fn a_node_reimaged_from_its_encoded_page_is_what_decoding_the_page_gives() {
        for leaf_node in [true, false] {
            // A node built by edits (its arena is not a page image), leaf or branch.
            let mut node = Node::empty(9, leaf_node, PageRole::Data);
            for i in 0..40u64 {
                let key = format!("key{i:04}");
                if leaf_node {
                    node.push(key.as_bytes(), Val::Inline(&[i as u8; 30]));
                } else {
                    let sep = if i == 0 { String::new() } else { key };
                    node.push_child(sep.as_bytes(), Child::Page(100 + i));
                }
            }
            node.recompute_size();
            node.remove(7);
            assert!(!node.image);
            let mut buf = Vec::new();
            node.encode(&mut buf, 4096, 5, |_| 0);
            node.reimage(&buf);
            assert!(node.image && node.bytes.len() == 4096);
            let page = NodePage::parse(9, &buf, PageRole::Data).unwrap();
            let decoded = Node::decode(&page, 9, PageRole::Data).unwrap();
            assert!(node.same_entries(&decoded));
            assert_eq!(node.dead, decoded.dead);
            if leaf_node {
                // (Decode tracks the lowest cell for leaves only: in-place inserts need it.)
                assert_eq!(node.low, decoded.low);
            }
            // It encodes to the same page by the image path, and edits in place as a decoded
            // page does.
            let mut again = Vec::new();
            node.encode(&mut again, 4096, 5, |_| 0);
            assert_eq!(buf, again);
        }
    }

    #[test]
    fn a_page_decoded_into_a_spare_nodes_buffers_is_the_page_and_nothing_of_the_old_node() {
        // A branch of long keys and a leaf of other entries leave their buffers behind; the
        // leaf decoded into them must encode to exactly its own page.
        let mut spare = SpareNodes::default();
        let mut branch = Node::empty(4, false, PageRole::Data);
        for i in 0..40 {
            branch.push(format!("{i:0>60}").as_bytes(), Val::Inline(&[]));
            branch.children.push(Child::Page(100 + i));
        }
        branch.recompute_size();
        spare.put(branch, 4096);
        spare.put(leaf(60), 4096);
        assert_eq!(spare.kept.len(), 2);
        let node = leaf(30);
        let mut buf = Vec::new();
        node.encode(&mut buf, 4096, 5, |_| 0);
        let page = NodePage::parse(9, &buf, PageRole::Data).unwrap();
        for _ in 0..2 {
            let back = Node::decode_reusing(&page, 9, PageRole::Data, &mut spare).unwrap();
            assert!(back.children.is_empty());
            let mut again = Vec::new();
            back.encode(&mut again, 4096, 5, |_| 0);
            assert_eq!(buf, again);
        }
        assert!(spare.kept.is_empty());
        assert_eq!(spare.bytes, 0);
        // Buffers grown past two pages are not kept, nor more than MAX_BYTES of them.
        let mut big = leaf(0);
        big.bytes.reserve(3 * 4096);
        spare.put(big, 4096);
        assert!(spare.kept.is_empty());
        let make = || {
            let mut n = leaf(1);
            n.bytes.reserve_exact(4096);
            n
        };
        let size = |n: &Node| SpareNodes::size(&n.bytes, &n.ents, &n.children);
        let mut offered = 0;
        while spare.bytes + size(&make()) <= SpareNodes::MAX_BYTES {
            spare.put(make(), 4096);
            offered += 1;
        }
        assert_eq!(spare.kept.len(), offered);
        spare.put(make(), 4096);
        assert_eq!(spare.kept.len(), offered);
        assert!(spare.bytes <= SpareNodes::MAX_BYTES);
        while spare.take().is_some() {}
        assert_eq!(spare.bytes, 0);
    }
}

#[cfg(test)]
mod image_tests {
    //! A node edited in its page image (`Node::image`) must encode to a page that decodes to
    //! the same entries as the node edited the other way (arena appends, one-pass encode).

    use super::*;
    use proptest::prelude::*;

    const PS: usize = 4096;

    /// An edit of a leaf, by position modulo the entries.
    #[derive(Clone, Debug)]
    enum Edit {
        Insert(Vec<u8>, usize, bool),
        SetVal(usize, usize),
        Remove(usize),
        /// Split at a position, then append the right half back: the entries are as before.
        SplitJoin(usize),
    }

    fn value(len: usize, seed: usize) -> Vec<u8> {
        (0..len).map(|i| (i + seed) as u8).collect()
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            4 => (prop::collection::vec(any::<u8>(), 1..24), 0..300usize, any::<bool>())
                .prop_map(|(k, v, o)| Edit::Insert(k, v, o)),
            2 => (any::<usize>(), 0..300usize).prop_map(|(i, v)| Edit::SetVal(i, v)),
            1 => any::<usize>().prop_map(Edit::Remove),
            1 => any::<usize>().prop_map(Edit::SplitJoin),
        ]
    }

    /// A leaf page of `keys` with values of `vlen` bytes (every fourth in an overflow run).
    fn leaf_page(keys: &std::collections::BTreeSet<Vec<u8>>, vlen: usize) -> Vec<u8> {
        let mut node = Node::empty(9, true, PageRole::Data);
        let v = value(vlen, 1);
        for (i, k) in keys.iter().enumerate() {
            let val = if i % 4 == 3 {
                Val::Overflow {
                    page: 1000 + i as u64,
                    len: 5000 + i as u64,
                    fresh: false,
                }
            } else {
                Val::Inline(&v)
            };
            if node.size + Node::leaf_entry_size(k, &val) > PS - PAGE_HEADER_SIZE {
                break;
            }
            node.push(k, val);
        }
        let mut page = Vec::new();
        node.encode(&mut page, PS, 3, |_| 0);
        page
    }

    /// A branch page of `keys` (as many as fit), children 500, 501, ...
    fn branch_page(keys: &std::collections::BTreeSet<Vec<u8>>) -> Vec<u8> {
        let mut node = Node::empty(9, false, PageRole::Data);
        for (i, k) in keys.iter().enumerate() {
            if node.size + Node::branch_entry_size(k) > PS - PAGE_HEADER_SIZE {
                break;
            }
            node.push_child(k, Child::Page(500 + i as u64));
        }
        let mut page = Vec::new();
        node.encode(&mut page, PS, 3, |_| 0);
        page
    }

    fn apply(n: &mut Node, e: &Edit) {
        match e {
            Edit::Insert(k, v, o) => {
                let v = value(*v, k.len());
                let val = if *o {
                    Val::Overflow {
                        page: 77,
                        len: 9000,
                        fresh: true,
                    }
                } else {
                    Val::Inline(&v)
                };
                // A full leaf splits in the transaction; here the edit is skipped.
                if n.size + Node::leaf_entry_size(k, &val) > PS - PAGE_HEADER_SIZE {
                    return;
                }
                match n.search(k) {
                    Ok(i) => n.set_val(i, val),
                    Err(i) => n.insert_entry(i, k, val),
                }
            }
            Edit::SetVal(i, v) if !n.is_empty() => {
                let i = i % n.len();
                let len = match n.val(i) {
                    // Half of them the same length: overwritten in place.
                    Val::Inline(old) if v % 2 == 0 => old.len(),
                    _ => *v,
                };
                if n.size - n.entry_size(i) + Node::leaf_entry_len(n.key(i).len(), len)
                    > PS - PAGE_HEADER_SIZE
                {
                    return;
                }
                n.set_val(i, Val::Inline(&value(len, *v)));
            }
            Edit::Remove(i) if !n.is_empty() => n.remove(i % n.len()),
            Edit::SplitJoin(i) => {
                let all = |n: &Node| -> Vec<(Vec<u8>, String)> {
                    (0..n.len())
                        .map(|j| (n.key(j).to_vec(), format!("{:?}", n.val(j))))
                        .collect()
                };
                let before = all(n);
                let mut right = n.split_off(i % (n.len() + 1), 10);
                assert!(n.dead_holds() && right.dead_holds());
                n.append(&mut right);
                assert_eq!(all(n), before);
            }
            _ => {}
        }
    }

    /// Entries of a page, read in place the way readers do.
    fn entries(page: &[u8]) -> Vec<(Vec<u8>, ValRef<'_>)> {
        let p = NodePage::parse(9, page, PageRole::Data).unwrap();
        (0..p.count)
            .map(|i| p.entry(i).map(|(k, v)| (k.to_vec(), v)).unwrap())
            .collect()
    }

    use crate::node_page::ValRef;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn a_leaf_edited_in_its_page_encodes_to_the_entries_of_one_edited_in_the_arena(
            keys in prop::collection::btree_set(prop::collection::vec(any::<u8>(), 1..24), 0..40),
            vlen in 0..200usize,
            edits in prop::collection::vec(edit(), 0..40),
        ) {
            let page = leaf_page(&keys, vlen);
            let parsed = NodePage::parse(9, &page, PageRole::Data).unwrap();
            let mut fast = Node::decode(&parsed, 9, PageRole::Data).unwrap();
            prop_assert!(fast.image);
            let mut slow = fast.clone();
            slow.image = false;
            prop_assert!(fast.prefixes_hold());
            for e in &edits {
                apply(&mut fast, e);
                apply(&mut slow, e);
                prop_assert_eq!(fast.size, slow.size);
                prop_assert!(fast.prefixes_hold() && slow.prefixes_hold());
                prop_assert!(fast.dead_holds() && slow.dead_holds());
            }
            let (mut a, mut b) = (Vec::new(), Vec::new());
            fast.encode(&mut a, PS, 4, |_| 0);
            slow.encode(&mut b, PS, 4, |_| 0);
            prop_assert_eq!(larch_pager::page_checksum(&a), larch_pager::stored_checksum(&a));
            prop_assert_eq!(entries(&a), entries(&b));
            // Decoded again, the two are the same node (size, keys, values).
            let back = Node::decode(&NodePage::parse(9, &a, PageRole::Data).unwrap(), 9, PageRole::Data).unwrap();
            prop_assert_eq!(back.size, slow.size);
            prop_assert_eq!(back.len(), slow.len());
            for i in 0..back.len() {
                prop_assert_eq!(back.key(i), slow.key(i));
                let run = |v: Val<'_>| match v {
                    Val::Overflow { page, len, .. } => (Some((page, len)), None),
                    Val::Inline(v) => (None, Some(v.to_vec())),
                };
                prop_assert_eq!(run(back.val(i)), run(slow.val(i)));
            }
            // With no edit, or only same-length overwrites, the page is what the arena path
            // writes, byte for byte.
            if edits.is_empty() {
                prop_assert_eq!(&a, &b);
            }
        }

        #[test]
        fn decoding_a_damaged_page_fails_where_reading_it_in_place_does(
            leaf in any::<bool>(),
            keys in prop::collection::btree_set(prop::collection::vec(any::<u8>(), 1..30), 1..80),
            vlen in 0..120usize,
            damage in prop::collection::vec((16..400usize, any::<bool>(), any::<u8>()), 0..6),
        ) {
            let mut page = if leaf {
                leaf_page(&keys, vlen)
            } else {
                branch_page(&keys)
            };
            // Slots and the lowest cells' headers (high bytes of offsets and lengths too).
            for (at, front, byte) in damage {
                page[if front { at } else { PS - at }] = byte;
            }
            let p = NodePage::parse(9, &page, PageRole::Data).unwrap();
            // What reading the page in place reports first, entry by entry.
            let in_place = (0..p.count).find_map(|i| {
                let r = if leaf {
                    p.entry(i).map(drop)
                } else {
                    p.child(i).and_then(|_| if i > 0 { p.key(i).map(drop) } else { Ok(()) })
                };
                r.err()
            });
            match (Node::decode(&p, 9, PageRole::Data), in_place) {
                (Ok(n), None) => {
                    prop_assert_eq!(n.len(), p.count);
                    for i in 0..n.len() {
                        if leaf {
                            let (k, v) = p.entry(i).unwrap();
                            prop_assert_eq!(n.key(i), k);
                            match (n.val(i), v) {
                                (Val::Inline(a), ValRef::Inline(b)) => prop_assert_eq!(a, b),
                                (Val::Overflow { page: a, len: x, .. }, ValRef::Overflow { page: b, len: y }) => {
                                    prop_assert_eq!((a, x), (b, y))
                                }
                                (a, b) => prop_assert!(false, "{a:?} vs {b:?}"),
                            }
                        } else {
                            prop_assert_eq!(n.children[i], Child::Page(p.child(i).unwrap()));
                            if i > 0 {
                                prop_assert_eq!(n.key(i), p.key(i).unwrap());
                            }
                        }
                    }
                }
                (Err(e), Some(r)) => prop_assert_eq!(e.to_string(), r.to_string()),
                (d, r) => prop_assert!(false, "decode {:?}, in place {:?}", d.map(|n| n.len()), r),
            }
        }

        #[test]
        fn a_branch_edited_in_its_page_encodes_byte_for_byte_as_one_encoded_from_its_entries(
            keys in prop::collection::btree_set(prop::collection::vec(any::<u8>(), 1..40), 1..120),
            dirty in prop::collection::vec(any::<usize>(), 0..8),
        ) {
            let page = branch_page(&keys);
            let parsed = NodePage::parse(9, &page, PageRole::Data).unwrap();
            let mut fast = Node::decode(&parsed, 9, PageRole::Data).unwrap();
            prop_assert!(fast.image);
            for (j, d) in dirty.iter().enumerate() {
                let i = d % fast.len();
                fast.children[i] = Child::Node(j);
            }
            let mut slow = fast.clone();
            slow.image = false;
            let (mut a, mut b) = (Vec::new(), Vec::new());
            fast.encode(&mut a, PS, 4, |n| 9000 + n as u64);
            slow.encode(&mut b, PS, 4, |n| 9000 + n as u64);
            prop_assert_eq!(a, b);
        }

        /// Searches of a dirty node decide on the cached prefixes where they differ: over keys
        /// that share prefixes, end inside the first eight bytes or are prefixes of each
        /// other, with 0x00 and 0xFF bytes, `search` and `child_index` answer as a scan with
        /// slice order does, and every edit of a branch (insert, set_key shorter and longer,
        /// remove, split, moves, append) keeps the prefixes.
        #[test]
        fn dirty_node_searches_order_keys_as_slices_do(
            keys in prop::collection::btree_set(
                prop::collection::vec(prop::sample::select(vec![0u8, 1, 0x7f, 0xff]), 0..18),
                1..60,
            ),
            probes in prop::collection::vec(
                prop::collection::vec(prop::sample::select(vec![0u8, 1, 0x7f, 0xff]), 0..18),
                1..40,
            ),
            ops in prop::collection::vec((0..8u8, any::<usize>(), prop::collection::vec(any::<u8>(), 0..20)), 0..30),
        ) {
            let keys: Vec<Vec<u8>> = keys.into_iter().collect();
            let mut leaf = Node::empty(9, true, PageRole::Data);
            let mut branch = Node::empty(9, false, PageRole::Data);
            for (i, k) in keys.iter().enumerate() {
                leaf.push(k, Val::Inline(b"v"));
                branch.push_child(k, Child::Page(100 + i as u64));
            }
            prop_assert!(leaf.prefixes_hold() && branch.prefixes_hold());
            // The same entries copied from pages: a leaf with prefixes, a branch without.
            let set: std::collections::BTreeSet<Vec<u8>> = keys.iter().cloned().collect();
            let (lp, bp) = (leaf_page(&set, 1), branch_page(&set));
            let dleaf = Node::decode(&NodePage::parse(9, &lp, PageRole::Data).unwrap(), 9, PageRole::Data).unwrap();
            let dbranch = Node::decode(&NodePage::parse(9, &bp, PageRole::Data).unwrap(), 9, PageRole::Data).unwrap();
            prop_assert!(dleaf.prefixed && !dbranch.prefixed && dleaf.prefixes_hold());
            let (nl, nb) = (dleaf.len(), dbranch.len());
            for p in &probes {
                let want = keys.binary_search(p);
                prop_assert_eq!(leaf.search(p), want);
                prop_assert_eq!(dleaf.search(p), keys[..nl].binary_search(p));
                // Separators 1.. are keys[1..]; the child is the last one <= p.
                let want_child = keys[1..].iter().filter(|k| k.as_slice() <= p.as_slice()).count();
                prop_assert_eq!(branch.child_index(p), want_child);
                let want_child = keys[1..nb].iter().filter(|k| k.as_slice() <= p.as_slice()).count();
                prop_assert_eq!(dbranch.child_index(p), want_child);
            }
            // Edits in any order, entries moving between a branch with prefixes and one copied
            // from its page, keep every prefix that searches use its key's.
            let mut other = dbranch;
            for (op, at, key) in &ops {
                let n = branch.len();
                match op {
                    0 => branch.insert_child(at % (n + 1), key, Child::Page(7)),
                    1 if n > 0 => branch.set_key(at % n, key),
                    2 if n > 1 => branch.remove_key(at % n),
                    3 if n > 2 && other.len() > 2 => {
                        let node = if at % 2 == 0 { &mut branch } else { &mut other };
                        let m = node.len();
                        let mut right = node.split_off(at / 2 % (m - 1) + 1, 11);
                        prop_assert!(right.prefixes_hold());
                        node.append(&mut right);
                    }
                    4 if n > 2 => {
                        let from = at % n;
                        let to = (from + 1 + at / 7 % 3).min(n);
                        let dst_at = other.len();
                        branch.move_entries(from..to, &mut other, dst_at);
                    }
                    5 if !other.is_empty() => branch.append(&mut other),
                    7 if !other.is_empty() => {
                        for _ in 0..PREFIX_AFTER {
                            other.child_index_counted(key);
                        }
                        prop_assert!(other.prefixed);
                    }
                    6 if other.len() > 2 => {
                        let m = other.len();
                        let from = at % m;
                        let to = (from + 1 + at / 7 % 3).min(m);
                        other.move_entries(from..to, &mut branch, at % (n + 1));
                    }
                    _ => {}
                }
                prop_assert!(branch.prefixes_hold() && other.prefixes_hold());
            }
        }
    }
}
