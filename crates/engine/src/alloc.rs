//! Page allocation of a write transaction, freeing, and the undo log that puts the free-space
//! state back when the transaction does not commit.
//!
//! A page this transaction frees is not reusable at once unless this transaction allocated it:
//! a committed page stays pending under the transaction's txid (or reader-pinned, unpinned.rs)
//! until no reader and no crash fallback can reach it (docs/format.md, invariant 1).

use crate::node::{Child, Node};
use crate::write::{Txn, FREEMAP};
use crate::{PageId, TxId};

/// The most pages a commit's hot run may take past the high-water mark (within the file's
/// length), once per open file, when the free set has no run for it (`Txn::gather_hot_pages`).
const HOT_RUN_GROWTH_MAX: u64 = 8;

/// A commit whose dirty nodes need more pages than this past its hot and warm ones takes
/// them from runs of at least `LONG_RUN_MIN` pages and the end of the file, not from every
/// short hole (`Txn::gather_hot_pages`).
const BIG_COMMIT_PAGES: u64 = 4096;
const LONG_RUN_MIN: u64 = 16;

/// The first provisional page id (`Txn::alloc_node`): far past any page a file can have
/// (`larch_pager` refuses files past 16 TiB), so none is ever mistaken for a real page.
pub(crate) const PROVISIONAL: PageId = 1 << 62;

/// What to undo if the transaction does not commit.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Undo {
    /// Pages taken from the policy's reusable set.
    Alloc(PageId, u64),
    /// Pages allocated by this transaction and given back to the policy.
    FreshFreed(PageId, u64),
    /// Committed pages this transaction stopped reaching (pending under its txid).
    Freed(PageId, u64),
    /// The same, for pages written after the last durable commit (unpinned.rs).
    ReaderFreed(PageId, u64),
    /// Freed into the pending queue only because a durable point pins it (unpinned.rs,
    /// `note_point_pinned`).
    PointFreed(PageId, u64),
}

impl Txn {
    /// A page id for a new dirty node. Where the commit gives every dirty node its page
    /// (`Txn::gather_hot_pages`: policies that hand out runs, not compacting in place), the
    /// id is provisional, unique in the transaction and never written: nothing is taken from
    /// the free set until commit, so nothing is given back there. The free map's own nodes
    /// are saved after that and take real pages.
    pub(crate) fn alloc_node(&mut self) -> PageId {
        // After the commit gathered the pages, a node made then (none is expected: the
        // catalog's second pass stores same-size values) takes a real page.
        if self.gathers_pages() && !self.gathered && self.active != FREEMAP {
            let p = PROVISIONAL + self.provisional;
            self.provisional += 1;
            return p;
        }
        self.alloc(1)
    }

    /// Whether the commit gives the dirty nodes their pages (`Txn::gather_hot_pages`).
    pub(crate) fn gathers_pages(&self) -> bool {
        !self.compacting && self.writer.free.policy.hands_out_runs()
    }

    /// `n` contiguous pages this transaction may write.
    pub(crate) fn alloc(&mut self, n: u64) -> PageId {
        if n == 1 && self.active == FREEMAP {
            // Taken at commit next to the hot run (`Txn::gather_hot_pages`).
            if let Some(p) = self.freemap_slots.pop_front() {
                self.freemap_changes.insert(p, false);
                return p;
            }
        }
        let got = if self.compacting {
            self.writer.free.policy.allocate_lowest(n)
        } else {
            self.writer.free.policy.allocate(n)
        };
        let p = match got {
            Some(p) => {
                self.undo.push(Undo::Alloc(p, n));
                p
            }
            None => {
                let p = self.high_water;
                self.high_water += n;
                p
            }
        };
        for i in 0..n {
            self.freemap_changes.insert(p + i, false);
        }
        p
    }

    /// Committed pages this transaction no longer reaches: pending until safe.
    pub(crate) fn free_committed(&mut self, p: PageId, n: u64) {
        let written = self
            .committed_view()
            .pages(p, 1)
            .ok()
            .and_then(larch_pager::PageHeader::read)
            .map_or(0, |h| h.txid);
        self.free_written(p, n, written);
    }

    /// [`Txn::free_committed`] of pages whose header (already read) says `written`
    /// wrote them.
    pub(crate) fn free_written(&mut self, p: PageId, n: u64, written: TxId) {
        if n == 1 && written == self.txid && self.spilled.remove(&p).is_some() {
            // A leaf this transaction wrote before its commit (`Txn::spill`): no reader and
            // no crash fallback ever reached it.
            self.free_fresh(p, n);
            return;
        }
        if p.saturating_add(n) > self.base.meta.high_water {
            // Not a page of the state this transaction began from, so a pointer in a damaged
            // or crafted file: the pages there are this transaction's own (an overflow run,
            // a leaf written before the commit), and freeing them would hand out pages a
            // tree still holds. Left as they are (the file's check reports the pointer).
            return;
        }
        // Written after the last durable commit: only readers can reach it (unpinned.rs).
        if written > self.on_disk {
            self.writer.reader_pinned.add(self.txid, p, n, written);
            self.undo.push(Undo::ReaderFreed(p, n));
        } else if written > self.meta_on_disk {
            self.writer.free.free(self.txid, p, n);
            self.writer.reader_pinned.note_point_pinned(self.txid, n);
            self.undo.push(Undo::PointFreed(p, n));
        } else {
            self.writer.free.free(self.txid, p, n);
            self.undo.push(Undo::Freed(p, n));
        }
        for i in 0..n {
            self.freemap_changes.insert(p + i, true);
        }
    }

    /// Pages this transaction allocated and no longer needs: reusable at once, unless a
    /// savepoint may still need them. An overflow run is written when its value is inserted,
    /// so a run allocated before a savepoint, freed after it and reused would be overwritten
    /// under the entry a rollback brings back; such pages wait for the commit (`held_fresh`).
    pub(crate) fn free_fresh(&mut self, p: PageId, n: u64) {
        if p >= PROVISIONAL {
            // Never taken from the free set (`Txn::alloc_node`).
            return;
        }
        if self.savepoints.is_empty() {
            self.writer.free.policy.insert(p, n);
        } else {
            self.held_fresh.push((p, n));
        }
        self.undo.push(Undo::FreshFreed(p, n));
        for i in 0..n {
            self.freemap_changes.insert(p + i, true);
        }
    }

    /// Put the free-space state back as it was when the transaction began, and drop every
    /// dirty node.
    pub(crate) fn rollback(&mut self) {
        self.undo_to(0, self.base.meta.high_water);
        // Where the hot run went is the writer's until the commit is: a failed one leaves
        // the once-per-file growth unused and the last hot run as it was.
        if let Some((grown, last)) = self.hot_run_before.take() {
            self.writer.hot_run_grown = grown;
            self.writer.last_hot_run = last;
        }
        self.held_fresh.clear();
        self.spilled.clear();
        self.freemap_slots.clear();
        self.park();
        for t in &mut self.trees {
            self.dropped_heap += t.nodes.iter().map(Node::heap_bytes).sum::<usize>();
            t.nodes.clear();
            t.full_leaves.clear();
        }
        self.freemap_changes.clear();
    }

    /// Undo the allocations and frees logged after the first `len` entries of the undo log,
    /// and lower the high-water mark back to `high_water` (its value when the log was `len`
    /// long): the free-space state of that moment (a savepoint, or the transaction's start).
    pub(crate) fn undo_to(&mut self, len: usize, high_water: PageId) {
        let txid = self.txid;
        let writer = &mut *self.writer;
        let free = &mut writer.free;
        for u in self.undo.drain(len..).rev() {
            match u {
                Undo::Alloc(p, n) => {
                    if p < high_water {
                        free.policy.insert(p, n.min(high_water - p));
                    }
                }
                Undo::FreshFreed(p, n) => {
                    for q in p..p + n {
                        if free.policy.contains(q) {
                            free.policy.remove(q, 1);
                        }
                    }
                }
                Undo::Freed(p, n) => {
                    free.pending.remove(txid, p, n);
                }
                Undo::PointFreed(p, n) => {
                    free.pending.remove(txid, p, n);
                    writer.reader_pinned.unnote_point_pinned(txid, n);
                }
                Undo::ReaderFreed(p, n) => {
                    writer.reader_pinned.remove(txid, p, n);
                }
            }
        }
        free.policy.truncate(high_water);
        self.high_water = high_water;
    }

    /// Move the commit's hot dirty nodes (the root of every changed tree, the catalog's
    /// included: the next commit copies them again) to one run of pages, followed by the
    /// slots for the free map's first copied nodes (`freemap_slots`: its root and the leaves
    /// that hold the chunks of this hot run and the last one, which the next commit copies
    /// again too; `hot_chunks`); then the nodes copied from pages the last commit wrote (most
    /// of a batch's branches: the next commit is likely to copy them again) to the lowest
    /// runs of the free set; the other dirty nodes take single pages as before (lowest
    /// first). True if any node moved.
    ///
    /// The next commit frees the whole hot run, and the one after it (once that is durable and
    /// no reader holds it) finds it free and takes it again, so two runs take turns and a
    /// one-key commit writes its root, catalog and free-map pages in one call, without the
    /// file growing. The run is the shortest free one that holds it, else the longest and so
    /// on ([`larch_freelist::ExtentSet::take_runs`]). Once per open file, when the free set has
    /// no run for it, it is taken past the high-water mark instead if the file already has
    /// room there (at most `HOT_RUN_GROWTH_MAX` pages), which starts the turns. The other
    /// nodes never take the longest runs: those are often the free tail of the file, which
    /// would then not be given back.
    ///
    /// Until then the nodes hold provisional page ids (`Txn::alloc_node`): nothing is taken
    /// from the free set for them before the commit, so nothing goes back to it here.
    /// Called at commit after the catalog's roots are stored (a root's page may change: the
    /// caller stores them again) and before the free map is saved (it records the exchange;
    /// the caller frees the slots it did not use). Only for policies that hand out runs, and
    /// not while compacting in place, which wants the lowest pages.
    pub(crate) fn gather_hot_pages(&mut self) -> bool {
        if !self.gathers_pages() {
            return false;
        }
        // Its lists, emptied by the last commit (scratch.rs).
        let scratch = &mut self.writer.scratch;
        let mut order = std::mem::take(&mut scratch.hot_order);
        let mut runs = std::mem::take(&mut scratch.runs);
        let moved = self.gather_hot_pages_into(&mut order, &mut runs);
        let scratch = &mut self.writer.scratch;
        scratch.hot_order = crate::scratch::emptied(order);
        scratch.runs = runs.map(crate::scratch::emptied);
        moved
    }

    /// [`Txn::gather_hot_pages`] with its lists: `order`, and the hot, warm and cold runs.
    fn gather_hot_pages_into(
        &mut self,
        order: &mut Vec<(u8, usize, PageId, usize)>,
        [runs, warm_runs, cold_runs]: &mut [Vec<(PageId, u64)>; 3],
    ) -> bool {
        self.gathered = true;
        self.park();
        // (class, tree, page, node): roots first (0, catalog first), then the nodes copied
        // from a page the last commit wrote (1), then the rest (2), by page.
        for (t, tree) in self.trees.iter().enumerate() {
            if t == FREEMAP {
                continue;
            }
            let root = match tree.root {
                Some(Child::Node(i)) => Some(i),
                _ => None,
            };
            order.extend(
                tree.nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| n.live)
                    .map(|(i, n)| {
                        let class = if root == Some(i) {
                            0
                        } else {
                            2 - u8::from(n.hot)
                        };
                        (class, t, n.page, i)
                    }),
            );
        }
        if order.is_empty() {
            return false;
        }
        // By class, then by (tree for the roots, page) within each class. No two nodes share
        // a key (a page, provisional or not, is one node's), so an unstable sort orders them
        // as a stable one would; a commit that changed one tree made its nodes in the order
        // of their provisional ids, and often needs only the check.
        let key = |&(class, t, p, _): &(u8, usize, PageId, usize)| {
            (class, if class == 0 { t } else { 0 }, p)
        };
        if !order.is_sorted_by_key(key) {
            // The classes in turn (each in the order made, as the nodes of one tree are),
            // then whatever a class needs sorting: one pass each, where sorting the whole
            // list of a large commit would compare every node.
            let mut by_class = Vec::with_capacity(order.len());
            for class in 0..3 {
                let from = by_class.len();
                by_class.extend(order.iter().filter(|o| o.0 == class));
                let part = &mut by_class[from..];
                if !part.is_sorted_by_key(key) {
                    part.sort_unstable_by_key(key);
                }
            }
            *order = by_class;
        }
        let hot = order.iter().filter(|o| o.0 == 0).count() as u64;
        let warm = order.iter().filter(|o| o.0 == 1).count() as u64;
        let cold = order.len() as u64 - hot - warm;
        let writer = &mut *self.writer;
        let policy = &mut writer.free.policy;
        // Every node's page is provisional (`Txn::alloc_node`) unless it was made while the
        // free map was active (it is not gathered) or before the policy said so.
        for &(_, _, p, _) in order.iter() {
            if p < PROVISIONAL {
                policy.insert(p, 1);
                self.undo.push(Undo::FreshFreed(p, 1));
            }
        }
        // The hot run: the roots and the free map's slots, one per level of it and one more
        // for the leaf of the other hot run's chunk.
        // None when the commit leaves the free map to a later one.
        let fm_depth = u64::from(self.trees[FREEMAP].depth).max(1);
        let slots = if self.saves_free_map {
            (fm_depth + u64::from(fm_depth > 1)).min(4)
        } else {
            0
        };
        let want = hot + slots;
        self.hot_run_before
            .get_or_insert((writer.hot_run_grown, writer.last_hot_run));
        let hw = &mut self.high_water;
        let undo = &mut self.undo;
        if let Some(p) = policy.allocate_run(want) {
            undo.push(Undo::Alloc(p, want));
            runs.push((p, want));
        } else if !writer.hot_run_grown
            && want <= HOT_RUN_GROWTH_MAX
            && (*hw + want) * self.limits.page_size as u64 <= self.db.pager.file_len()
        {
            writer.hot_run_grown = true;
            *hw += want;
            runs.push((*hw - want, want));
        } else {
            take_pages(&mut **policy, undo, hw, want, Take::Runs, runs)
        };
        // The nodes copied from pages the last commit wrote: lowest runs first (the next
        // commit frees most of them again, so their runs come back mostly whole).
        take_pages(&mut **policy, undo, hw, warm, Take::LowRuns, warm_runs);
        // The rest one page at a time, lowest first, as they were allocated; in a commit of
        // more than `BIG_COMMIT_PAGES` of them, only runs of `LONG_RUN_MIN` pages or more,
        // then the end of the file: filling every short hole would cost a write call each.
        let how = if cold > BIG_COMMIT_PAGES {
            Take::LongRuns
        } else {
            Take::Singles
        };
        take_pages(&mut **policy, undo, hw, cold, how, cold_runs);
        // Every old page is marked free and every new one taken; a page in both stays taken.
        for &(_, _, p, _) in order.iter() {
            if p < PROVISIONAL {
                self.freemap_changes.insert(p, true);
            }
        }
        let hot_pages = runs.iter().flat_map(|&(p, len)| p..p + len);
        debug_assert_eq!(hot_pages.clone().count() as u64, want);
        // The pages after the roots' are the free map's slots (none when it is not saved).
        let slot_pages: Vec<PageId> = if slots > 0 {
            hot_pages.clone().skip(hot as usize).collect()
        } else {
            Vec::new()
        };
        let pages = hot_pages
            .take(hot as usize)
            .chain(warm_runs.iter().flat_map(|&(p, len)| p..p + len))
            .chain(cold_runs.iter().flat_map(|&(p, len)| p..p + len));
        let mut moved = false;
        for (&(_, t, old, i), page) in order.iter().zip(pages) {
            self.trees[t].nodes[i].page = page;
            self.freemap_changes.insert(page, false);
            moved |= page != old;
        }
        if slot_pages.is_empty() {
            return moved;
        }
        // Not marked taken yet: `alloc` does when the free map takes them.
        let chunk = |p: PageId| p / crate::freemap::CHUNK_PAGES;
        self.hot_chunks = slot_pages.iter().map(|&p| chunk(p)).collect();
        if let Some(last) = self.writer.last_hot_run.replace(slot_pages[0]) {
            self.hot_chunks.push(chunk(last));
        }
        self.hot_chunks.sort_unstable();
        self.hot_chunks.dedup();
        self.freemap_slots = slot_pages.into();
        moved
    }

    /// Lower the high-water mark over a run of reusable pages at the end of the file. Only
    /// runs worth it (1/32 of the file, at least 16 pages) unless compacting, so a file that
    /// breathes does not shrink and regrow on every commit. The file itself is truncated once
    /// a meta with the lower mark is durable (`OpenFile::trim_to_durable`). True if it did.
    pub(crate) fn shrink_free_tail(&mut self) -> bool {
        let tail = self.writer.free.policy.tail_run(self.high_water);
        let worth = if self.compacting {
            1
        } else {
            (self.high_water / 32).max(16)
        };
        if tail < worth || tail == 0 {
            return false;
        }
        let new_high_water = self.high_water - tail;
        if !self.writer.free.policy.remove(new_high_water, tail) {
            return false;
        }
        // Like an allocation: undo puts the pages back.
        self.undo.push(Undo::Alloc(new_high_water, tail));
        for p in new_high_water..self.high_water {
            self.freemap_changes.insert(p, false);
        }
        self.high_water = new_high_water;
        true
    }
}

/// How [`take_pages`] takes pages from the reusable set.
#[derive(Clone, Copy)]
enum Take {
    /// [`larch_freelist::FreeSpacePolicy::allocate_runs`]: the shortest run that holds them,
    /// else the longest runs, then single pages.
    Runs,
    /// [`larch_freelist::FreeSpacePolicy::allocate_low_runs`]: the lowest runs, then single
    /// pages.
    LowRuns,
    /// The pages one page at a time from [`larch_freelist::FreeSpacePolicy::allocate`]
    /// would give ([`larch_freelist::FreeSpacePolicy::allocate_pages`]).
    Singles,
    /// [`larch_freelist::FreeSpacePolicy::allocate_long_runs`]: the lowest runs of
    /// `LONG_RUN_MIN` pages or more, nothing shorter.
    LongRuns,
}

/// `n` pages as runs `(start, len)` added to `runs` (empty): from the reusable set as `how`
/// says, logged in `undo`, and past the high-water mark `hw` (raised) for what the set does
/// not have.
fn take_pages(
    policy: &mut dyn larch_freelist::FreeSpacePolicy,
    undo: &mut Vec<Undo>,
    hw: &mut PageId,
    n: u64,
    how: Take,
    runs: &mut Vec<(PageId, u64)>,
) {
    debug_assert!(runs.is_empty());
    let got = match how {
        Take::Runs => policy.allocate_runs(n, runs),
        Take::LowRuns => policy.allocate_low_runs(n, runs),
        Take::Singles => policy.allocate_pages(n, runs),
        Take::LongRuns => policy.allocate_long_runs(n, LONG_RUN_MIN, runs),
    }
    .min(n);
    for &(p, len) in runs.iter() {
        undo.push(Undo::Alloc(p, len));
    }
    if got < n {
        runs.push((*hw, n - got));
        *hw += n - got;
    }
}
