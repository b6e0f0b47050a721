//! Write transactions: one at a time, editing copies of pages, committed by writing the new
//! pages and then a meta page (docs/format.md, "Commit protocol").
//!
//! Commit, top to bottom: store each changed tree's root in the catalog; bring the persisted
//! free map up to date; encode and write every dirty page; then, by durability, fdatasync /
//! write the meta / fdatasync; finally publish the new snapshot to readers.

use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use larch_pager::UnfairRawMutex;
use parking_lot::lock_api::ArcMutexGuard;

use larch_pager::{ManifestRun, Map, Meta, PageRole, TreeRoot};

use crate::alloc::Undo;
use crate::error::{Error, Result};
use crate::file::{OpenFile, Shared, Snapshot, WriterState};
use crate::node::{Child, Node, WrittenNodes};
use crate::node_page::Limits;
use crate::options::Durability;
use crate::view::View;
use crate::write_tree::WriteTree;
use crate::{PageId, TxId};

/// One tree as a write transaction sees it.
#[derive(Debug, Clone)]
pub(crate) struct TreeState {
    pub name: Option<String>,
    pub role: PageRole,
    pub root: Option<Child>,
    pub entries: u64,
    pub depth: u32,
    pub dirty: bool,
    pub deleted: bool,
    /// The tree's dirty nodes (`Child::Node(i)` is `nodes[i]`), while another tree's are in
    /// `Txn::nodes` (`Txn::activate`).
    pub nodes: Vec<Node>,
    /// Lent to an open [`WriteTree`]: this entry is a placeholder until the tree is dropped.
    pub lent: bool,
    /// Leaves left full behind keys arriving in order (a sorted append's, the left half of a
    /// split of the tree's last leaf at its end), each with the branch that took it then, not
    /// written yet:
    /// `Txn::spill` writes them before the commit, 64 at a time (append.rs).
    pub full_leaves: Vec<(crate::node::NodeIdx, crate::node::NodeIdx)>,
}

impl TreeState {
    fn from_root(name: Option<String>, role: PageRole, r: TreeRoot) -> TreeState {
        TreeState {
            name,
            role,
            root: (r.root != 0).then_some(Child::Page(r.root)),
            entries: r.entries,
            depth: r.depth,
            dirty: false,
            deleted: false,
            nodes: Vec::new(),
            full_leaves: Vec::new(),
            lent: false,
        }
    }
}

/// Index of a tree in `Txn::trees`: [`CATALOG`], [`FREEMAP`], then the named trees this
/// transaction opened, in the order it opened them (`Txn::names` maps a name to its index).
pub(crate) type TreeIdx = usize;

/// Index of the catalog in `Txn::trees`.
pub(crate) const CATALOG: TreeIdx = 0;
/// Index of the free map in `Txn::trees`.
pub(crate) const FREEMAP: TreeIdx = 1;
/// `Txn::active` when no tree's nodes are in `Txn::nodes`.
const NO_TREE: TreeIdx = usize::MAX;

/// The most bytes of encoded pages a commit holds before it writes them: a commit's own memory
/// is its dirty nodes plus this, however many pages it touched.
const WRITE_CHUNK_BYTES: usize = 1 << 20;

/// Source of `Txn::serial`: tells savepoints of different transactions apart (txids repeat
/// after an abort).
static TX_SERIAL: AtomicU64 = AtomicU64::new(1);

/// The state and algorithms of a write transaction (this file, alloc.rs, mutate.rs,
/// freemap.rs, relocate.rs). [`WriteTx`] is its public face: it lends trees out to
/// [`WriteTree`] handles so several can be used side by side.
pub(crate) struct Txn {
    pub(crate) db: Arc<OpenFile>,
    /// The writer lock, held for the transaction's life.
    pub(crate) writer: WriterLock,
    pub(crate) shared: Arc<Shared>,
    pub(crate) base: Arc<Snapshot>,
    /// Latest map: covers overflow runs this transaction wrote past the old end of file.
    pub(crate) map: Arc<Map>,
    pub(crate) txid: TxId,
    pub(crate) high_water: PageId,
    pub(crate) limits: Limits,
    /// The dirty nodes of tree `active` (the tree algorithms work on one tree at a time);
    /// every other tree keeps its own in `TreeState::nodes`.
    pub(crate) nodes: Vec<Node>,
    pub(crate) active: TreeIdx,
    pub(crate) trees: Vec<TreeState>,
    pub(crate) names: HashMap<String, TreeIdx>,
    pub(crate) undo: Vec<Undo>,
    /// Free-map bits to persist: page -> unreachable.
    pub(crate) freemap_changes: crate::freemap::Changes,
    pub(crate) durability: Durability,
    /// In-place compaction: allocate the lowest free pages whatever the policy prefers, and
    /// give back any free tail of the file however short.
    pub(crate) compacting: bool,
    /// Provisional page ids handed out so far (`Txn::alloc_node`), and whether the commit
    /// has replaced them (`Txn::gather_hot_pages`).
    pub(crate) provisional: PageId,
    pub(crate) gathered: bool,
    pub(crate) done: bool,
    /// The newest meta open could pick after a crash, as of `begin` (it only grows: a page
    /// classified against an older value is re-checked when released, unpinned.rs).
    pub(crate) on_disk: TxId,
    /// The newest meta open could pick when the transaction began (`on_disk` is that or the
    /// commit a durable point in the background makes durable, if newer).
    pub(crate) meta_on_disk: TxId,
    /// Unique per transaction, for savepoints.
    serial: u64,
    /// A tree edit began and did not return (a panic unwound through it): commit refuses.
    pub(crate) interrupted: bool,
    /// Savepoints that can still be rolled back to, oldest first.
    pub(crate) savepoints: Vec<u64>,
    /// Pages this transaction allocated and freed while a savepoint existed: reusable only
    /// after the commit (`Txn::free_fresh`).
    pub(crate) held_fresh: Vec<(PageId, u64)>,
    /// Leaves written before the commit (`Txn::spill`, append.rs) that a tree still holds:
    /// the commit lists them in its manifest with the pages it writes.
    pub(crate) spilled: std::collections::BTreeMap<PageId, ManifestRun>,
    next_savepoint: u64,
    /// The pages after the commit's hot run kept for the free map's first new pages, in
    /// order (`Txn::gather_hot_pages`, `Txn::alloc`).
    pub(crate) freemap_slots: std::collections::VecDeque<PageId>,
    /// Free-map chunks whose pages the free map saves first, so that its nodes that hold
    /// them take the slots: the chunks of this commit's hot run and of the one before it.
    pub(crate) hot_chunks: Vec<u64>,
    /// The commit saves the free map (`Txn::commit_inner`); otherwise it leaves its changes
    /// to a later commit and keeps no slots for it (`Txn::gather_hot_pages`).
    pub(crate) saves_free_map: bool,
    /// The writer's `hot_run_grown` and `last_hot_run` before this commit placed its hot
    /// run, restored if the commit fails (`Txn::rollback`).
    pub(crate) hot_run_before: Option<(bool, Option<PageId>)>,
    /// This Async commit starts a durable point in the background (`unsynced_over_limit`).
    starts_point: bool,
    /// Heap bytes of the dirty nodes a rollback dropped (`Txn::rollback`): counted with
    /// those still held when the transaction ends (`scratch::HeapRelease`).
    pub(crate) dropped_heap: usize,
}

/// What `Options::max_unsynced_bytes` asks of a commit (`Txn::unsynced_over_limit`).
enum DurablePoint {
    None,
    /// Start making this Async commit durable in the background (durability.rs, `Point`).
    Background,
    /// Make this commit durable before it returns.
    Now,
    /// At the bound with a durable point's sync running: wait for that sync, so that this
    /// commit writes the point's meta and the pages it pinned are free again, rather than
    /// sync everything written since as well.
    Wait,
}

impl std::fmt::Debug for Txn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteTx")
            .field("txid", &self.txid)
            .field("dirty_nodes", &self.nodes.len())
            .finish()
    }
}

impl Txn {
    /// Begin the write transaction. `wait == false`: fail with `WriterBusy` instead of
    /// waiting for another transaction (of this process or another).
    pub(crate) fn begin(shared: &Arc<Shared>, wait: bool) -> Result<Txn> {
        // Wait for the writer lock of the current file; if background compaction replaced the
        // file meanwhile, start over on the new one.
        if wait {
            shared
                .compaction
                .throttle(|| shared.current_file().pager.file_len());
        }
        let busy = || Error::WriterBusy {
            path: shared.path.clone(),
        };
        let (db, mut writer) = loop {
            let db = shared.current_file();
            db.pager.check_writable()?;
            let writer = if wait {
                db.waiting_writers.fetch_add(1, Ordering::AcqRel);
                let writer = db.writer.lock_arc();
                db.waiting_writers.fetch_sub(1, Ordering::AcqRel);
                writer
            } else {
                db.writer.try_lock_arc().ok_or_else(busy)?
            };
            if !db.retired.load(Ordering::Acquire) {
                break (db, writer);
            }
        };
        db.pager.check_writable()?;
        if let Some(lock) = db.lock() {
            // One writer across processes; then catch up with what other processes wrote.
            if !lock.acquire(wait)? {
                return Err(busy());
            }
            if let Err(e) = db.reload_if_changed(&mut writer) {
                db.release_writer_if_on_disk();
                return Err(e);
            }
        }
        let (base, oldest) = db.snapshot_and_oldest_reader();
        if base.meta.txid >= larch_pager::MAX_TXID {
            // Open takes no meta past it, so a commit past it would leave a file that no
            // longer opens. No file reaches it by committing (a million commits a second for
            // 146,000 years): a crafted or damaged meta.
            db.release_writer_if_on_disk();
            return Err(Error::corrupt(
                0,
                format!(
                    "txid {} is the largest a meta may carry, so no commit can follow it; \
                     the file opens read-only, and `larch compact` writes a copy that takes commits",
                    base.meta.txid
                ),
            ));
        }
        // Pages freed by T may be overwritten once no reader is older than T and T is durable
        // (docs/format.md, invariant 1).
        let readers_safe = oldest.unwrap_or(base.meta.txid);
        let (on_disk, unwritable_below, durable, meta_on_disk) = {
            let st = db.durability.lock();
            // Pages freed by the newest commit C are in the tree of the commit before it,
            // whose meta a later `Db::sync`, close or group commit still writes when C's slot
            // parity equals the durable one's (durability.rs, `write_meta_keeping_fallback`):
            // they wait until C is durable or no longer the newest (docs/format.md, "What a
            // transaction that does not commit may write").
            let below = if st.committed.txid > st.durable {
                st.committed.txid - 1
            } else {
                st.committed.txid
            };
            (st.pinned_through(), below, st.durable, st.on_disk())
        };
        // A page written after every meta that open could pick is in none of their trees.
        let writer_ref = &mut *writer;
        writer_ref.reader_pinned.release(
            readers_safe.min(unwritable_below),
            on_disk,
            meta_on_disk,
            durable,
            &mut writer_ref.free,
        );
        writer.free.release(readers_safe.min(durable));
        let free_now = writer.free.free_pages();
        writer.trigger.began(free_now);
        let meta = base.meta;
        let limits = Limits::new(meta.page_size as usize);
        let map = db.pager.map();
        // The transaction's lists, emptied by the last one (scratch.rs). Room for the trees a
        // transaction usually opens, so the first does not move the two it always has.
        let scratch = &mut writer.scratch;
        let mut trees = std::mem::take(&mut scratch.trees);
        trees.reserve(4);
        trees.push(TreeState::from_root(None, PageRole::Catalog, meta.catalog));
        trees.push(TreeState::from_root(None, PageRole::FreeMap, meta.freemap));
        let names = std::mem::take(&mut scratch.names);
        let undo = std::mem::take(&mut scratch.undo);
        let freemap_changes = std::mem::take(&mut scratch.changes);
        Ok(Txn {
            shared: shared.clone(),
            db,
            base,
            map,
            txid: meta.txid + 1,
            high_water: meta.high_water,
            limits,
            nodes: Vec::new(),
            active: NO_TREE,
            trees,
            names,
            undo,
            freemap_changes,
            durability: shared.opts.durability,
            compacting: false,
            provisional: 0,
            gathered: false,
            done: false,
            on_disk,
            meta_on_disk,
            writer: WriterLock(writer),
            serial: TX_SERIAL.fetch_add(1, Ordering::Relaxed),
            interrupted: false,
            savepoints: Vec::new(),
            held_fresh: Vec::new(),
            spilled: Default::default(),
            next_savepoint: 0,
            freemap_slots: Default::default(),
            hot_chunks: Vec::new(),
            hot_run_before: None,
            saves_free_map: true,
            starts_point: false,
            dropped_heap: 0,
        })
    }

    /// Put the dirty nodes in `nodes` back with their tree.
    pub(crate) fn park(&mut self) {
        if self.active != NO_TREE {
            self.trees[self.active].nodes = std::mem::take(&mut self.nodes);
            self.active = NO_TREE;
        }
    }

    /// Make tree `t`'s dirty nodes the ones in `nodes`, where the tree algorithms
    /// (mutate.rs, relocate.rs) work on them.
    pub(crate) fn activate(&mut self, t: TreeIdx) {
        if self.active != t {
            self.park();
            self.nodes = std::mem::take(&mut self.trees[t].nodes);
            if self.nodes.capacity() == 0 {
                self.nodes = self.writer.scratch.arena();
            }
            self.active = t;
        }
    }

    /// Tree `t`'s dirty nodes, wherever they are.
    pub(crate) fn arena(&self, t: TreeIdx) -> &[Node] {
        if self.active == t {
            &self.nodes
        } else {
            &self.trees[t].nodes
        }
    }

    /// A view of committed pages (as of this transaction's start).
    pub(crate) fn base_view(&self) -> View<'_> {
        View::new(
            &self.base.map,
            &self.base.meta,
            self.db.opts.verify_checksums,
        )
    }

    /// The view committed pages are read through: the base snapshot's, or once this
    /// transaction has written leaves before its commit (`Txn::spill`), the latest map up to
    /// the pages this transaction wrote, which holds those leaves too (a tree's `Child::Page`
    /// may be one). [`Txn::committed_pages`] holds the same apart from the transaction.
    pub(crate) fn committed_view(&self) -> View<'_> {
        if self.spilled.is_empty() {
            self.base_view()
        } else {
            View {
                map: &self.map,
                page_size: self.limits.page_size,
                high_water: self.fresh_pages(),
                verify: self.db.opts.verify_checksums,
            }
        }
    }

    /// What [`Txn::committed_view`] reads, held apart from the transaction (for code that
    /// reads a page and then changes the transaction).
    pub(crate) fn committed_pages(&self) -> CommittedPages {
        let (map, high_water) = if self.spilled.is_empty() {
            (Arc::clone(&self.base.map), self.base.meta.high_water)
        } else {
            (Arc::clone(&self.map), self.fresh_pages())
        };
        CommittedPages {
            map,
            high_water,
            page_size: self.limits.page_size,
            verify: self.db.opts.verify_checksums,
        }
    }

    /// A view that also covers overflow runs written by this transaction.
    pub(crate) fn fresh_view(&self) -> View<'_> {
        fresh_view(&self.map, &self.db, &self.limits, self.high_water)
    }

    // ---- trees ---------------------------------------------------------------------

    pub(crate) fn tree_index(&mut self, name: &str, create: bool) -> Result<Option<TreeIdx>> {
        if let Some(&i) = self.names.get(name) {
            if self.trees[i].lent {
                return Err(Error::TreeAlreadyOpen(name.to_string()));
            }
            if self.trees[i].deleted && !create {
                return Ok(None);
            }
            if self.trees[i].deleted {
                let t = &mut self.trees[i];
                t.deleted = false;
                t.dirty = true;
            }
            return Ok(Some(i));
        }
        check_tree_name(name, &self.limits)?;
        // Decoded where it lies: a tree root is a few words, not worth a copy of the entry.
        let found = self
            .get_in(CATALOG, name.as_bytes())?
            .map(|v| TreeRoot::decode(v).ok_or(()));
        let state = match found {
            Some(r) => {
                let r = r.map_err(|()| {
                    Error::corrupt(
                        self.base.meta.catalog.root,
                        format!("catalog entry {name:?} is short"),
                    )
                })?;
                TreeState::from_root(Some(self.writer.scratch.string(name)), PageRole::Data, r)
            }
            None if create => {
                let mut t = TreeState::from_root(
                    Some(self.writer.scratch.string(name)),
                    PageRole::Data,
                    TreeRoot::default(),
                );
                t.dirty = true;
                t
            }
            None => return Ok(None),
        };
        self.trees.push(state);
        let i = self.trees.len() - 1;
        let key = self.writer.scratch.string(name);
        self.names.insert(key, i);
        Ok(Some(i))
    }

    /// Lend tree `t` (with its dirty nodes) to a [`WriteTree`].
    pub(crate) fn lend(&mut self, t: TreeIdx) -> TreeState {
        self.park();
        let placeholder = TreeState {
            lent: true,
            ..TreeState::from_root(None, PageRole::Data, TreeRoot::default())
        };
        std::mem::replace(&mut self.trees[t], placeholder)
    }

    pub(crate) fn delete_tree(&mut self, name: &str) -> Result<bool> {
        let Some(idx) = self.tree_index(name, false)? else {
            return Ok(false);
        };
        self.activate(idx);
        if let Some(root) = self.trees[idx].root {
            let depth = self.trees[idx].depth;
            self.free_subtree(root, depth, PageRole::Data)?;
        }
        self.nodes.clear();
        let t = &mut self.trees[idx];
        t.full_leaves.clear();
        t.root = None;
        t.entries = 0;
        t.depth = 0;
        t.deleted = true;
        t.dirty = true;
        Ok(true)
    }

    /// Names of all trees, as this transaction sees them.
    pub(crate) fn tree_names(&self) -> Result<Vec<String>> {
        let mut names = std::collections::BTreeSet::new();
        let view = self.base_view();
        let cat = self.base.meta.catalog;
        for e in crate::cursor::Range::new(
            view,
            cat,
            PageRole::Catalog,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
        ) {
            let (k, _) = e?;
            names.insert(String::from_utf8_lossy(k).into_owned());
        }
        for (name, &i) in &self.names {
            if self.trees[i].deleted {
                names.remove(name);
            } else {
                names.insert(name.clone());
            }
        }
        Ok(names.into_iter().collect())
    }

    // ---- commit ----------------------------------------------------------------------

    /// Make the transaction's changes visible and, per its durability, durable.
    pub(crate) fn commit(mut self) -> Result<()> {
        // Group commit: with other writers waiting, a Sync commit is written like an Async
        // one and made durable by the group's sync, after the writer lock is released.
        let follow = self.durability == Durability::Sync
            && self.db.opts.group_commit
            && self.db.waiting_writers.load(Ordering::Acquire) > 0;
        if follow {
            self.durability = Durability::Async;
        }
        if !follow && self.durability != Durability::Sync {
            match self.unsynced_over_limit() {
                DurablePoint::None => {}
                DurablePoint::Background => self.starts_point = true,
                DurablePoint::Now => self.durability = Durability::Sync,
                DurablePoint::Wait => {
                    self.db.pager.wait_background_flush();
                    // A sync that failed poisoned the handle (the commit fails); one that
                    // never ran leaves the point in flight: make this commit durable.
                    if self.db.durability.lock().point_stuck(&self.db) {
                        self.durability = Durability::Sync;
                    }
                }
            }
        }
        let r = self.commit_inner();
        if r.is_err() {
            self.rollback();
        } else {
            self.keep_written();
        }
        self.done = true;
        if r.is_ok() {
            crate::autocompact::maybe_start(&self.shared, &self.db, &mut self.writer);
        }
        match r {
            Ok(deferred) if follow || deferred => {
                let (db, txid) = (self.db.clone(), self.txid);
                drop(self);
                db.wait_durable(txid)
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// After a commit that succeeded: keep the nodes it wrote for the next transactions'
    /// copies of their pages (`WrittenNodes`): its branches, and its leaves when it wrote
    /// few pages (a commit of many leaves writes leaves the next commits rarely copy again).
    /// Every page it wrote and did not keep a node of loses what was kept for it.
    fn keep_written(&mut self) {
        self.park();
        let ps = self.limits.page_size;
        let written: usize = self
            .trees
            .iter()
            .map(|t| t.nodes.iter().filter(|n| n.live).count())
            .sum();
        let leaves_too = written <= WrittenNodes::SMALL_COMMIT;
        let writer = &mut *self.writer;
        let mut pages = std::mem::take(&mut writer.scratch.pages);
        for tree in &mut self.trees {
            pages.clear();
            pages.extend(tree.nodes.iter().map(|n| n.page));
            let mut i = 0;
            while i < tree.nodes.len() {
                let n = &mut tree.nodes[i];
                if n.live && (leaves_too || !n.leaf) && n.settle_written(ps, |c| pages[c]) {
                    let n = tree.nodes.swap_remove(i);
                    writer
                        .written
                        .keep(self.txid, n, &mut writer.spare_nodes, ps);
                } else {
                    // Not kept (a leaf of a large commit, merged away, rebuilt, or holding a
                    // fresh overflow run): what was kept for its page is stale if it was
                    // written.
                    if n.live {
                        writer.written.forget(n.page);
                    }
                    i += 1;
                }
            }
        }
        writer.scratch.pages = crate::scratch::emptied(pages);
    }

    /// What `Options::max_unsynced_bytes` asks of this commit, from the pages that wait for a
    /// durable commit (freed by commits after the durable one, this one included), and
    /// `Options::max_unsynced_age`, from how long the oldest commit not durable has been
    /// (past it, the same as past the bound on bytes). At each
    /// half of the limit, an Async commit starts a durable point in the background
    /// (durability.rs, `Point`): the writer goes on while another thread syncs, and a later
    /// commit writes its meta durably by itself. Where no point can start (one is in flight,
    /// or a meta was written since the durable one), the half starts a plain fdatasync on
    /// another thread (`Pager::start_background_flush`) instead, so that the next sync finds
    /// most pages written back. At the limit, an Async commit waits for the sync of a point
    /// in flight and writes the point's meta; otherwise the commit is made durable before it
    /// returns. Either way the next transactions can reuse what was waiting before the
    /// point. (Points at each quarter made twice the flushes, each a burst of writeback that
    /// the writer threads feel: docs/performance.md, "What durable points cost the writer".)
    /// A commit whose meta would take the durable meta's slot leaves either to the next one:
    /// made durable, it would first have to make the commit before it durable in the other
    /// slot, a third fdatasync (durability.rs, `write_meta_keeping_fallback`).
    fn unsynced_over_limit(&mut self) -> DurablePoint {
        let ps = self.limits.page_size as u64;
        let live = self
            .high_water
            .saturating_sub(self.writer.unreachable_pages())
            * ps;
        let limit = self.db.opts.max_unsynced.limit(live);
        let max_age = self.db.opts.max_unsynced_age;
        if limit.is_none() && max_age.is_none() {
            return DurablePoint::None;
        }
        let limit = limit.unwrap_or(u64::MAX);
        let (durable, synced_first, in_flight, syncing, possible, next_possible, stale) = {
            let mut st = self.db.durability.lock();
            // `Options::max_unsynced_age`: a commit not durable for that long. Not when this
            // is a NoMetaSync commit right after one: its data sync makes that one's meta,
            // and so every commit before this one, durable anyway.
            let covered = self.durability == Durability::NoMetaSync
                && st.meta_unsynced == Some(st.committed.txid);
            let stale = !covered
                && max_age.is_some_and(|max| {
                    st.unsynced_age(std::time::Instant::now())
                        .is_some_and(|age| age >= max)
                });
            // A NoMetaSync meta not yet synced is durable after the data sync that starts
            // this commit's durable point: that is the slot to keep.
            // Points in the background need a sync on another thread.
            let asynchronous =
                self.durability == Durability::Async && self.db.pager.syncs_in_background();
            (
                st.durable,
                st.meta_unsynced.unwrap_or(0).max(st.durable),
                st.point_in_flight(),
                st.point_syncing(),
                asynchronous && st.point_possible(self.txid),
                asynchronous && st.point_possible(self.txid + 1),
                stale,
            )
        };
        let pending = &mut self.writer.free.pending;
        let waiting = (pending.len() - pending.freed_up_to(durable)).saturating_mul(ps);
        if waiting < self.writer.flush_started_at {
            // A durable point since released what was waiting then.
            self.writer.flush_started_at = 0;
        }
        let half = waiting >= self.writer.flush_started_at + limit / 2 && waiting < limit;
        // The bound on bytes, or on age.
        let over = waiting >= limit || stale;
        let point = if over && syncing && self.durability == Durability::Async {
            // The bound, with a point's sync running: that sync has written back most of
            // what waits, and a new one would write back everything since as well.
            DurablePoint::Wait
        } else if self.txid % 2 == synced_first % 2 {
            DurablePoint::None
        } else if over {
            // The bound: durable here and now (overtaking a point in flight).
            DurablePoint::Now
        } else if half && !in_flight && possible {
            // Made durable in the background, so the bound is rarely reached.
            DurablePoint::Background
        } else {
            DurablePoint::None
        };
        match point {
            // Its own sync, started once its pages are written, does this half's work: one
            // started here would cover none of them and keep that one from starting.
            DurablePoint::Background => self.writer.flush_started_at = waiting,
            // The next commit can start a point (this one's meta would take the durable
            // meta's slot): its sync does this half's work.
            DurablePoint::None if half && next_possible => {}
            DurablePoint::None if half && self.db.pager.start_background_flush() => {
                self.writer.flush_started_at = waiting;
            }
            _ => {}
        }
        point
    }

    /// Ok(true): a Sync commit left to a later sync (the caller waits for it).
    fn commit_inner(&mut self) -> Result<bool> {
        if self.interrupted {
            return Err(Error::Interrupted);
        }
        // Every `WriteTree` is gone by now (it borrows the `WriteTx`), so a tree still lent
        // is one whose handle was leaked (`mem::forget`): its edits, and the pages they
        // copied and freed, went with it, and committing would free pages the catalog keeps.
        if let Some(i) = self.trees.iter().position(|t| t.lent) {
            let name = self.names.iter().find(|&(_, &j)| j == i);
            return Err(Error::TreeAlreadyOpen(
                name.map(|(n, _)| n.clone()).unwrap_or_default(),
            ));
        }
        self.db.pager.check_writable()?;
        // 1. Store changed tree roots in the catalog. The first pass copies the catalog's
        //    path; then the hot nodes (the ones the next commit copies again) move to one
        //    run (a root's page may change), and the second pass records the final roots in
        //    the catalog nodes the first one copied (same-size values: no new pages).
        self.store_tree_roots(true)?;
        // 2. Pages held for savepoints are free now.
        for (p, n) in std::mem::take(&mut self.held_fresh) {
            self.writer.free.policy.insert(p, n);
        }
        // A commit's free-map changes can wait for a later commit: the writer carries them,
        // and this commit's meta says its free map is behind (docs/format.md, "A free map
        // behind its meta"); a read-write open takes the free pages from the walk it makes
        // anyway. A commit saves them all when it moves pages about in place (compaction) or
        // would leave the writer carrying more than `CARRIED_MAX` bits. A one-key commit in a
        // file of several free-map leaves would otherwise rewrite one leaf per chunk its few
        // freed and taken pages fall in: 11.3 pages a Sync commit at 2,000,000 keys where
        // 6.3 at 200,000.
        self.saves_free_map = self.compacting || self.carries_too_much();
        if self.gather_hot_pages() {
            self.store_tree_roots(false)?;
        }
        // The pages the dirty nodes just took change bits too (as many as the pages they
        // freed, each one the saved map may call free): counted only now, they can take the
        // carried bits past the cap, which a read-write open of this meta enforces.
        if self.carries_too_much() {
            self.saves_free_map = true;
        }
        // 3. Give back a free tail of the file (a free map behind its meta must not mark
        //    pages past the high-water mark, so this saves it), then persist the free-space
        //    state (touches only the free map tree; its first new page takes the slot the
        //    hot run kept).
        if self.shrink_free_tail() {
            self.saves_free_map = true;
        }
        if self.saves_free_map {
            // What earlier commits left: this transaction's own changes are newer.
            if !self.writer.freemap_carried.is_empty() {
                let mut all = self.writer.freemap_carried.clone();
                all.apply(&self.freemap_changes);
                self.freemap_changes = all;
            }
            self.save_free_map()?;
        }
        if !self.freemap_slots.is_empty() {
            // Slots the free map did not need are free again.
            for p in std::mem::take(&mut self.freemap_slots) {
                self.writer.free.policy.insert(p, 1);
                self.undo.push(Undo::FreshFreed(p, 1));
                self.freemap_changes.insert(p, true);
            }
            self.save_free_map()?;
        }
        let carries = !(self.freemap_changes.is_empty() && self.writer.freemap_carried.is_empty());
        let freemap_behind = !self.saves_free_map && carries;
        let meta = Meta {
            page_size: self.limits.page_size as u32,
            txid: self.txid,
            catalog: self.tree_root(CATALOG),
            freemap: self.tree_root(FREEMAP),
            freemap_behind,
            high_water: self.high_water,
            live_pages: self.high_water - self.writer.unreachable_pages(),
            unreachable_pages: self.writer.unreachable_pages(),
            manifest_runs: 0,
            manifest_crc: 0,
            manifest_first: 0,
            closed_at: 0,
            closed_at_crc: 0,
        };
        // 4. Write every dirty page.
        let manifest = self.write_dirty_pages()?;
        // 5. Durability.
        let durability = self.durability;
        let mut freed = std::mem::take(&mut self.writer.scratch.runs[0]);
        freed.extend(self.undo.iter().filter_map(|u| match *u {
            Undo::Freed(p, n) | Undo::ReaderFreed(p, n) | Undo::PointFreed(p, n) => Some((p, n)),
            _ => None,
        }));
        let deferred = {
            let mut st = self.db.durability.lock();
            let deferred = st.commit_meta(
                &self.db,
                meta,
                durability,
                &freed,
                &manifest,
                self.starts_point,
            )?;
            // Other processes may read what has its meta on disk now.
            self.db.publish_on_disk(&st);
            // This transaction's writes are done: the file may shrink to a durable mark.
            self.db.trim_to_durable(&st);
            deferred
        };
        let scratch = &mut self.writer.scratch;
        scratch.runs[0] = crate::scratch::emptied(freed);
        scratch.manifest = crate::scratch::emptied(manifest);
        // 6. Publish.
        self.undo.clear();
        // The commit's meta is written: where its hot run went stays, whatever happens next.
        self.hot_run_before = None;
        if self.saves_free_map {
            self.writer.freemap_carried.clear();
        } else {
            self.writer.freemap_carried.apply(&self.freemap_changes);
            // Emptied, its list kept for the next transaction (`Drop`).
            self.freemap_changes.clear();
        }
        self.db.publish(meta);
        Ok(deferred)
    }

    /// Would the writer carry more than `CARRIED_MAX` free-map bits after this commit, if it
    /// did not save the free map? (Both maps' lengths: at least the pages they change.)
    fn carries_too_much(&self) -> bool {
        self.writer.freemap_carried.len() + self.freemap_changes.len() > self.db.opts.carried_max
    }

    /// Record every changed tree's root in the catalog; `removals`: also remove the names of
    /// deleted trees.
    fn store_tree_roots(&mut self, removals: bool) -> Result<()> {
        for i in 2..self.trees.len() {
            // A root that is a dirty node means pages were copied and the old ones freed, so
            // the catalog must take the new root even when the edit that copied them failed
            // before it marked the tree dirty (a disk-full append after `find_tail`).
            let copied = matches!(self.trees[i].root, Some(Child::Node(_)));
            if !self.trees[i].dirty && !copied {
                continue;
            }
            // Lent out of the tree for the catalog edit (no copy) and put back whatever
            // it returns.
            let owned = self.trees[i].name.take();
            let name = owned.as_deref().unwrap_or_default().as_bytes();
            let r = if self.trees[i].deleted {
                if removals {
                    self.remove(CATALOG, name).map(drop)
                } else {
                    Ok(())
                }
            } else {
                let root = self.tree_root(i);
                self.insert(CATALOG, name, &root.encode()).map(drop)
            };
            self.trees[i].name = owned;
            r?;
        }
        Ok(())
    }

    pub(crate) fn tree_root(&self, i: TreeIdx) -> TreeRoot {
        let t = &self.trees[i];
        let root = match t.root {
            None => 0,
            Some(Child::Page(p)) => p,
            Some(Child::Node(n)) => self.arena(i)[n].page,
        };
        TreeRoot {
            root,
            entries: t.entries,
            depth: t.depth,
        }
    }

    /// Write every live dirty node; returns what was written as manifest objects (each node
    /// page on its own, and each overflow run this transaction wrote that its leaves still
    /// hold, with their stored checksums), or an empty list if their runs do not fit a meta
    /// page (the commit then syncs twice).
    fn write_dirty_pages(&mut self) -> Result<Vec<ManifestRun>> {
        let ps = self.limits.page_size;
        if self.spilled.is_empty() {
            self.db.pager.ensure_pages(self.high_water)?;
        } else {
            // The spills grew the file in small steps (append.rs): so does their commit.
            self.db
                .pager
                .ensure_pages_ahead(self.high_water, crate::append::SPILL_GROWTH)?;
        }
        self.park();
        // (page, tree, node) of every live dirty node, in page order.
        let live = self
            .trees
            .iter()
            .map(|t| t.nodes.iter().filter(|n| n.live).count())
            .sum();
        let mut order = std::mem::take(&mut self.writer.scratch.order);
        order.reserve(live);
        for (t, tree) in self.trees.iter().enumerate() {
            order.extend(
                tree.nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| n.live)
                    .map(|(i, n)| (n.page, t, i)),
            );
        }
        order.sort_unstable_by_key(|&(page, _, _)| page);
        if let Some(&(page, _, _)) = order.last().filter(|o| o.0 >= crate::alloc::PROVISIONAL) {
            // A node the commit did not give a page (`Txn::alloc_node`): a bug, and nothing
            // of this commit is written.
            return Err(Error::corrupt(
                page,
                "a dirty node still has a provisional page id at commit",
            ));
        }
        let pages = |at: usize| order[at].0;
        // Encode into a bounded buffer and write each contiguous run of pages as it fills,
        // so a commit's memory does not grow by a second copy of every page it touched.
        let chunk = (WRITE_CHUNK_BYTES / ps).max(1);
        // Pages of a commit that nobody waits to sync go by the storage's deferred path
        // (through the map, in WriteMode::Hybrid).
        let deferred = self.durability == Durability::Async;
        let pager = &self.db.pager;
        let write = |first: PageId, buf: &[u8], in_order: bool| {
            if in_order {
                pager.write_pages_in_order(first, &[buf], deferred)
            } else {
                pager.write_pages_as(first, &[buf], deferred)
            }
        };
        let txid = self.txid;
        // The nodes `keep_written` will keep (its branches; its leaves too in a small commit)
        // become their page image again once encoded, if an edit had ended it.
        let leaves_too = order.len() <= WrittenNodes::SMALL_COMMIT;
        let trees = &mut self.trees;
        let mut buf = std::mem::take(&mut self.writer.scratch.buf);
        buf.reserve(chunk.min(order.len()) * ps);
        let mut manifest = std::mem::take(&mut self.writer.scratch.manifest);
        manifest.reserve(order.len());
        let mut runs = 0;
        // Nodes filled in key order (`Node::sequential`) are written apart from the rest, into
        // large page-cache folios (`Pager::write_pages_in_order`): whether those in `buf` are.
        let mut in_order = false;
        let mut first = 0; // index in `pages` of the first page in `buf`
        for (at, &(page, t, i)) in order.iter().enumerate() {
            let joins = at > first && pages(at - 1) + 1 == page;
            if at > 0 && pages(at - 1) + 1 != page {
                runs += 1;
            }
            let sequential = trees[t].nodes[i].sequential;
            if at > first && (!joins || at - first == chunk || sequential != in_order) {
                write(pages(first), &buf, in_order)?;
                buf.clear();
                first = at;
            }
            in_order = sequential;
            let nodes = &trees[t].nodes;
            nodes[i].encode(&mut buf, ps, txid, |n| nodes[n].page);
            let encoded = &buf[buf.len() - ps..];
            manifest.push(ManifestRun {
                start: page,
                pages: 1,
                overflow: false,
                txid,
                checksum: larch_pager::stored_checksum(encoded),
            });
            let n = &mut trees[t].nodes[i];
            if leaves_too || !n.leaf {
                n.reimage(encoded);
            }
        }
        if !buf.is_empty() {
            write(pages(first), &buf, in_order)?;
            runs += 1;
        }
        // Leaves written before the commit (`Txn::spill`), each its own object as the pages
        // above are.
        let mut last: Option<PageId> = None;
        for (&page, run) in &self.spilled {
            if last.is_none_or(|l| l + 1 != page) {
                runs += 1;
            }
            last = Some(page);
            manifest.push(*run);
        }
        let mut overflow_runs = 0;
        for &(_, t, i) in &order {
            for r in self.trees[t].nodes[i].fresh_runs() {
                // Written when it was inserted: its checksum is in its first page's header.
                let checksum = self
                    .fresh_view()
                    .pages(r.page, 1)
                    .map(larch_pager::stored_checksum)?;
                manifest.push(ManifestRun {
                    start: r.page,
                    pages: self.limits.overflow_pages(r.len) as u32,
                    overflow: true,
                    txid: self.txid,
                    checksum,
                });
                overflow_runs += 1;
            }
        }
        if runs + overflow_runs > larch_pager::manifest_capacity(ps) {
            manifest.clear();
        }
        let scratch = &mut self.writer.scratch;
        scratch.order = crate::scratch::emptied(order);
        scratch.buf = crate::scratch::emptied(buf);
        Ok(manifest)
    }
}

/// The in-process writer lock a transaction holds (`OpenFile::writer`). The thread that
/// releases it may take it again before a woken waiter runs, as LMDB's and redb's writer
/// locks allow, so a thread committing in a loop keeps going without a context switch per
/// commit; a waiter that has waited `larch_pager::STARVED_AFTER` (20 ms) gets it at the next
/// release (crates/pager/src/unfair.rs; docs/performance.md, "owa.n's p99: the writer lock's
/// fairness").
pub(crate) struct WriterLock(ArcMutexGuard<UnfairRawMutex, WriterState>);

impl std::ops::Deref for WriterLock {
    type Target = WriterState;
    fn deref(&self) -> &WriterState {
        &self.0
    }
}

impl std::ops::DerefMut for WriterLock {
    fn deref_mut(&mut self) -> &mut WriterState {
        &mut self.0
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        if !self.done {
            self.rollback();
        }
        // The dirty nodes' buffers serve the next transaction's copies.
        let ps = self.limits.page_size;
        let held: usize = self.dropped_heap
            + self
                .trees
                .iter()
                .flat_map(|t| t.nodes.iter())
                .chain(self.nodes.iter())
                .map(Node::heap_bytes)
                .sum::<usize>();
        let most = self
            .trees
            .iter()
            .map(|t| t.nodes.len())
            .fold(self.nodes.len(), usize::max);
        let spare = &mut self.writer.spare_nodes;
        spare.note_arena_len(most);
        for n in self.trees.iter_mut().flat_map(|t| t.nodes.drain(..)) {
            spare.put(n, ps);
        }
        for n in self.nodes.drain(..) {
            spare.put(n, ps);
        }
        let scratch = &mut self.writer.scratch;
        scratch.put_arena(std::mem::take(&mut self.nodes));
        for t in self.trees.iter_mut() {
            scratch.put_arena(std::mem::take(&mut t.nodes));
        }
        for name in self.trees.iter_mut().filter_map(|t| t.name.take()) {
            scratch.put_string(name);
        }
        scratch.trees = crate::scratch::emptied(std::mem::take(&mut self.trees));
        let mut names = std::mem::take(&mut self.names);
        for (name, _) in names.drain() {
            scratch.put_string(name);
        }
        if names.capacity() <= 64 {
            scratch.names = names;
        }
        scratch.undo = crate::scratch::emptied(std::mem::take(&mut self.undo));
        let mut changes = std::mem::take(&mut self.freemap_changes);
        changes.clear();
        scratch.changes = changes;
        // Still holding the in-process writer lock (a field, dropped after this).
        self.db.release_writer_if_on_disk();
        if self.writer.scratch.heap.ended(held) {
            larch_pager::release_free_heap();
        }
    }
}

fn check_tree_name(name: &str, limits: &Limits) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidTreeName(
            "tree names must not be empty".into(),
        ));
    }
    if name.len() > limits.max_key {
        return Err(Error::InvalidTreeName(format!(
            "tree name of {} bytes is longer than {}",
            name.len(),
            limits.max_key
        )));
    }
    Ok(())
}

/// A write transaction. Only one exists at a time; [`crate::Db::begin_write`] waits for the
/// previous one to end. Dropping it without [`WriteTx::commit`] aborts it.
///
/// Trees are opened with `&self`, so several can be used side by side; each tree can be open
/// once at a time. `WriteTx` is `Send`: it may be moved to another thread (or held across an
/// `.await`) and committed there.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
/// let tx = db.begin_write()?;
/// std::thread::scope(|s| {
///     s.spawn(move || -> larch_engine::Result<()> {
///         tx.open_tree("t")?.insert(b"k", b"v")?;
///         tx.commit() // on another thread than the one that began it
///     })
///     .join()
///     .unwrap()
/// })?;
/// assert_eq!(db.begin_read()?.open_tree("t")?.get(b"k")?, Some(&b"v"[..]));
/// # Ok::<(), larch_engine::Error>(())
/// ```
pub struct WriteTx<'db> {
    pub(crate) txn: RefCell<Txn>,
    /// The commit this transaction started from: committed pages are read in place.
    base: Arc<Snapshot>,
    verify: bool,
    limits: Limits,
    _db: PhantomData<&'db Shared>,
}

impl std::fmt::Debug for WriteTx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteTx")
            .field("txid", &(self.base.meta.txid + 1))
            .finish()
    }
}

/// A point inside a write transaction to roll back to ([`WriteTx::savepoint`]). Costs a copy
/// of the pages the transaction has changed so far, in memory; nothing is written. See
/// [`WriteTx::savepoint`] for an example.
#[derive(Debug)]
pub struct Savepoint {
    serial: u64,
    id: u64,
    saved: Saved,
}

/// What a savepoint restores.
#[derive(Debug, Clone)]
struct Saved {
    trees: Vec<TreeState>,
    names: HashMap<String, TreeIdx>,
    undo_len: usize,
    held_len: usize,
    spilled: std::collections::BTreeMap<PageId, ManifestRun>,
    high_water: PageId,
    freemap_changes: crate::freemap::Changes,
}

impl<'db> WriteTx<'db> {
    pub(crate) fn begin(shared: &'db Arc<Shared>, wait: bool) -> Result<WriteTx<'db>> {
        let txn = Txn::begin(shared, wait)?;
        Ok(WriteTx {
            base: txn.base.clone(),
            verify: txn.db.opts.verify_checksums,
            limits: txn.limits,
            txn: RefCell::new(txn),
            _db: PhantomData,
        })
    }

    /// The transaction's state, for the crate's own maintenance (in-place compaction).
    pub(crate) fn into_txn(self) -> Txn {
        self.txn.into_inner()
    }

    /// The id this transaction will commit as (the newest commit's, plus one).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// assert_eq!(tx.txid(), 1);
    /// tx.commit()?;
    /// assert_eq!(db.begin_write()?.txid(), 2);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn txid(&self) -> TxId {
        self.base.meta.txid + 1
    }

    /// Override the database's durability for this commit. See [`crate::Durability`] for an
    /// example.
    pub fn set_durability(&mut self, d: Durability) {
        self.txn.get_mut().durability = d;
    }

    /// Open (creating it if missing) the named tree for reading and writing. Several trees
    /// can be open at once; opening a tree that is already open is
    /// [`Error::TreeAlreadyOpen`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = larch_engine::Db::open(dir.path().join("t.larch"), larch_engine::Options::default())?;
    /// let tx = db.begin_write()?;
    /// {
    ///     let mut users = tx.open_tree("users")?;
    ///     let mut by_age = tx.open_tree("by_age")?;
    ///     users.insert(b"alice", b"42")?;
    ///     by_age.insert(b"42/alice", b"")?;
    ///     assert_eq!(users.get(b"alice")?, Some(&b"42"[..]));
    /// }
    /// tx.commit()?;
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn open_tree(&self, name: &str) -> Result<WriteTree<'_>> {
        let mut txn = self.txn.borrow_mut();
        let idx = txn
            .tree_index(name, true)?
            .ok_or_else(|| Error::TreeNotFound(name.to_string()))?;
        let state = txn.lend(idx);
        let (map, fresh_pages) = txn.fresh_map();
        let spilled = !txn.spilled.is_empty();
        Ok(WriteTree {
            txn: &self.txn,
            base: &self.base,
            verify: self.verify,
            limits: self.limits,
            idx,
            state,
            map,
            fresh_pages,
            spilled,
            tail: Default::default(),
        })
    }

    /// Delete a tree and free all its pages. Returns false if it did not exist; an error if
    /// it is open.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// let tx = db.begin_write()?;
    /// assert!(tx.delete_tree("t")?);
    /// assert!(!tx.delete_tree("t")?);
    /// tx.commit()?;
    /// assert!(db.begin_read()?.tree_names()?.is_empty());
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn delete_tree(&self, name: &str) -> Result<bool> {
        self.txn.borrow_mut().delete_tree(name)
    }

    /// Names of all trees, as this transaction sees them (sorted).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("b")?;
    /// tx.open_tree("a")?;
    /// assert_eq!(tx.tree_names()?, ["a", "b"]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn tree_names(&self) -> Result<Vec<String>> {
        self.txn.borrow().tree_names()
    }

    /// Remember this point of the transaction: [`WriteTx::rollback_to`] undoes everything
    /// done after it (inserts, removes, trees created or deleted) and keeps what came before.
    /// Needs no open trees (the borrow checker sees to it).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), larch_engine::Options::default())?;
    /// let mut tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"kept", b"1")?;
    /// let sp = tx.savepoint();
    /// tx.open_tree("t")?.insert(b"undone", b"2")?;
    /// tx.rollback_to(&sp)?;
    /// let t = tx.open_tree("t")?;
    /// assert_eq!(t.get(b"kept")?, Some(&b"1"[..]));
    /// assert_eq!(t.get(b"undone")?, None);
    /// # drop(t);
    /// tx.commit()?;
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn savepoint(&mut self) -> Savepoint {
        let txn = self.txn.get_mut();
        txn.park();
        let id = txn.next_savepoint;
        txn.next_savepoint += 1;
        txn.savepoints.push(id);
        Savepoint {
            serial: txn.serial,
            id,
            saved: Saved {
                trees: txn.trees.clone(),
                names: txn.names.clone(),
                undo_len: txn.undo.len(),
                held_len: txn.held_fresh.len(),
                spilled: txn.spilled.clone(),
                high_water: txn.high_water,
                freemap_changes: txn.freemap_changes.clone(),
            },
        }
    }

    /// Undo everything done after `sp`. `sp` stays valid (roll back to it again as often as
    /// needed); savepoints taken after it are no longer valid. A savepoint of another
    /// transaction, or one a rollback to an earlier savepoint made invalid, is
    /// [`Error::InvalidSavepoint`]. See [`WriteTx::savepoint`] for an example.
    pub fn rollback_to(&mut self, sp: &Savepoint) -> Result<()> {
        let txn = self.txn.get_mut();
        if sp.serial != txn.serial || !txn.savepoints.contains(&sp.id) {
            return Err(Error::InvalidSavepoint);
        }
        txn.savepoints.retain(|&id| id <= sp.id);
        txn.park();
        let saved = sp.saved.clone();
        txn.undo_to(saved.undo_len, saved.high_water);
        txn.held_fresh.truncate(saved.held_len);
        txn.spilled = saved.spilled;
        txn.trees = saved.trees;
        txn.names = saved.names;
        txn.freemap_changes = saved.freemap_changes;
        Ok(())
    }

    /// Make the transaction's changes visible and, per its durability, durable. On an error
    /// nothing of it is visible and the database stays at the previous commit.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// let before = db.begin_read()?;
    /// tx.commit()?;
    /// assert!(before.open_tree("t").is_err()); // an older snapshot
    /// assert_eq!(db.begin_read()?.open_tree("t")?.len()?, 1);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn commit(self) -> Result<()> {
        self.txn.into_inner().commit()
    }

    /// Abort: nothing this transaction did becomes visible. Same as dropping it.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// tx.abort();
    /// assert!(db.begin_read()?.tree_names()?.is_empty());
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn abort(self) {
        let mut txn = self.txn.into_inner();
        txn.rollback();
        txn.done = true;
    }
}

impl Txn {
    /// The latest map, and how many pages of it hold what this transaction wrote.
    pub(crate) fn fresh_map(&self) -> (Arc<Map>, PageId) {
        (self.map.clone(), self.fresh_pages())
    }

    /// How many pages of the latest map hold what this transaction wrote.
    pub(crate) fn fresh_pages(&self) -> PageId {
        let ps = self.limits.page_size as u64;
        (self.db.pager.file_len() / ps).min(self.high_water)
    }
}

/// The map and page limit committed pages are read through ([`Txn::committed_pages`]).
pub(crate) struct CommittedPages {
    map: Arc<Map>,
    high_water: PageId,
    page_size: usize,
    verify: bool,
}

impl CommittedPages {
    pub(crate) fn view(&self) -> View<'_> {
        View {
            map: &self.map,
            page_size: self.page_size,
            high_water: self.high_water,
            verify: self.verify,
        }
    }
}

/// A view of `map`'s first `pages` pages, unchecked (pages this transaction wrote).
pub(crate) fn fresh_view<'a>(
    map: &'a Map,
    db: &OpenFile,
    limits: &Limits,
    high_water: PageId,
) -> View<'a> {
    let ps = limits.page_size as u64;
    View {
        map,
        page_size: limits.page_size,
        high_water: (db.pager.file_len() / ps).min(high_water),
        verify: false,
    }
}

#[cfg(test)]
mod arena_tests {
    use crate::{Db, Options};

    /// A 40-entry tree "small" committed, then a transaction inserting `keys` keys into
    /// another tree, then a transaction rewriting "small": the other tree's dirty nodes, and
    /// the small tree's dirty nodes and the room its arena has for them.
    fn small_tree_after(keys: u32) -> (usize, usize, usize) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("arena.larch"), Options::default()).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("small").unwrap();
            for i in 0..40u32 {
                t.insert(&i.to_be_bytes(), &[1u8; 900]).unwrap();
            }
        }
        tx.commit().unwrap();
        let tx = db.begin_write().unwrap();
        let other_nodes;
        {
            let mut t = tx.open_tree("other").unwrap();
            for i in 0..keys {
                t.insert(&i.to_be_bytes(), &[2u8; 100]).unwrap();
            }
            other_nodes = t.state.nodes.len();
        }
        tx.commit().unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("small").unwrap();
            for i in 0..40u32 {
                t.insert(&i.to_be_bytes(), &[3u8; 900]).unwrap();
            }
        }
        let txn = tx.txn.borrow();
        let i = txn
            .trees
            .iter()
            .position(|t| t.name.as_deref() == Some("small"))
            .unwrap();
        let arena = if txn.active == i {
            &txn.nodes
        } else {
            &txn.trees[i].nodes
        };
        (other_nodes, arena.len(), arena.capacity())
    }

    /// The arena hint (`SpareNodes::arena_hint`) is the last transaction's largest tree: a
    /// small tree touched after a large load must not reserve room for that many nodes (each
    /// tree of a transaction that touches many would, so the reservations grew with the trees
    /// touched times the largest tree: 256 MB of address space for 300 small trees).
    #[test]
    fn a_small_tree_reserves_no_more_nodes_than_it_has_after_a_large_transaction() {
        let (_, len, room) = small_tree_after(100_000);
        assert!(len >= 9, "the small tree dirtied {len} nodes");
        // 40 entries: at most 40 leaves and 39 branches to dirty.
        assert!(
            room <= 2 * 40 + 8,
            "{len} dirty nodes of a 40-entry tree reserved room for {room}"
        );
    }

    /// The same bound after a transaction whose largest tree dirtied a few hundred nodes:
    /// an arena the writer kept (scratch.rs) must not give the next transaction's first
    /// tree room for more.
    #[test]
    fn a_small_tree_reserves_no_more_nodes_than_it_has_after_a_medium_transaction() {
        let mut over = Vec::new();
        for keys in [3_000u32, 6_000, 9_000, 12_000, 15_000] {
            let (other, len, room) = small_tree_after(keys);
            if room > 2 * 40 + 8 {
                over.push((keys, other, len, room));
            }
        }
        assert!(
            over.is_empty(),
            "(keys, dirty nodes) of the other tree, and (dirty nodes, room) of the 40-entry tree after it: {over:?}"
        );
    }
}
