//! `Db::check`: walk every tree of the newest commit and prove the file consistent.
//!
//! Verified: every page's checksum, type and tree role; txids no newer than the meta; keys in
//! order and inside their parent's separators; leaf levels at the tree depth; entry counts;
//! overflow runs; catalog and free-map records; and that every page below the high-water mark
//! is exactly one of reachable or marked unreachable in the free map, matching the meta's
//! counters and the in-memory free-space state.

use std::fmt;

use larch_pager::{Meta, PageHeader, PageRole, PageType, TreeRoot};

use crate::db::Db;
use crate::error::{Error, Result};
use crate::freemap::{chunk_index, CHUNK_BYTES};
use crate::node::{ValRef, OVERFLOW_HEADER};
use crate::view::{verify_checksum, View, MAX_DEPTH};
use crate::PageId;

/// Stop collecting after this many problems: a wrecked file need not list every page.
const MAX_PROBLEMS: usize = 1000;

/// One thing wrong with the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The page concerned, if one.
    pub page: Option<PageId>,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.page {
            Some(p) => write!(f, "page {p}: {}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

/// Everything `check` found.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// The commit checked.
    pub txid: u64,
    /// Pages reachable from the meta (metas included).
    pub reachable_pages: u64,
    /// Pages the free map marks unreachable.
    pub unreachable_pages: u64,
    /// Notes that are not damage to the checked commit (e.g. open fell back past a torn meta).
    pub notes: Vec<String>,
    /// Damage found; empty when the file is sound.
    pub problems: Vec<Problem>,
}

impl CheckReport {
    /// True when no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

struct Checker<'a> {
    view: View<'a>,
    meta: Meta,
    seen: Vec<u64>,
    reachable: u64,
    problems: Vec<Problem>,
}

impl Checker<'_> {
    fn problem(&mut self, page: Option<PageId>, what: impl Into<String>) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(Problem {
                page,
                what: what.into(),
            });
        }
    }

    /// Claim pages `p..p+n` for a tree; false (and a problem) if out of range or claimed twice.
    fn claim(&mut self, p: PageId, n: u64, what: &str) -> bool {
        let end = p.checked_add(n);
        if p < 2 || end.is_none_or(|e| e > self.meta.high_water) {
            self.problem(
                Some(p),
                format!(
                    "{what} points outside the file's pages 2..{}",
                    self.meta.high_water
                ),
            );
            return false;
        }
        for q in p..p + n {
            let (w, b) = ((q / 64) as usize, q % 64);
            if self.seen[w] & (1 << b) != 0 {
                self.problem(
                    Some(q),
                    format!("{what}: page is reachable twice (shared or a cycle)"),
                );
                return false;
            }
            self.seen[w] |= 1 << b;
        }
        self.reachable += n;
        true
    }

    /// Check a tree; returns the number of entries found.
    fn tree(&mut self, name: &str, root: &TreeRoot, role: PageRole) -> u64 {
        if root.root == 0 {
            if root.entries != 0 || root.depth != 0 {
                self.problem(
                    None,
                    format!(
                        "tree {name:?} is empty but records {} entries, depth {}",
                        root.entries, root.depth
                    ),
                );
            }
            return 0;
        }
        if root.depth == 0 || root.depth > MAX_DEPTH {
            self.problem(
                Some(root.root),
                format!("tree {name:?} has impossible depth {}", root.depth),
            );
            return 0;
        }
        let entries = self.node(name, root.root, root.depth, role, None, None);
        if entries != root.entries {
            self.problem(
                Some(root.root),
                format!(
                    "tree {name:?} records {} entries but holds {entries}",
                    root.entries
                ),
            );
        }
        entries
    }

    fn node(
        &mut self,
        name: &str,
        id: PageId,
        level: u32,
        role: PageRole,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> u64 {
        if self.problems.len() >= MAX_PROBLEMS || !self.claim(id, 1, &format!("tree {name:?}")) {
            return 0;
        }
        let bytes = match self.view.pages(id, 1) {
            Ok(b) => b,
            Err(e) => {
                self.problem(Some(id), e.to_string());
                return 0;
            }
        };
        if let Err(e) = verify_checksum(id, bytes) {
            self.problem(Some(id), format!("tree {name:?}: {}", strip(&e)));
            return 0;
        }
        let page = match crate::node::NodePage::parse(id, bytes, role) {
            Ok(p) => p,
            Err(e) => {
                self.problem(Some(id), format!("tree {name:?}: {}", strip(&e)));
                return 0;
            }
        };
        if page.txid() > self.meta.txid {
            self.problem(
                Some(id),
                format!(
                    "written by txid {}, newer than the meta's {}",
                    page.txid(),
                    self.meta.txid
                ),
            );
        }
        if page.leaf != (level == 1) {
            self.problem(
                Some(id),
                format!(
                    "tree {name:?}: a {} at level {level} (leaves are level 1)",
                    if page.leaf { "leaf" } else { "branch" }
                ),
            );
            return 0;
        }
        // Keys strictly increasing and inside [lo, hi).
        let mut prev: Option<&[u8]> = None;
        let first_key = if page.leaf { 0 } else { 1 };
        for i in first_key..page.count {
            let k = match page.key(i) {
                Ok(k) => k,
                Err(e) => {
                    self.problem(Some(id), strip(&e));
                    return 0;
                }
            };
            if k.is_empty() {
                self.problem(Some(id), format!("entry {i} has an empty key"));
            }
            if prev.is_some_and(|p| p >= k) {
                self.problem(Some(id), format!("keys out of order at entry {i}"));
            }
            if lo.is_some_and(|l| k < l) || hi.is_some_and(|h| k >= h) {
                self.problem(
                    Some(id),
                    format!("key of entry {i} lies outside the range its parent gives this page"),
                );
            }
            prev = Some(k);
        }
        if page.leaf {
            if page.count == 0 {
                // Never legal: an empty tree has no root page, and merges remove empty leaves.
                self.problem(Some(id), "empty leaf");
            }
            for i in 0..page.count {
                match page.entry(i) {
                    Ok((_, ValRef::Overflow { page: op, len })) => self.overflow(id, op, len),
                    Ok((_, ValRef::Inline(v))) => {
                        if role == PageRole::Catalog && TreeRoot::decode(v).is_none() {
                            self.problem(Some(id), format!("catalog entry {i} is not a tree root"));
                        }
                        if role == PageRole::FreeMap && v.len() != CHUNK_BYTES {
                            self.problem(
                                Some(id),
                                format!("free-map chunk {i} is {} bytes", v.len()),
                            );
                        }
                    }
                    Err(e) => self.problem(Some(id), strip(&e)),
                }
                if role == PageRole::FreeMap && page.key(i).ok().and_then(chunk_index).is_none() {
                    self.problem(Some(id), format!("free-map key {i} is not 8 bytes"));
                }
            }
            return page.count as u64;
        }
        let mut total = 0u64;
        for i in 0..page.count {
            let child = match page.child(i) {
                Ok(c) => c,
                Err(e) => {
                    self.problem(Some(id), strip(&e));
                    continue;
                }
            };
            let clo = if i == 0 { lo } else { page.key(i).ok() };
            let chi = if i + 1 < page.count {
                page.key(i + 1).ok()
            } else {
                hi
            };
            total += self.node(name, child, level - 1, role, clo, chi);
        }
        total
    }

    fn overflow(&mut self, leaf: PageId, first: PageId, len: u64) {
        let ps = self.view.page_size as u64;
        let n = (OVERFLOW_HEADER as u64).saturating_add(len).div_ceil(ps);
        if !self.claim(first, n, &format!("overflow value in leaf {leaf}")) {
            return;
        }
        let run = match self.view.pages(first, n) {
            Ok(r) => r,
            Err(e) => return self.problem(Some(first), strip(&e)),
        };
        if let Err(e) = verify_checksum(first, run) {
            return self.problem(Some(first), format!("overflow run: {}", strip(&e)));
        }
        match PageHeader::read(run) {
            Some(h) if h.page_type == PageType::Overflow => {
                if h.txid > self.meta.txid {
                    self.problem(
                        Some(first),
                        format!(
                            "written by txid {}, newer than the meta's {}",
                            h.txid, self.meta.txid
                        ),
                    );
                }
            }
            _ => return self.problem(Some(first), "expected an overflow page"),
        }
        let stored = u64::from_le_bytes(run[16..24].try_into().unwrap_or([0; 8]));
        if stored != len {
            self.problem(
                Some(first),
                format!("overflow holds {stored} bytes but leaf {leaf} says {len}"),
            );
        }
    }
}

fn strip(e: &Error) -> String {
    match e {
        Error::Corrupt { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

impl Db {
    /// Full integrity check of the newest commit; `Err(Error::CheckFailed)` describing the
    /// problems if any.
    pub fn check(&self) -> Result<()> {
        let r = self.check_report()?;
        if r.problems.is_empty() {
            Ok(())
        } else {
            Err(Error::CheckFailed(r.problems))
        }
    }

    /// Full integrity check, listing every problem found (up to a thousand).
    pub fn check_report(&self) -> Result<CheckReport> {
        let rx = self.begin_read()?;
        let meta = rx.meta();
        let view = View {
            verify: true,
            ..rx.view()
        };
        let words = meta.high_water.div_ceil(64) as usize;
        let mut c = Checker {
            view,
            meta,
            seen: vec![0u64; words],
            reachable: 2,
            problems: Vec::new(),
        };
        let mut report = CheckReport {
            txid: meta.txid,
            ..Default::default()
        };
        let opened = &rx.core().opened;
        if let Some(d) = &opened.discarded {
            // Opened one commit back on request: the file lost a durable commit.
            c.problem(None, format!("newest commit discarded: {d}"));
        } else if opened.other_damaged {
            report.notes.push(format!(
                "meta fallback: the other meta page is damaged ({}); the database opened at txid {}",
                opened.other.as_ref().err().cloned().unwrap_or_default(),
                opened.current.txid
            ));
        }
        c.tree("(catalog)", &meta.catalog, PageRole::Catalog);
        c.tree("(free map)", &meta.freemap, PageRole::FreeMap);
        if c.problems.is_empty() {
            let names = rx.tree_names()?;
            for name in names {
                match rx.open_tree(&name) {
                    Ok(t) => {
                        let root = t.root();
                        c.tree(&name, &root, PageRole::Data);
                    }
                    Err(e) => c.problem(None, format!("tree {name:?}: {e}")),
                }
            }
        }
        // Every page is exactly one of reachable or marked unreachable.
        match crate::freemap::unreachable_runs(&c.view, &meta) {
            Err(e) => c.problem(Some(meta.freemap.root), strip(&e)),
            Ok(runs) if c.problems.is_empty() => {
                let mut marked = vec![0u64; words];
                let mut unreachable = 0;
                for (p, n) in runs {
                    for q in p..p + n {
                        marked[(q / 64) as usize] |= 1 << (q % 64);
                        unreachable += 1;
                    }
                }
                report.unreachable_pages = unreachable;
                for q in 2..meta.high_water {
                    let (w, b) = ((q / 64) as usize, q % 64);
                    let r = c.seen[w] & (1 << b) != 0;
                    let m = marked[w] & (1 << b) != 0;
                    if r && m {
                        c.problem(Some(q), "reachable, yet the free map marks it free");
                    } else if !r && !m {
                        c.problem(Some(q), "neither reachable nor marked free (leaked)");
                    }
                }
                if meta.live_pages != c.reachable || meta.unreachable_pages != unreachable {
                    c.problem(
                        None,
                        format!(
                            "meta counts {} live and {} unreachable pages; found {} and {unreachable}",
                            meta.live_pages, meta.unreachable_pages, c.reachable
                        ),
                    );
                }
                // The writer's in-memory free space must be exactly the unreachable pages.
                if let Some(w) = rx.core().writer.try_lock() {
                    if rx.core().durability.lock().committed.txid == meta.txid
                        && !rx.core().opts.read_only
                    {
                        let mut mem = vec![0u64; words];
                        let mut mark = |p: PageId, n: u64| {
                            for q in p..p + n {
                                if q < meta.high_water {
                                    mem[(q / 64) as usize] |= 1 << (q % 64);
                                }
                            }
                        };
                        for (p, n) in w.free.policy.extents() {
                            mark(p, n);
                        }
                        for (_, p, n) in w.free.pending.iter().chain(w.reader_pinned.iter()) {
                            mark(p, n);
                        }
                        if mem != marked {
                            c.problem(
                                None,
                                "the in-memory free-space state differs from the free map",
                            );
                        }
                    }
                }
            }
            Ok(_) => {}
        }
        report.reachable_pages = c.reachable;
        report.problems = c.problems;
        Ok(report)
    }
}
