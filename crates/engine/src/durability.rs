//! When a commit's meta is written and synced, per durability (docs/format.md, "Commit
//! protocol"). The rule that keeps a fallback: the meta slot being written never holds the
//! last durable meta.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use larch_pager::{ManifestRun, Meta};

use crate::error::Result;
use crate::file::OpenFile;
use crate::options::Durability;
use crate::{PageId, TxId};

/// Which commits are written and which are durable. Its own lock (`OpenFile::durability`),
/// taken after the writer lock by a committing writer and alone by `Db::sync`, close and
/// group-commit followers, so making a commit durable never waits for a write transaction
/// to end (docs/format.md, "Group commit").
#[derive(Debug)]
pub(crate) struct DurableState {
    /// Newest committed meta (visible to readers).
    pub committed: Meta,
    /// The committed meta before it.
    pub previous: Meta,
    /// Newest txid that survives power loss.
    pub durable: TxId,
    /// A meta written without sync (NoMetaSync): durable after the next sync.
    pub meta_unsynced: Option<TxId>,
    /// Newest txid whose meta was written to the file, synced or not: open may pick it.
    pub meta_written: TxId,
    /// What the Async commits since the last durable one wrote.
    pub batch: Batch,
    /// An Async commit being made durable while the writer goes on (`start_point`).
    pub point: Option<Point>,
    /// When this handle's commits were published, for `Options::max_unsynced_age`
    /// (`unsynced_age`): samples `(txid, at)`, each saying that every commit from `txid`
    /// up to the next sample's was published at `at` or later. At most one sample per
    /// eighth of the age; kept only with that option.
    published: VecDeque<(TxId, Instant)>,
}

/// A durable point made in the background (docs/format.md, "Durable points in the
/// background"): the Async commit that `Options::max_unsynced_bytes` picks stays Async, an
/// fdatasync of everything written so far runs on another thread, and once it has succeeded
/// a later commit writes the point's meta with a write that is durable by itself
/// (`Pager::write_meta_durable`): the commit is then durable, without the writer having
/// waited for the whole file to be written back. Until then its tree is pinned
/// (`DurableState::pinned_through`): no page it reaches is written over, as for a meta on
/// disk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Point {
    meta: Meta,
    /// The sync that must succeed before the meta is written (`Pager::next_sync` after the
    /// commit's pages were written).
    need: u64,
    /// Whether that sync was started (a flush in flight can keep one from starting: the
    /// next commit tries again).
    started: bool,
}

impl DurableState {
    /// State of a file just opened at `meta` (open synced it: it is durable).
    pub(crate) fn new(meta: Meta) -> DurableState {
        DurableState {
            committed: meta,
            previous: meta,
            durable: meta.txid,
            meta_unsynced: None,
            meta_written: meta.txid,
            batch: Batch::default(),
            point: None,
            published: VecDeque::new(),
        }
    }

    /// Commit `txid` was just published: sample the time if the last sample is `every` old
    /// (a commit published within `every` of the last sample counts as published then, so
    /// its age can read up to `every` too old, never too young).
    fn note_published(&mut self, txid: TxId, every: Duration) {
        self.forget_durable_samples();
        if self.durable >= txid {
            return;
        }
        let now = Instant::now();
        if self
            .published
            .back()
            .is_none_or(|&(_, at)| now.saturating_duration_since(at) >= every)
        {
            self.published.push_back((txid, now));
        }
    }

    /// Drop the samples that cover only durable commits.
    fn forget_durable_samples(&mut self) {
        if self.durable >= self.committed.txid {
            self.published.clear();
            return;
        }
        while self.published.len() >= 2 && self.published[1].0 <= self.durable + 1 {
            self.published.pop_front();
        }
    }

    /// How long the oldest commit of this handle that is not durable has been published,
    /// at most an eighth of `Options::max_unsynced_age` too long (`note_published`); `None`
    /// when every commit is durable, or none was sampled (the option is off).
    pub(crate) fn unsynced_age(&mut self, now: Instant) -> Option<Duration> {
        self.forget_durable_samples();
        self.published
            .front()
            .map(|&(_, at)| now.saturating_duration_since(at))
    }

    /// Pages written by a commit up to this one may be in a tree that open could pick after
    /// a crash, or soon could: [`DurableState::on_disk`], or the commit a durable point in
    /// the background is making durable (unpinned.rs).
    pub(crate) fn pinned_through(&self) -> TxId {
        self.on_disk().max(self.point.map_or(0, |p| p.meta.txid))
    }

    /// A durable point can start in the background at commit `txid`: none is in flight, no
    /// meta was written since the durable one, and `txid`'s meta slot is not the durable
    /// meta's, so its meta can later be written with the durable one as the fallback.
    pub(crate) fn point_possible(&self, txid: TxId) -> bool {
        self.point.is_none()
            && self.meta_unsynced.is_none()
            && self.meta_written == self.durable
            && txid % 2 != self.durable % 2
    }

    /// A durable point is in flight.
    pub(crate) fn point_in_flight(&self) -> bool {
        self.point.is_some()
    }

    /// A durable point is in flight and the sync it waits for has started: once the
    /// background flush ends (`Pager::wait_background_flush`), the next Async commit writes
    /// its meta (`advance_point`).
    pub(crate) fn point_syncing(&self) -> bool {
        self.point.is_some_and(|p| p.started)
    }

    /// A durable point is in flight whose sync has not succeeded (it failed, or never ran):
    /// the next commit cannot finish it.
    pub(crate) fn point_stuck(&self, file: &OpenFile) -> bool {
        self.point
            .is_some_and(|p| !file.pager.synced_data_since(p.need))
    }

    /// The newest meta that open could pick after a crash: pages written after it are in
    /// none of the trees open could find (unpinned.rs).
    pub(crate) fn on_disk(&self) -> TxId {
        self.meta_written.max(self.durable)
    }

    /// The high-water mark of the durable meta, when that is the newest commit (the file
    /// may then be trimmed to it: `OpenFile::trim_to_durable`).
    pub(crate) fn durable_high_water(&self) -> Option<PageId> {
        (self.durable == self.committed.txid).then_some(self.committed.high_water)
    }
}

/// What the commits since the last durable one wrote, when all of them were Async (no meta
/// written since): the objects (node pages, overflow runs) that the newest tree still holds.
/// A one-fsync meta that makes them all durable at once lists these in its manifest, so
/// recovery can check every page written since the fallback meta (docs/format.md, "One-fsync
/// commit"). The list must be exact: an object missing from it could be torn undetected, and
/// one the tree no longer holds may be overwritten by a later commit and fail the check of a
/// meta that was durable. Objects leave it when their commit frees them.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// The list no longer describes the commits since the durable one: a meta was written
    /// without sync, a commit failed after recording, or it outgrew a meta page.
    broken: bool,
    /// First page -> the object written there.
    objects: BTreeMap<PageId, Object>,
    /// How many manifest runs `objects` make (`runs().len()`), kept as objects come and go so
    /// that a commit does not rebuild the manifest to learn whether it still fits.
    run_count: usize,
    /// What the last recorded commit changed, to list the objects as of the commit before
    /// it: entries it removed, and keys it added.
    last_removed: Vec<(PageId, Object)>,
    last_added: Vec<PageId>,
}

/// One object a commit wrote: a node page or an overflow run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Object {
    pages: u32,
    overflow: bool,
    txid: crate::TxId,
    /// The checksum stored in its (first) page header.
    checksum: u32,
}

impl Batch {
    /// Everything up to the newest commit is durable: nothing to list.
    pub(crate) fn reset(&mut self) {
        self.broken = false;
        self.objects.clear();
        self.run_count = 0;
        self.last_removed.clear();
        self.last_added.clear();
    }

    pub(crate) fn break_off(&mut self) {
        self.reset();
        self.broken = true;
    }

    /// A commit freed the objects starting in `freed` and wrote `wrote` (empty: its pages
    /// did not fit a manifest, or it wrote none).
    fn record(&mut self, freed: &[(PageId, u64)], wrote: &[ManifestRun], capacity: usize) {
        if self.broken {
            return;
        }
        self.last_removed.clear();
        self.last_added.clear();
        if wrote.is_empty() {
            self.break_off();
            return;
        }
        for &(p, n) in freed {
            self.remove_overlapping(p, n);
        }
        // Each object still to come can lower the count by at most its pages plus two (it
        // replaces the listed objects it overlaps, at most one per page and one that starts
        // before it, each worth at most one run, and joins at most two runs into one):
        // once the count is past what they could bring back under `capacity`, the manifest
        // will not fit and listing the rest is wasted work.
        let lowers = |r: &ManifestRun| r.pages as usize + 2;
        let mut can_lower: usize = wrote.iter().map(lowers).sum();
        for r in wrote {
            // Node pages arrive one object each (write.rs), each with its own checksum.
            debug_assert!(r.overflow || r.pages == 1);
            self.insert(
                r.start,
                Object {
                    pages: r.pages,
                    overflow: r.overflow,
                    txid: r.txid,
                    checksum: r.checksum,
                },
            );
            can_lower -= lowers(r);
            if self.run_count > capacity.saturating_add(can_lower) {
                self.break_off();
                return;
            }
        }
        debug_assert_eq!(self.run_count, self.runs().len());
    }

    /// Does the object at `a` continue into the one at `b` in one manifest run (`runs_of`)?
    fn joins(a: (PageId, &Object), b: (PageId, &Object)) -> bool {
        !a.1.overflow && !b.1.overflow && a.1.txid == b.1.txid && a.0 + a.1.pages as u64 == b.0
    }

    /// The runs the object at `p` adds to the list by being in it (1, 0 or -1: it starts a
    /// run, extends one, or joins two), given the objects around it. (The objects before and
    /// after it never join each other: it lies between them.)
    fn runs_added_by(&self, p: PageId, o: &Object) -> isize {
        let prev = self.objects.range(..p).next_back().map(|(&q, v)| (q, v));
        let next = self.objects.range(p + 1..).next().map(|(&q, v)| (q, v));
        let linked = |a: Option<(PageId, &Object)>, b: Option<(PageId, &Object)>| {
            matches!((a, b), (Some(a), Some(b)) if Self::joins(a, b)) as isize
        };
        let me = Some((p, o));
        1 - linked(prev, me) - linked(me, next)
    }

    fn insert(&mut self, p: PageId, o: Object) {
        self.remove_overlapping(p, o.pages as u64);
        let added = self.runs_added_by(p, &o);
        self.run_count = self.run_count.saturating_add_signed(added);
        self.objects.insert(p, o);
        self.last_added.push(p);
    }

    fn remove(&mut self, q: PageId) -> Option<Object> {
        let v = self.objects.remove(&q)?;
        let added = self.runs_added_by(q, &v);
        self.run_count = self.run_count.saturating_add_signed(-added);
        Some(v)
    }

    fn remove_overlapping(&mut self, p: PageId, n: u64) {
        let end = p + n;
        // Objects do not overlap one another, so walking back from the last one that starts
        // before `end`, they overlap p..end until one ends at or before `p`.
        while let Some((&q, o)) = self.objects.range(..end).next_back() {
            if q + o.pages as u64 <= p {
                break;
            }
            let Some(v) = self.remove(q) else { break };
            self.last_removed.push((q, v));
        }
    }

    /// Every commit up to `txid` became durable (a durable point in the background): list
    /// only what the commits after it wrote, as if `txid` had been the durable one all along.
    fn durable_through(&mut self, txid: TxId) {
        if self.broken {
            return;
        }
        self.objects.retain(|_, o| o.txid > txid);
        self.last_removed.retain(|(_, o)| o.txid > txid);
        let objects = &self.objects;
        self.last_added.retain(|p| objects.contains_key(p));
        self.run_count = self.runs().len();
    }

    /// Everything but the last recorded commit became durable: list only what it added.
    fn keep_last(&mut self) {
        let last: BTreeMap<_, _> = self
            .last_added
            .iter()
            .filter_map(|p| self.objects.get(p).map(|&v| (*p, v)))
            .collect();
        self.objects = last;
        self.run_count = self.runs().len();
        self.last_added.clear();
        self.last_removed.clear();
    }

    /// The manifest: adjacent node pages as one run, each overflow run on its own.
    fn runs(&self) -> Vec<ManifestRun> {
        Self::runs_of(&self.objects)
    }

    /// The manifest as of the commit before the last one recorded.
    fn runs_before_last(&self) -> Vec<ManifestRun> {
        let mut objects = self.objects.clone();
        for p in &self.last_added {
            objects.remove(p);
        }
        for &(p, v) in &self.last_removed {
            objects.insert(p, v);
        }
        Self::runs_of(&objects)
    }

    /// Adjacent node pages of one commit become one run, whose checksum is
    /// `node_run_checksum` of theirs; each overflow run stands alone with its own.
    fn runs_of(objects: &BTreeMap<PageId, Object>) -> Vec<ManifestRun> {
        let mut out: Vec<ManifestRun> = Vec::new();
        let mut page_checksums: Vec<Vec<u32>> = Vec::new();
        for (&p, o) in objects {
            match out.last_mut() {
                Some(r)
                    if !o.overflow
                        && !r.overflow
                        && r.txid == o.txid
                        && r.start + r.pages as u64 == p =>
                {
                    r.pages += 1;
                    if let Some(c) = page_checksums.last_mut() {
                        c.push(o.checksum);
                    }
                }
                _ => {
                    out.push(ManifestRun {
                        start: p,
                        pages: o.pages,
                        overflow: o.overflow,
                        txid: o.txid,
                        checksum: o.checksum,
                    });
                    page_checksums.push(vec![o.checksum]);
                }
            }
        }
        for (r, c) in out.iter_mut().zip(page_checksums) {
            if !r.overflow {
                r.checksum = larch_pager::node_run_checksum(c);
            }
        }
        out
    }
}

/// Writing metas, syncing and marking commits durable: the one owner of this state, given
/// the file it is for.
impl DurableState {
    /// Sync data, then note that a meta written earlier without sync is now durable too.
    fn sync_data(&mut self, file: &OpenFile) -> Result<()> {
        file.pager.sync()?;
        if let Some(t) = self.meta_unsynced.take() {
            self.durable = self.durable.max(t);
        }
        Ok(())
    }

    /// Write `meta` into slot txid % 2. If that slot holds the last durable meta (async commits
    /// in between left the parity equal), first make `prev` (txid - 1, whose pages are synced by
    /// now) durable in the other slot, so a torn write of `meta` still has a fallback.
    fn write_meta_keeping_fallback(
        &mut self,
        file: &OpenFile,
        prev: Meta,
        meta: Meta,
    ) -> Result<()> {
        if meta.txid % 2 == self.durable % 2 && meta.txid != self.durable {
            debug_assert_eq!(prev.txid + 1, meta.txid);
            file.pager.write_meta(&prev)?;
            self.meta_written = self.meta_written.max(prev.txid);
            file.pager.sync()?;
            self.durable = prev.txid;
        }
        // Before the write: a failed or torn write may still leave this meta on disk.
        self.meta_written = self.meta_written.max(meta.txid);
        Ok(file.pager.write_meta(&meta)?)
    }

    /// Finish a commit whose pages are written: sync and write the meta as `d` asks. `freed`
    /// are the runs it stopped reaching; `manifest` what it wrote (empty if that does not fit a
    /// meta page). The commit before it is `self.committed`.
    ///
    /// `point`: an Async commit that starts a durable point in the background
    /// ([`DurableState::point_possible`] must hold). Before an Async commit is recorded, the
    /// point in flight takes its next step if its sync is done.
    pub(crate) fn commit_meta(
        &mut self,
        file: &OpenFile,
        meta: Meta,
        d: Durability,
        freed: &[(PageId, u64)],
        manifest: &[ManifestRun],
        point: bool,
    ) -> Result<bool> {
        if d == Durability::Async {
            // Before this commit is recorded: a failed step fails it (the handle is poisoned).
            self.advance_point(file)?;
        }
        let prev = self.committed;
        let capacity = larch_pager::manifest_capacity(file.pager.page_size());
        self.batch.record(freed, manifest, capacity);
        let r = self.finish(file, prev, meta, d);
        if r.is_err() {
            // Rolled back: what the batch recorded for this commit is wrong now.
            self.batch.break_off();
        }
        if r.is_ok() && point && d == Durability::Async && self.point_possible(meta.txid) {
            self.start_point(file, meta);
        }
        r
    }

    /// Start making `meta`, the Async commit just recorded, durable in the background: a
    /// sync of its pages on another thread first (if one is running, a later commit starts
    /// it). Nothing waits for it here, and nothing fails the commit, which is recorded
    /// already and promised nothing durable: a sync that fails poisons the handle, and the
    /// next call reports it.
    fn start_point(&mut self, file: &OpenFile, meta: Meta) {
        let need = file.pager.next_sync();
        let started = file.pager.start_background_flush();
        self.point = Some(Point {
            meta,
            need,
            started,
        });
    }

    /// Finish the durable point in flight if the sync it waits for is done: write its meta
    /// into its slot (not the durable meta's) with a write durable by itself. A point that a
    /// durable commit or a newer meta overtook is dropped: what makes that one durable does
    /// its work.
    pub(crate) fn advance_point(&mut self, file: &OpenFile) -> Result<()> {
        let Some(mut p) = self.point else {
            return Ok(());
        };
        let txid = p.meta.txid;
        if self.durable >= txid
            || self.meta_unsynced.is_some()
            || self.meta_written != self.durable
            || txid % 2 == self.durable % 2
        {
            // Overtaken: durable, or a newer meta is on disk (NoMetaSync) that the next
            // sync makes durable. (The slot cannot have come to be the durable meta's
            // without a newer commit becoming durable; checked all the same.)
            self.point = None;
            return Ok(());
        }
        if !file.pager.synced_since(p.need) && file.pager.synced_data_since(p.need) {
            // The sync is done but the file's name may not be durable (a compaction switch's
            // directory fsync failed): fsync the directory now, as a sync in the foreground
            // would. A failure poisons the handle.
            file.pager.sync_name()?;
        }
        if !file.pager.synced_since(p.need) {
            if !p.started {
                p.started = file.pager.start_background_flush();
                self.point = Some(p);
            }
            // A failed sync poisoned the handle: so that this commit fails as the next
            // would, rather than after writing its pages.
            file.pager.check_writable()?;
            return Ok(());
        }
        // Its pages are durable, no page its tree reaches was written since
        // (`pinned_through`), and the durable meta is in the other slot: a torn write of
        // this one leaves that fallback. Counted as on disk before the write: a failed write
        // may still have left it there (the handle is poisoned then).
        self.meta_written = txid;
        file.pager.write_meta_durable(&p.meta)?;
        self.durable = txid;
        self.point = None;
        self.batch.durable_through(txid);
        file.note_durable(self.durable);
        Ok(())
    }

    /// Forget a point that a durable commit overtook.
    fn drop_overtaken_point(&mut self) {
        if self.point.is_some_and(|p| p.meta.txid <= self.durable) {
            self.point = None;
        }
    }

    /// Returns true when a Sync commit was left to a later sync (group commit, below): the caller
    /// must wait for it to be durable.
    fn finish(&mut self, file: &OpenFile, prev: Meta, meta: Meta, d: Durability) -> Result<bool> {
        let mut deferred = false;
        match d {
            Durability::Sync if self.one_fsync_possible(file, meta.txid) => {
                self.write_listed_meta(file, meta)?;
            }
            Durability::Sync
                if file.opts.group_commit && self.two_step_possible(file, prev, meta.txid) =>
            {
                // `meta` would overwrite the durable meta's slot. Make the commit before it
                // durable with one fdatasync (its meta takes the other slot; the sync covers this
                // commit's pages too), and leave this one to the next sync, as a group-commit
                // follower: under load that is the next group's, so no sync is spent on parity.
                self.write_listed_prev(file, prev)?;
                self.batch.keep_last();
                deferred = true;
            }
            Durability::Sync if self.two_step_possible(file, prev, meta.txid) => {
                self.write_listed_prev_then(file, prev, meta)?;
            }
            Durability::Async => {}
            Durability::Sync | Durability::NoMetaSync => {
                self.sync_data(file)?;
                self.write_meta_keeping_fallback(file, prev, meta)?;
                if d == Durability::Sync {
                    file.pager.sync()?;
                    self.durable = meta.txid;
                } else {
                    self.meta_unsynced = Some(meta.txid);
                    self.batch.break_off();
                }
            }
        }
        self.previous = prev;
        self.committed = meta;
        if self.durable == meta.txid {
            self.batch.reset();
        }
        if let Some(age) = file.opts.max_unsynced_age {
            self.note_published(meta.txid, age / 8);
        }
        self.drop_overtaken_point();
        file.note_durable(self.durable);
        Ok(deferred)
    }

    /// One fdatasync can make `txid` durable when recovery can check every page written since the
    /// last durable commit (the batch lists them, and no meta was written since it) and fall back
    /// to that commit, whose meta slot `txid` does not overwrite.
    fn one_fsync_possible(&self, file: &OpenFile, txid: crate::TxId) -> bool {
        file.opts.one_fsync
            && !self.batch.broken
            && !self.batch.objects.is_empty()
            && self.meta_unsynced.is_none()
            && self.meta_written == self.durable
            && txid % 2 != self.durable % 2
            && self.fits(file, txid, self.batch.runs().len())
    }

    /// A manifest of `runs` fits the meta page of `txid` (with txids when it lists more than one
    /// commit).
    fn fits(&self, file: &OpenFile, txid: crate::TxId, runs: usize) -> bool {
        let ps = file.pager.page_size();
        runs <= if txid == self.durable + 1 {
            larch_pager::manifest_capacity(ps)
        } else {
            larch_pager::manifest_batch_capacity(ps)
        }
    }

    /// When `txid` would overwrite the durable meta's slot: the commit before it can take the
    /// other slot with one fdatasync (listing the batch as it was then), after which `txid`'s
    /// pages are synced too and its meta needs one more. Two fdatasyncs instead of three.
    fn two_step_possible(&self, file: &OpenFile, prev: Meta, txid: crate::TxId) -> bool {
        file.opts.one_fsync
            && !self.batch.broken
            && self.meta_unsynced.is_none()
            && self.meta_written == self.durable
            && txid % 2 == self.durable % 2
            && prev.txid + 1 == txid
            && prev.txid > self.durable
            && {
                let runs = self.batch.runs_before_last().len();
                runs > 0 && self.fits(file, prev.txid, runs)
            }
    }

    fn write_listed_prev_then(&mut self, file: &OpenFile, prev: Meta, meta: Meta) -> Result<()> {
        self.write_listed_prev(file, prev)?;
        self.meta_written = self.meta_written.max(meta.txid);
        file.pager.write_meta(&meta)?;
        file.pager.sync()?;
        self.durable = meta.txid;
        Ok(())
    }

    /// Meta `prev` listing the batch as it stood after `prev`, then one fdatasync (which also
    /// covers the pages of the commit after it).
    fn write_listed_prev(&mut self, file: &OpenFile, prev: Meta) -> Result<()> {
        let mut p = prev;
        p.manifest_first = if p.txid == self.durable + 1 {
            0
        } else {
            self.durable + 1
        };
        let runs = self.batch.runs_before_last();
        self.meta_written = self.meta_written.max(p.txid);
        file.pager.write_meta_with_manifest(&p, &runs)?;
        file.pager.sync()?;
        self.durable = p.txid;
        Ok(())
    }

    /// Write `meta` listing the batch, then one fdatasync covers pages and meta.
    fn write_listed_meta(&mut self, file: &OpenFile, meta: Meta) -> Result<()> {
        let mut meta = meta;
        // Only this commit's pages: the format's plain one-fsync commit.
        meta.manifest_first = if meta.txid == self.durable + 1 {
            0
        } else {
            self.durable + 1
        };
        let runs = self.batch.runs();
        self.meta_written = self.meta_written.max(meta.txid);
        file.pager.write_meta_with_manifest(&meta, &runs)?;
        file.pager.sync()?;
        self.durable = meta.txid;
        Ok(())
    }

    /// The file was just synced by a process that does not hold the cross-process writer
    /// lock: every commit of this process has its meta on disk, so it is durable now.
    pub(crate) fn synced_on_disk(&mut self) {
        if self.on_disk() >= self.committed.txid {
            self.durable = self.committed.txid;
            self.meta_written = self.meta_written.max(self.durable);
            self.meta_unsynced = None;
            self.batch.reset();
            self.drop_overtaken_point();
        }
    }

    /// Make the newest commit durable (`Db::sync`, close).
    pub(crate) fn sync_all(&mut self, file: &OpenFile) -> Result<()> {
        let r = self.sync_all_inner(file);
        self.drop_overtaken_point();
        file.note_durable(self.durable);
        r
    }

    fn sync_all_inner(&mut self, file: &OpenFile) -> Result<()> {
        if self.committed.txid == self.durable {
            // Every commit is durable in the file, but after a background switch whose
            // directory fsync failed, not yet under its name: a power cut could still bring
            // the old file back, without the commits the switch carried over.
            return Ok(file.pager.sync_name()?);
        }
        let meta = self.committed;
        if self.one_fsync_possible(file, meta.txid) {
            self.write_listed_meta(file, meta)
                .inspect_err(|_| self.batch.break_off())?;
            self.batch.reset();
            return Ok(());
        }
        let prev = self.previous;
        if self.two_step_possible(file, prev, meta.txid) {
            self.write_listed_prev_then(file, prev, meta)
                .inspect_err(|_| self.batch.break_off())?;
            self.batch.reset();
            return Ok(());
        }
        self.sync_data(file)?;
        if self.committed.txid != self.durable {
            let (prev, meta) = (self.previous, self.committed);
            self.write_meta_keeping_fallback(file, prev, meta)?;
            file.pager.sync()?;
            self.durable = meta.txid;
        }
        self.batch.reset();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(page: PageId, txid: TxId, checksum: u32) -> ManifestRun {
        ManifestRun {
            start: page,
            pages: 1,
            overflow: false,
            txid,
            checksum,
        }
    }

    fn overflow(page: PageId, pages: u32, txid: TxId, checksum: u32) -> ManifestRun {
        ManifestRun {
            start: page,
            pages,
            overflow: true,
            txid,
            checksum,
        }
    }

    #[test]
    fn adjacent_node_pages_of_one_commit_form_one_run_with_the_checksum_of_their_checksums() {
        let mut b = Batch::default();
        b.record(&[], &[node(5, 3, 11), node(6, 3, 12), node(8, 3, 13)], 100);
        b.record(&[], &[node(7, 4, 14), overflow(20, 3, 4, 99)], 100);
        let runs = b.runs();
        let want = vec![
            ManifestRun {
                pages: 2,
                checksum: larch_pager::node_run_checksum([11, 12]),
                ..node(5, 3, 0)
            },
            ManifestRun {
                checksum: larch_pager::node_run_checksum([14]),
                ..node(7, 4, 0)
            },
            ManifestRun {
                checksum: larch_pager::node_run_checksum([13]),
                ..node(8, 3, 0)
            },
            overflow(20, 3, 4, 99),
        ];
        assert_eq!(runs, want);
    }

    #[test]
    fn a_freed_object_leaves_the_list_and_a_rewritten_page_keeps_only_its_newest_write() {
        let mut b = Batch::default();
        b.record(&[], &[node(5, 3, 11), overflow(10, 4, 3, 50)], 100);
        // Commit 4 frees the overflow run (one page of it is enough to overlap) and rewrites
        // page 5 (reused within the run: only readers pinned it).
        b.record(&[(12, 1)], &[node(5, 4, 21)], 100);
        assert_eq!(
            b.runs(),
            vec![ManifestRun {
                checksum: larch_pager::node_run_checksum([21]),
                ..node(5, 4, 0)
            }]
        );
        // As of commit 3: the run and the old page 5.
        assert_eq!(
            b.runs_before_last(),
            vec![
                ManifestRun {
                    checksum: larch_pager::node_run_checksum([11]),
                    ..node(5, 3, 0)
                },
                overflow(10, 4, 3, 50),
            ]
        );
        b.keep_last();
        assert_eq!(b.runs().len(), 1);
    }

    #[test]
    fn a_durable_point_leaves_only_what_later_commits_wrote_in_the_list() {
        let mut b = Batch::default();
        b.record(
            &[],
            &[node(5, 3, 11), node(6, 3, 12), overflow(10, 2, 3, 50)],
            100,
        );
        b.record(&[], &[node(7, 4, 13), node(8, 4, 14)], 100);
        // Commit 5 frees commit 3's overflow run and page 8, and writes page 20.
        b.record(&[(10, 2), (8, 1)], &[node(20, 5, 15)], 100);
        // Commit 4 became durable in the background: commit 3's pages and its own are
        // durable, commit 5's are not, and as of commit 4 nothing after it was written.
        b.durable_through(4);
        assert_eq!(
            b.runs(),
            vec![ManifestRun {
                checksum: larch_pager::node_run_checksum([15]),
                ..node(20, 5, 0)
            }]
        );
        assert_eq!(b.run_count, 1);
        assert_eq!(b.runs_before_last(), vec![]);
        // A commit after it adds to the list as after any durable commit.
        b.record(&[], &[node(21, 6, 16)], 100);
        assert_eq!(b.runs().len(), 2);
        assert_eq!(b.run_count, 2);
        // A list that no longer describes the commits stays so.
        b.break_off();
        b.durable_through(6);
        assert!(b.broken);
    }

    #[test]
    fn the_run_count_kept_as_objects_come_and_go_is_the_manifest_length() {
        // Random commits over a small range of pages: node pages of one or two txids side by
        // side, overflow runs, frees and rewrites, so runs start, grow, split and merge.
        let mut next = crate::test_rng(0x9e37_79b9_7f4a_7c15u64);
        for round in 0..200 {
            let mut b = Batch::default();
            for txid in 2..40 {
                let mut wrote = Vec::new();
                let mut used = std::collections::BTreeSet::new();
                for _ in 0..next(6) + 1 {
                    let p = next(60) + 2;
                    if next(5) == 0 {
                        let n = next(3) as u32 + 1;
                        if (p..p + n as u64).all(|q| used.insert(q)) {
                            wrote.push(overflow(p, n, txid, txid as u32));
                        }
                    } else if used.insert(p) {
                        wrote.push(node(p, txid, p as u32));
                    }
                }
                let freed: Vec<(PageId, u64)> =
                    (0..next(3)).map(|_| (next(60) + 2, next(2) + 1)).collect();
                b.record(&freed, &wrote, 1000);
                assert!(!b.broken);
                assert_eq!(b.run_count, b.runs().len(), "round {round}, commit {txid}");
            }
            b.keep_last();
            assert_eq!(
                b.run_count,
                b.runs().len(),
                "round {round}, after keep_last"
            );
        }
    }

    #[test]
    fn the_list_keeps_exactly_the_objects_no_later_write_or_free_overlaps() {
        // Against a plain model (every object that overlaps a freed or written span goes,
        // whatever its size and wherever it starts), including long overflow runs that
        // cover several objects, frees of spans that start inside an object, and lengths
        // of zero.
        let mut next = crate::test_rng(0x2545_f491_4f6c_dd1du64);
        for round in 0..300 {
            let mut b = Batch::default();
            let mut model: BTreeMap<PageId, (u32, TxId)> = BTreeMap::new();
            let drop_overlapping = |m: &mut BTreeMap<PageId, (u32, TxId)>, p: PageId, n: u64| {
                let mut gone: Vec<(PageId, (u32, TxId))> = m
                    .iter()
                    .filter(|&(&q, &(len, _))| q < p + n && q + u64::from(len) > p)
                    .map(|(&q, &v)| (q, v))
                    .collect();
                for (q, _) in &gone {
                    m.remove(q);
                }
                gone.sort_unstable();
                gone
            };
            for txid in 2..30 {
                let mut wrote = Vec::new();
                let mut used = std::collections::BTreeSet::new();
                for _ in 0..next(8) + 1 {
                    let p = next(80) + 2;
                    let n = if next(3) == 0 { next(12) as u32 + 1 } else { 1 };
                    if (p..p + u64::from(n)).all(|q| used.insert(q)) {
                        wrote.push(if n > 1 || next(4) == 0 {
                            overflow(p, n, txid, txid as u32)
                        } else {
                            node(p, txid, p as u32)
                        });
                    }
                }
                let freed: Vec<(PageId, u64)> =
                    (0..next(4)).map(|_| (next(80) + 2, next(10))).collect();
                let mut removed = Vec::new();
                for &(p, n) in &freed {
                    removed.extend(drop_overlapping(&mut model, p, n));
                }
                for r in &wrote {
                    removed.extend(drop_overlapping(&mut model, r.start, u64::from(r.pages)));
                    model.insert(r.start, (r.pages, r.txid));
                }
                b.record(&freed, &wrote, 10_000);
                assert!(!b.broken);
                let listed: BTreeMap<PageId, (u32, TxId)> = b
                    .objects
                    .iter()
                    .map(|(&p, o)| (p, (o.pages, o.txid)))
                    .collect();
                assert_eq!(listed, model, "round {round}, commit {txid}");
                let mut last: Vec<(PageId, (u32, TxId))> = b
                    .last_removed
                    .iter()
                    .map(|&(p, o)| (p, (o.pages, o.txid)))
                    .collect();
                last.sort_unstable();
                removed.sort_unstable();
                assert_eq!(last, removed, "round {round}, commit {txid}: last_removed");
                assert_eq!(b.run_count, b.runs().len(), "round {round}, commit {txid}");
            }
        }
    }

    #[test]
    fn a_commit_that_lists_nothing_or_too_much_breaks_the_batch_until_reset() {
        let mut b = Batch::default();
        b.record(&[], &[], 100);
        assert!(b.broken);
        b.record(&[], &[node(5, 3, 1)], 100);
        assert!(
            b.broken && b.objects.is_empty(),
            "a broken batch records nothing"
        );
        b.reset();
        b.record(&[], &[node(5, 3, 1), node(9, 3, 2), node(11, 3, 3)], 2);
        assert!(b.broken, "three runs do not fit a capacity of two");
    }
}
