//! The one walk over the pages a tree reaches, shared by `check` (which validates everything it
//! visits and keeps going past damage) and the free map's trust check at read-write open (which
//! needs the set of pages a reader can reach, and fails only on a page reached twice).
//!
//! The walk claims every page it visits in a [`PageSet`]: a page claimed twice (a cycle, or two
//! trees sharing a page) or lying outside `2..high_water` is reported, never followed, so a walk
//! visits each page of the file at most once whatever the file holds.

use std::collections::BTreeMap;

use larch_pager::{Meta, PageRole, TreeRoot};

use crate::error::{Error, Result};
use crate::node_page::{NodePage, ValRef, OVERFLOW_HEADER};
use crate::view::{verify_checksum, View, MAX_DEPTH};
use crate::PageId;

/// Pages per block of a [`PageSet`] (a block is 4 KiB of bits).
const BLOCK_PAGES: u64 = 1 << 15;
const BLOCK_WORDS: usize = (BLOCK_PAGES / 64) as usize;

/// A set of page ids, as a bitmap allocated in 4 KiB blocks where pages are set: its memory
/// follows the pages a walk finds, not the high-water mark a meta claims (a sparse file can
/// claim billions of pages).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PageSet {
    blocks: BTreeMap<u64, Box<[u64; BLOCK_WORDS]>>,
    len: u64,
}

impl PageSet {
    /// Add `p`; false if it was already there.
    pub fn insert(&mut self, p: PageId) -> bool {
        let block = self
            .blocks
            .entry(p / BLOCK_PAGES)
            .or_insert_with(|| Box::new([0; BLOCK_WORDS]));
        let off = p % BLOCK_PAGES;
        let (w, bit) = ((off / 64) as usize, 1u64 << (off % 64));
        if block[w] & bit != 0 {
            return false;
        }
        block[w] |= bit;
        self.len += 1;
        true
    }

    /// The pages of `runs` (start, length).
    pub fn from_runs(runs: &[(PageId, u64)]) -> PageSet {
        let mut s = PageSet::default();
        for &(p, n) in runs {
            for q in p..p + n {
                s.insert(q);
            }
        }
        s
    }

    /// Take `p` out; false if it was not there.
    pub fn remove(&mut self, p: PageId) -> bool {
        let Some(block) = self.blocks.get_mut(&(p / BLOCK_PAGES)) else {
            return false;
        };
        let off = p % BLOCK_PAGES;
        let (w, bit) = ((off / 64) as usize, 1u64 << (off % 64));
        if block[w] & bit == 0 {
            return false;
        }
        block[w] &= !bit;
        self.len -= 1;
        // No empty block stays: two sets of the same pages are equal.
        if block.iter().all(|&w| w == 0) {
            self.blocks.remove(&(p / BLOCK_PAGES));
        }
        true
    }

    /// Is `p` in the set?
    pub fn contains(&self, p: PageId) -> bool {
        let off = p % BLOCK_PAGES;
        self.blocks
            .get(&(p / BLOCK_PAGES))
            .is_some_and(|b| b[(off / 64) as usize] & (1 << (off % 64)) != 0)
    }

    /// Pages in the set.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// The set as runs of pages (start, length), in order, each as long as it can be: what
    /// two sets are compared by when one side is a run list that may be far larger than the
    /// pages a file holds (a behind meta's unreached pages, the writer's free extents).
    pub fn runs(&self) -> Vec<(PageId, u64)> {
        let mut out: Vec<(PageId, u64)> = Vec::new();
        for (&b, words) in &self.blocks {
            let base = b * BLOCK_PAGES;
            for (w, &word) in words.iter().enumerate() {
                let mut word = word;
                let mut shift = 0u32;
                while word != 0 {
                    let tz = word.trailing_zeros();
                    word >>= tz;
                    shift += tz;
                    let ones = (!word).trailing_zeros();
                    let start = base + w as u64 * 64 + u64::from(shift);
                    match out.last_mut() {
                        Some((p, n)) if p.checked_add(*n) == Some(start) => *n += u64::from(ones),
                        _ => out.push((start, u64::from(ones))),
                    }
                    word = if ones >= 64 { 0 } else { word >> ones };
                    shift += ones;
                }
            }
        }
        out
    }

    /// The runs of pages in `lo..hi` that are not in the set, in order: at most one more
    /// than the pages in the set, however wide the range.
    pub fn gaps(&self, lo: PageId, hi: PageId) -> Vec<(PageId, u64)> {
        let mut out = Vec::new();
        // First page not yet placed in a gap or passed over as a member.
        let mut next = lo;
        'blocks: for (&b, words) in self.blocks.range(lo / BLOCK_PAGES..) {
            let base = b * BLOCK_PAGES;
            if base >= hi {
                break;
            }
            for (w, &word) in words.iter().enumerate() {
                let mut word = word;
                while word != 0 {
                    let p = base + w as u64 * 64 + u64::from(word.trailing_zeros());
                    word &= word - 1;
                    if p < next {
                        continue;
                    }
                    if p >= hi {
                        break 'blocks;
                    }
                    if p > next {
                        out.push((next, p - next));
                    }
                    next = p + 1;
                }
            }
        }
        if next < hi {
            out.push((next, hi - next));
        }
        out
    }
}

/// What a walk does besides claiming pages. `check` validates each page and records problems;
/// the trust check turns the first problem into an error.
pub(crate) trait Visitor<'a> {
    /// Something is wrong at `page`: `check` records it and the walk goes on past it; an `Err`
    /// ends the walk.
    fn problem(&mut self, page: Option<PageId>, what: String) -> Result<()>;

    /// A page reached a second time: a cycle, or two places sharing it. Not followed again.
    fn reached_twice(&mut self, page: PageId, what: String) -> Result<()> {
        self.problem(Some(page), what)
    }

    /// A tree's recorded depth disagrees with its pages (a leaf above level 1, a branch at
    /// it, or an impossible depth). Not followed; but readers descend by each page's own
    /// type, so what lies below is still reachable to them.
    fn level_mismatch(&mut self, page: PageId, what: String) -> Result<()> {
        self.problem(Some(page), what)
    }

    /// Stop descending (check has seen enough problems).
    fn enough(&self) -> bool {
        false
    }

    /// A node page, read and parsed, at the level its parent expects, whose keys must lie in
    /// `[lo, hi)`. False: do not look inside it (its entries or children).
    fn node(
        &mut self,
        _page: &NodePage<'a>,
        _lo: Option<&[u8]>,
        _hi: Option<&[u8]>,
    ) -> Result<bool> {
        Ok(true)
    }

    /// Entry `i` of a leaf (`None` if it could not be decoded, which the walk has reported).
    fn entry(
        &mut self,
        _page: &NodePage<'a>,
        _i: usize,
        _role: PageRole,
        _val: Option<ValRef<'a>>,
    ) -> Result<()> {
        Ok(())
    }

    /// The overflow run of `pages` pages at `first`, holding `len` bytes, claimed for `leaf`.
    fn overflow(&mut self, _leaf: PageId, _first: PageId, _len: u64, _pages: u64) -> Result<()> {
        Ok(())
    }
}

/// The pages reached so far by walking trees of one meta.
pub(crate) struct Walk<'a> {
    pub view: View<'a>,
    /// Pages claimed, the two metas not included.
    pub seen: PageSet,
    /// Verify each node page's checksum before reading it.
    pub verify: bool,
}

impl<'a> Walk<'a> {
    pub fn new(view: View<'a>, verify: bool) -> Walk<'a> {
        Walk {
            view,
            seen: PageSet::default(),
            verify,
        }
    }

    /// Pages reached, the two metas included.
    pub fn reachable(&self) -> u64 {
        2 + self.seen.len()
    }

    /// Claim pages `p..p+n`; false (and a problem) if out of range or claimed before.
    fn claim(
        &mut self,
        p: PageId,
        n: u64,
        what: &dyn Fn() -> String,
        v: &mut dyn Visitor<'a>,
    ) -> Result<bool> {
        let hwm = self.view.high_water;
        if p < 2 || p.checked_add(n).is_none_or(|e| e > hwm) {
            v.problem(
                Some(p),
                format!("{} points outside the file's pages 2..{hwm}", what()),
            )?;
            return Ok(false);
        }
        for q in p..p + n {
            if !self.seen.insert(q) {
                v.reached_twice(
                    q,
                    format!("{}: page is reachable twice (shared or a cycle)", what()),
                )?;
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Walk the tree at `root`; returns the entries its leaves hold. An empty tree (root 0) has
    /// no pages: whether its record is consistent is the caller's business.
    pub fn tree(
        &mut self,
        name: &str,
        root: &TreeRoot,
        role: PageRole,
        v: &mut dyn Visitor<'a>,
    ) -> Result<u64> {
        if root.root == 0 {
            return Ok(0);
        }
        if root.depth == 0 || root.depth > MAX_DEPTH {
            v.level_mismatch(
                root.root,
                format!("tree {name:?} has impossible depth {}", root.depth),
            )?;
            return Ok(0);
        }
        self.node(name, root.root, root.depth, role, None, None, v)
    }

    #[allow(clippy::too_many_arguments)]
    fn node(
        &mut self,
        name: &str,
        id: PageId,
        level: u32,
        role: PageRole,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        v: &mut dyn Visitor<'a>,
    ) -> Result<u64> {
        if v.enough() || !self.claim(id, 1, &|| format!("tree {name:?}"), v)? {
            return Ok(0);
        }
        let bytes = match self.view.pages(id, 1) {
            Ok(b) => b,
            Err(e) => {
                v.problem(Some(id), e.to_string())?;
                return Ok(0);
            }
        };
        if self.verify {
            if let Err(e) = verify_checksum(id, bytes) {
                v.problem(Some(id), format!("tree {name:?}: {}", strip(&e)))?;
                return Ok(0);
            }
        }
        let page = match NodePage::parse(id, bytes, role) {
            Ok(p) => p,
            Err(e) => {
                v.problem(Some(id), format!("tree {name:?}: {}", strip(&e)))?;
                return Ok(0);
            }
        };
        if page.leaf != (level == 1) {
            v.level_mismatch(
                id,
                format!(
                    "tree {name:?}: a {} at level {level} (leaves are level 1)",
                    if page.leaf { "leaf" } else { "branch" }
                ),
            )?;
            return Ok(0);
        }
        if !v.node(&page, lo, hi)? {
            return Ok(0);
        }
        if page.leaf {
            for i in 0..page.count {
                match page.entry(i) {
                    Ok((_, val)) => {
                        if let ValRef::Overflow { page: first, len } = val {
                            self.overflow(id, first, len, v)?;
                        }
                        v.entry(&page, i, role, Some(val))?;
                    }
                    Err(e) => {
                        v.problem(Some(id), strip(&e))?;
                        v.entry(&page, i, role, None)?;
                    }
                }
            }
            return Ok(page.count as u64);
        }
        self.prefetch(&page);
        let mut total = 0u64;
        for i in 0..page.count {
            let child = match page.child(i) {
                Ok(c) => c,
                Err(e) => {
                    v.problem(Some(id), strip(&e))?;
                    continue;
                }
            };
            let clo = if i == 0 { lo } else { page.key(i).ok() };
            let chi = if i + 1 < page.count {
                page.key(i + 1).ok()
            } else {
                hi
            };
            total += self.node(name, child, level - 1, role, clo, chi, v)?;
        }
        Ok(total)
    }

    /// Ask the kernel to read a branch's children ahead, in runs of adjacent pages: on a cold
    /// cache the walk then waits for many reads at once rather than one fault at a time (the
    /// map's default advice is no readahead).
    fn prefetch(&self, page: &NodePage<'a>) {
        let mut children: Vec<PageId> = (0..page.count)
            .filter_map(|i| page.child(i).ok())
            .filter(|&c| c >= 2 && c < self.view.high_water)
            .collect();
        children.sort_unstable();
        let ps = self.view.page_size;
        let mut i = 0;
        while i < children.len() {
            let mut j = i + 1;
            while j < children.len() && children[j] == children[j - 1] + 1 {
                j += 1;
            }
            self.view.map.will_need(
                children[i] as usize * ps,
                (children[j - 1] - children[i] + 1) as usize * ps,
            );
            i = j;
        }
    }

    /// Claim the overflow run a leaf entry points at (its length from the leaf; the run itself
    /// is the visitor's to read).
    fn overflow(
        &mut self,
        leaf: PageId,
        first: PageId,
        len: u64,
        v: &mut dyn Visitor<'a>,
    ) -> Result<()> {
        let ps = self.view.page_size as u64;
        let n = (OVERFLOW_HEADER as u64).saturating_add(len).div_ceil(ps);
        if self.claim(first, n, &|| format!("overflow value in leaf {leaf}"), v)? {
            v.overflow(leaf, first, len, n)?;
        }
        Ok(())
    }
}

/// Strip the page from a `Corrupt` error (the problem names it already).
pub(crate) fn strip(e: &Error) -> String {
    match e {
        Error::Corrupt { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

/// The trust check's visitor: collects the trees the catalog names, and fails only where the
/// writer could destroy live data.
#[derive(Default)]
struct Reach<'a> {
    /// Each catalog entry: the tree's name and its record's value, inline or not.
    trees: Vec<(&'a [u8], ValRef<'a>)>,
    /// Every problem is an error: the meta's free map is behind, so every page the walk
    /// leaves is taken as free, and what it cannot follow may still be reached by a reader.
    strict: bool,
}

impl<'a> Visitor<'a> for Reach<'a> {
    /// Damage that stops a walk stops readers too: what lies behind a page that does not parse,
    /// or a pointer outside the file, is not reachable, so it is not followed. That holds
    /// where the free map says which pages are free (it does not mark what lies behind). A
    /// behind meta's free pages are the walk's gaps, and readers follow some things the walk
    /// does not (a cursor descends by each page's own type, not the recorded depth): there
    /// any problem stops the read-write open; under any meta, so does a level mismatch
    /// (`level_mismatch`).
    fn problem(&mut self, page: Option<PageId>, what: String) -> Result<()> {
        if self.strict {
            return Err(Error::corrupt(
                page.unwrap_or(0),
                format!("{what} (the free map is behind, so the walk must be whole)"),
            ));
        }
        Ok(())
    }

    /// A shared page would be freed by a commit that copies it on one path while the other
    /// still reaches it, and then reused: the writer must not start on such a file.
    fn reached_twice(&mut self, page: PageId, what: String) -> Result<()> {
        Err(Error::corrupt(page, what))
    }

    /// Whatever the free map: readers reach what lies below such a page, and the walk, which
    /// does not, cannot show that the free map leaves it alone (a crafted current free map
    /// marked a leaf below a wrong depth free, and the file opened for writing).
    fn level_mismatch(&mut self, page: PageId, what: String) -> Result<()> {
        Err(Error::corrupt(
            page,
            format!("{what} (readers descend by the pages' own types)"),
        ))
    }

    fn entry(
        &mut self,
        page: &NodePage<'a>,
        i: usize,
        role: PageRole,
        val: Option<ValRef<'a>>,
    ) -> Result<()> {
        if role == PageRole::Catalog {
            if let (Ok(name), Some(v)) = (page.key(i), val) {
                self.trees.push((name, v));
            }
        }
        Ok(())
    }
}

/// Every page a reader of `meta` can reach (the catalog, each tree it names with their
/// overflow runs, the free map), the metas not included. Pages are not verified against their
/// checksums (a page that parses is followed); what cannot be followed (a page that does not
/// parse as the node its parent expects, a pointer outside `2..high_water`) is not. A page
/// reached twice is an error.
pub(crate) fn reachable_pages(view: &View<'_>, meta: &Meta) -> Result<PageSet> {
    let mut walk = Walk::new(*view, false);
    let mut reach = Reach {
        strict: meta.freemap_behind,
        ..Reach::default()
    };
    walk.tree("(catalog)", &meta.catalog, PageRole::Catalog, &mut reach)?;
    walk.tree("(free map)", &meta.freemap, PageRole::FreeMap, &mut reach)?;
    for (name, value) in std::mem::take(&mut reach.trees) {
        let name = String::from_utf8_lossy(name);
        // A record wherever its value lies, as `ReadTx::open_tree` reads it (larch writes
        // them inline, but a tree a reader opens must be walked).
        match view.value(value).ok().and_then(TreeRoot::decode) {
            Some(root) => {
                walk.tree(&name, &root, PageRole::Data, &mut reach)?;
            }
            None => reach.problem(
                Some(meta.catalog.root),
                format!("catalog entry {name:?} is not a tree record"),
            )?,
        }
    }
    Ok(walk.seen)
}

#[cfg(test)]
mod tests {
    use super::PageSet;

    #[test]
    fn a_page_set_holds_sparse_pages() {
        let mut s = PageSet::default();
        let pages = [2u64, 63, 64, 32767, 32768, 1 << 40, (1 << 40) + 1, u64::MAX];
        for &p in pages.iter().rev() {
            assert!(s.insert(p));
        }
        assert!(!s.insert(64));
        assert_eq!(s.len(), pages.len() as u64);
        let mut t = s.clone();
        assert!(t.insert(70) && t.remove(70) && !t.remove(70) && t == s);
        assert!(t.remove(1 << 40) && t.remove((1 << 40) + 1) && t.blocks.len() == 3);
        assert!(s.contains(1 << 40) && !s.contains(3) && !s.contains((1 << 40) + 2));
        assert!(pages.iter().all(|&p| s.contains(p)));
        assert_eq!(s.blocks.len(), 4);
    }

    #[test]
    fn the_runs_of_a_page_set_are_its_pages_in_maximal_runs() {
        let mut next = crate::test_rng(0x2545_f491_4f6c_dd1du64);
        for case in 0..200 {
            let mut s = PageSet::default();
            let mut pages = std::collections::BTreeSet::new();
            // Runs across words and blocks: whole words set, a run ending at a block's end.
            for _ in 0..next(20) {
                let start = next(3 * super::BLOCK_PAGES);
                for p in start..start + next(200) {
                    s.insert(p);
                    pages.insert(p);
                }
            }
            if case % 3 == 0 {
                for p in super::BLOCK_PAGES - 64..super::BLOCK_PAGES + 3 {
                    s.insert(p);
                    pages.insert(p);
                }
            }
            let mut want: Vec<(u64, u64)> = Vec::new();
            for &p in &pages {
                match want.last_mut() {
                    Some((q, n)) if *q + *n == p => *n += 1,
                    _ => want.push((p, 1)),
                }
            }
            assert_eq!(s.runs(), want, "case {case}");
        }
        let mut top = PageSet::default();
        top.insert(u64::MAX - 1);
        top.insert(u64::MAX);
        assert_eq!(top.runs(), vec![(u64::MAX - 1, 2)]);
    }

    #[test]
    fn the_gaps_of_a_page_set_are_the_runs_it_does_not_hold() {
        let mut next = crate::test_rng(0x853c_49e6_748f_ea9bu64);
        for _ in 0..200 {
            let mut s = PageSet::default();
            let span = 1 + next(100_000);
            for _ in 0..next(300) {
                s.insert(next(span));
            }
            let (lo, hi) = (next(span), next(span + 10));
            let want: Vec<u64> = (lo..hi).filter(|&p| !s.contains(p)).collect();
            let got: Vec<u64> = s.gaps(lo, hi).iter().flat_map(|&(p, n)| p..p + n).collect();
            assert_eq!(got, want, "{lo}..{hi}");
            assert!(s.gaps(lo, hi).iter().all(|&(_, n)| n > 0));
        }
        // A wide range costs nothing but its members.
        let mut s = PageSet::default();
        s.insert(5);
        s.insert(1 << 40);
        assert_eq!(
            s.gaps(2, u64::MAX),
            vec![
                (2, 3),
                (6, (1 << 40) - 6),
                ((1 << 40) + 1, u64::MAX - (1 << 40) - 1)
            ]
        );
    }
}
