//! `Db::check`: walk every tree of the newest commit and prove the file consistent.
//!
//! Verified: every page's checksum, type and tree role; txids no newer than the meta; keys in
//! order and inside their parent's separators; leaf levels at the tree depth; entry counts;
//! overflow runs; catalog and free-map records; and that every page below the high-water mark
//! is exactly one of reachable or marked unreachable in the free map, matching the meta's
//! counters and the in-memory free-space state.

use larch_pager::{Meta, PageHeader, PageRole, PageType, TreeRoot};

use crate::db::Db;
use crate::error::{Error, Problem, Result};
use crate::freemap::{chunk_index, CHUNK_BYTES};
use crate::node_page::{NodePage, ValRef};
use crate::view::{verify_checksum, View, MAX_DEPTH};
use crate::walk::{strip, PageSet, Visitor, Walk};
use crate::PageId;

/// Stop collecting after this many problems: a wrecked file need not list every page.
const MAX_PROBLEMS: usize = 1000;

/// Everything [`Db::check_report`] found.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
/// let tx = db.begin_write()?;
/// tx.open_tree("t")?.insert(b"k", b"v")?;
/// tx.commit()?;
/// let report = db.check_report()?;
/// assert!(report.is_ok());
/// assert_eq!(report.txid, 1);
/// assert!(report.problems.is_empty() && report.reachable_pages > 2);
/// # Ok::<(), larch_engine::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// The commit checked.
    pub txid: u64,
    /// Pages reachable from the meta (metas included).
    pub reachable_pages: u64,
    /// Pages the file records as unreachable: free, or kept for a reader or for the last
    /// durable commit.
    pub unreachable_pages: u64,
    /// The commit's free map is behind it (an Async commit's: docs/format.md, "A free map
    /// behind its meta"): `unreachable_pages` are the pages the walk did not reach.
    pub freemap_behind: bool,
    /// Notes that are not damage to the checked commit (e.g. open fell back past a torn meta).
    pub notes: Vec<String>,
    /// Damage found; empty when the file is sound.
    pub problems: Vec<Problem>,
}

impl CheckReport {
    /// True when no problem was found. See [`CheckReport`] for an example.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// What `check` does at each page the walk visits: validate it, record problems.
struct Checker<'a> {
    view: View<'a>,
    meta: Meta,
    problems: Vec<Problem>,
}

impl<'a> Checker<'a> {
    /// The meta's counters against the pages found reachable and unreachable.
    fn counts(&mut self, reachable: u64, unreachable: u64) {
        let m = self.meta;
        if m.live_pages != reachable || m.unreachable_pages != unreachable {
            self.note(
                None,
                format!(
                    "meta counts {} live and {} unreachable pages; found {reachable} and {unreachable}",
                    m.live_pages, m.unreachable_pages
                ),
            );
        }
    }

    fn note(&mut self, page: Option<PageId>, what: impl Into<String>) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(Problem {
                page,
                what: what.into(),
            });
        }
    }

    /// Check a tree; returns the number of entries found.
    fn tree(&mut self, walk: &mut Walk<'a>, name: &str, root: &TreeRoot, role: PageRole) -> u64 {
        if root.root == 0 {
            if root.entries != 0 || root.depth != 0 {
                self.note(
                    None,
                    format!(
                        "tree {name:?} is empty but records {} entries, depth {}",
                        root.entries, root.depth
                    ),
                );
            }
            return 0;
        }
        // The checker never fails the walk: it records problems and goes on.
        let entries = walk.tree(name, root, role, self).unwrap_or(0);
        if root.depth != 0 && root.depth <= MAX_DEPTH && entries != root.entries {
            self.note(
                Some(root.root),
                format!(
                    "tree {name:?} records {} entries but holds {entries}",
                    root.entries
                ),
            );
        }
        entries
    }
}

impl<'a> Visitor<'a> for Checker<'a> {
    fn problem(&mut self, page: Option<PageId>, what: String) -> Result<()> {
        self.note(page, what);
        Ok(())
    }

    fn enough(&self) -> bool {
        self.problems.len() >= MAX_PROBLEMS
    }

    fn node(&mut self, page: &NodePage<'a>, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<bool> {
        let id = page.id;
        if page.txid() > self.meta.txid {
            self.note(
                Some(id),
                format!(
                    "written by txid {}, newer than the meta's {}",
                    page.txid(),
                    self.meta.txid
                ),
            );
        }
        // Keys strictly increasing and inside [lo, hi).
        let mut prev: Option<&[u8]> = None;
        let first_key = if page.leaf { 0 } else { 1 };
        for i in first_key..page.count {
            let k = match page.key(i) {
                Ok(k) => k,
                Err(e) => {
                    self.note(Some(id), strip(&e));
                    return Ok(false);
                }
            };
            if k.is_empty() {
                self.note(Some(id), format!("entry {i} has an empty key"));
            }
            if prev.is_some_and(|p| p >= k) {
                self.note(Some(id), format!("keys out of order at entry {i}"));
            }
            if lo.is_some_and(|l| k < l) || hi.is_some_and(|h| k >= h) {
                self.note(
                    Some(id),
                    format!("key of entry {i} lies outside the range its parent gives this page"),
                );
            }
            prev = Some(k);
        }
        if page.leaf && page.count == 0 {
            // Never legal: an empty tree has no root page, and merges remove empty leaves.
            self.note(Some(id), "empty leaf");
        }
        Ok(true)
    }

    fn entry(
        &mut self,
        page: &NodePage<'a>,
        i: usize,
        role: PageRole,
        val: Option<ValRef<'a>>,
    ) -> Result<()> {
        let id = page.id;
        if let Some(ValRef::Inline(v)) = val {
            if role == PageRole::Catalog && TreeRoot::decode(v).is_none() {
                self.note(Some(id), format!("catalog entry {i} is not a tree root"));
            }
            if role == PageRole::FreeMap && v.len() != CHUNK_BYTES {
                self.note(Some(id), format!("free-map chunk {i} is {} bytes", v.len()));
            }
        }
        if role == PageRole::FreeMap && page.key(i).ok().and_then(chunk_index).is_none() {
            self.note(Some(id), format!("free-map key {i} is not 8 bytes"));
        }
        Ok(())
    }

    fn overflow(&mut self, leaf: PageId, first: PageId, len: u64, n: u64) -> Result<()> {
        let run = match self.view.pages(first, n) {
            Ok(r) => r,
            Err(e) => {
                self.note(Some(first), strip(&e));
                return Ok(());
            }
        };
        if let Err(e) = verify_checksum(first, run) {
            self.note(Some(first), format!("overflow run: {}", strip(&e)));
            return Ok(());
        }
        match PageHeader::read(run) {
            Some(h) if h.page_type == PageType::Overflow => {
                if h.txid > self.meta.txid {
                    self.note(
                        Some(first),
                        format!(
                            "written by txid {}, newer than the meta's {}",
                            h.txid, self.meta.txid
                        ),
                    );
                }
            }
            _ => {
                self.note(Some(first), "expected an overflow page");
                return Ok(());
            }
        }
        let stored = u64::from_le_bytes(run[16..24].try_into().unwrap_or([0; 8]));
        if stored != len {
            self.note(
                Some(first),
                format!("overflow holds {stored} bytes but leaf {leaf} says {len}"),
            );
        }
        Ok(())
    }
}

impl Db {
    /// Full integrity check of the newest commit; `Err(Error::CheckFailed)` describing the
    /// problems if any.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// db.check()?; // every checksum, key order, count, and every page reachable or free
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn check(&self) -> Result<()> {
        let r = self.check_report()?;
        if r.problems.is_empty() {
            Ok(())
        } else {
            Err(Error::CheckFailed(r.problems))
        }
    }

    /// Full integrity check, listing every problem found (up to a thousand). See
    /// [`CheckReport`] for an example.
    pub fn check_report(&self) -> Result<CheckReport> {
        let rx = self.begin_read()?;
        let meta = rx.meta();
        let view = View {
            verify: true,
            ..rx.view()
        };
        let mut walk = Walk::new(view, true);
        let mut c = Checker {
            view,
            meta,
            problems: Vec::new(),
        };
        let mut report = CheckReport {
            txid: meta.txid,
            ..Default::default()
        };
        let opened = &rx.file().opened;
        if let Some(d) = &opened.discarded {
            // Opened one commit back on request: the file lost a durable commit.
            c.note(None, format!("newest commit discarded: {d}"));
        } else if opened.other_damaged {
            report.notes.push(format!(
                "meta fallback: the other meta page is damaged ({}); the database opened at txid {}",
                opened.other.as_ref().err().cloned().unwrap_or_default(),
                opened.current.txid
            ));
        }
        c.tree(&mut walk, "(catalog)", &meta.catalog, PageRole::Catalog);
        c.tree(&mut walk, "(free map)", &meta.freemap, PageRole::FreeMap);
        if c.problems.is_empty() {
            let names = rx.tree_names()?;
            for name in names {
                match rx.open_tree(&name) {
                    Ok(t) => {
                        let root = t.root();
                        c.tree(&mut walk, &name, &root, PageRole::Data);
                    }
                    Err(e) => c.note(None, format!("tree {name:?}: {e}")),
                }
            }
        }
        let reachable = walk.reachable();
        // Every page is exactly one of reachable or marked unreachable.
        match crate::freemap::unreachable_runs(&c.view, &meta) {
            Err(e) => c.note(Some(meta.freemap.root), strip(&e)),
            Ok(runs) if c.problems.is_empty() && meta.freemap_behind => {
                // The free map records an earlier commit (docs/format.md, "A free map behind
                // its meta"): this one's unreachable pages are the ones its trees leave.
                let unreached = walk.seen.gaps(2, meta.high_water);
                let unreachable: u64 = unreached.iter().map(|&(_, n)| n).sum();
                report.unreachable_pages = unreachable;
                report.freemap_behind = true;
                c.counts(reachable, unreachable);
                // The writer's state for this commit: the free map with the bits it carries,
                // and its in-memory free space, must both be exactly those pages.
                // Compared as runs: the unreached pages of a crafted meta can number billions
                // (a high-water mark far past the pages a sparse file holds), the free map's
                // marked pages only what its chunks hold.
                if let Some(w) = writer_of(&rx, &meta) {
                    let want = &unreached;
                    let mut marked = PageSet::from_runs(&runs);
                    for (p, unreachable) in w.freemap_carried.iter() {
                        if unreachable {
                            marked.insert(p);
                        } else {
                            marked.remove(p);
                        }
                    }
                    if marked.runs() != *want {
                        c.note(
                            None,
                            "the free map with the bits the writer carries differs from the pages no tree reaches",
                        );
                    }
                    if in_memory_free(&w, meta.high_water) != *want {
                        c.note(
                            None,
                            "the in-memory free-space state differs from the pages no tree reaches",
                        );
                    }
                }
            }
            Ok(runs) if c.problems.is_empty() => {
                let marked = PageSet::from_runs(&runs);
                let unreachable = marked.len();
                report.unreachable_pages = unreachable;
                // Stops at the problem limit: a meta can claim billions of pages that a sparse
                // file does not hold.
                for q in 2..meta.high_water {
                    if c.enough() {
                        break;
                    }
                    let r = walk.seen.contains(q);
                    let m = marked.contains(q);
                    if r && m {
                        c.note(Some(q), "reachable, yet the free map marks it free");
                    } else if !r && !m {
                        c.note(Some(q), "neither reachable nor marked free (leaked)");
                    }
                }
                c.counts(reachable, unreachable);
                // The writer's in-memory free space must be exactly the unreachable pages.
                if let Some(w) = writer_of(&rx, &meta) {
                    if in_memory_free(&w, meta.high_water) != marked.runs() {
                        c.note(
                            None,
                            "the in-memory free-space state differs from the free map",
                        );
                    }
                }
            }
            Ok(_) => {}
        }
        report.reachable_pages = reachable;
        report.problems = c.problems;
        Ok(report)
    }
}

/// The writer's state, when it is this process's, free now, and of the commit `meta` (the
/// checked snapshot is the newest).
fn writer_of<'r>(
    rx: &'r crate::read::ReadTx,
    meta: &Meta,
) -> Option<
    parking_lot::lock_api::MutexGuard<'r, larch_pager::UnfairRawMutex, crate::file::WriterState>,
> {
    let file = rx.file();
    let w = file.writer.try_lock()?;
    (file.durability.lock().committed.txid == meta.txid && !file.opts.read_only).then_some(w)
}

/// The writer's unreachable pages below `high_water`: free, pending and reader-pinned, as
/// runs in order, each as long as it can be (overlaps merged, so two equal sets of pages give
/// the same runs whatever extents hold them).
fn in_memory_free(w: &crate::file::WriterState, high_water: PageId) -> Vec<(PageId, u64)> {
    let mut runs: Vec<(PageId, u64)> = Vec::new();
    let mut mark = |p: PageId, n: u64| {
        let end = p.saturating_add(n).min(high_water);
        if p < end {
            runs.push((p, end - p));
        }
    };
    for (p, n) in w.free.policy.extents() {
        mark(p, n);
    }
    for (_, p, n) in w.free.pending.iter().chain(w.reader_pinned.iter()) {
        mark(p, n);
    }
    normalized(runs)
}

/// `runs` (start, length) as the runs of the pages they cover: in order, overlapping and
/// adjacent runs merged.
fn normalized(mut runs: Vec<(PageId, u64)>) -> Vec<(PageId, u64)> {
    runs.sort_unstable();
    let mut out: Vec<(PageId, u64)> = Vec::with_capacity(runs.len());
    for (p, n) in runs {
        match out.last_mut() {
            Some((q, m)) if p <= *q + *m => *m = (*m).max(p + n - *q),
            _ => out.push((p, n)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::normalized;

    #[test]
    fn normalized_runs_are_sorted_with_overlaps_and_neighbours_merged() {
        assert_eq!(normalized(vec![]), vec![]);
        assert_eq!(
            normalized(vec![(10, 5), (2, 3), (5, 1), (12, 10), (40, 1), (30, 2)]),
            vec![(2, 4), (10, 12), (30, 2), (40, 1)]
        );
        // A run inside another leaves it as it is.
        assert_eq!(normalized(vec![(2, 100), (5, 3)]), vec![(2, 100)]);
    }
}
