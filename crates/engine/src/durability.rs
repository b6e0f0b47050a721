//! When a commit's meta is written and synced, per durability (docs/format.md, "Commit
//! protocol"). The rule that keeps a fallback: the meta slot being written never holds the
//! last durable meta.

use std::collections::BTreeMap;

use larch_pager::{ManifestRun, Meta};

use crate::db::{Inner, WriterState};
use crate::error::Result;
use crate::options::Durability;
use crate::PageId;

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
        }
        if self.runs().len() > capacity {
            self.break_off();
        }
    }

    fn insert(&mut self, p: PageId, o: Object) {
        self.remove_overlapping(p, o.pages as u64);
        self.objects.insert(p, o);
        self.last_added.push(p);
    }

    fn remove_overlapping(&mut self, p: PageId, n: u64) {
        let end = p + n;
        let mut gone: Vec<PageId> = self.objects.range(p..end).map(|(&q, _)| q).collect();
        if let Some((&q, o)) = self.objects.range(..p).next_back() {
            if q + o.pages as u64 > p {
                gone.push(q);
            }
        }
        for q in gone {
            if let Some(v) = self.objects.remove(&q) {
                self.last_removed.push((q, v));
            }
        }
    }

    /// Everything but the last recorded commit became durable: list only what it added.
    fn keep_last(&mut self) {
        let last: BTreeMap<_, _> = self
            .last_added
            .iter()
            .filter_map(|p| self.objects.get(p).map(|&v| (*p, v)))
            .collect();
        self.objects = last;
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

/// Sync data, then note that a meta written earlier without sync is now durable too.
fn sync_data(db: &Inner, w: &mut WriterState) -> Result<()> {
    db.pager.sync()?;
    if let Some(t) = w.meta_unsynced.take() {
        w.durable = w.durable.max(t);
    }
    Ok(())
}

/// Write `meta` into slot txid % 2. If that slot holds the last durable meta (async commits
/// in between left the parity equal), first make `prev` (txid - 1, whose pages are synced by
/// now) durable in the other slot, so a torn write of `meta` still has a fallback.
fn write_meta_keeping_fallback(
    db: &Inner,
    w: &mut WriterState,
    prev: Meta,
    meta: Meta,
) -> Result<()> {
    if meta.txid % 2 == w.durable % 2 && meta.txid != w.durable {
        debug_assert_eq!(prev.txid + 1, meta.txid);
        db.pager.write_meta(&prev)?;
        w.meta_written = w.meta_written.max(prev.txid);
        db.pager.sync()?;
        w.durable = prev.txid;
    }
    // Before the write: a failed or torn write may still leave this meta on disk.
    w.meta_written = w.meta_written.max(meta.txid);
    Ok(db.pager.write_meta(&meta)?)
}

/// Finish a commit whose pages are written: sync and write the meta as `d` asks. `freed`
/// are the runs it stopped reaching; `manifest` what it wrote (empty if that does not fit a
/// meta page).
pub(crate) fn commit_meta(
    db: &Inner,
    w: &mut WriterState,
    prev: Meta,
    meta: Meta,
    d: Durability,
    freed: &[(PageId, u64)],
    manifest: &[ManifestRun],
) -> Result<bool> {
    let capacity = larch_pager::manifest_capacity(db.pager.page_size());
    w.batch.record(freed, manifest, capacity);
    let r = finish(db, w, prev, meta, d);
    if r.is_err() {
        // Rolled back: what the batch recorded for this commit is wrong now.
        w.batch.break_off();
    }
    r
}

/// Returns true when a Sync commit was left to a later sync (group commit, below): the caller
/// must wait for it to be durable.
fn finish(db: &Inner, w: &mut WriterState, prev: Meta, meta: Meta, d: Durability) -> Result<bool> {
    let mut deferred = false;
    match d {
        Durability::Sync if one_fsync_possible(db, w, meta.txid) => {
            write_listed_meta(db, w, meta)?;
        }
        Durability::Sync if db.opts.group_commit && two_step_possible(db, w, prev, meta.txid) => {
            // `meta` would overwrite the durable meta's slot. Make the commit before it
            // durable with one fdatasync (its meta takes the other slot; the sync covers this
            // commit's pages too), and leave this one to the next sync, as a group-commit
            // follower: under load that is the next group's, so no sync is spent on parity.
            write_listed_prev(db, w, prev)?;
            w.batch.keep_last();
            deferred = true;
        }
        Durability::Sync if two_step_possible(db, w, prev, meta.txid) => {
            write_listed_prev_then(db, w, prev, meta)?;
        }
        Durability::Async => {}
        Durability::Sync | Durability::NoMetaSync => {
            sync_data(db, w)?;
            write_meta_keeping_fallback(db, w, prev, meta)?;
            if d == Durability::Sync {
                db.pager.sync()?;
                w.durable = meta.txid;
                db.trim_file(meta.high_water);
            } else {
                w.meta_unsynced = Some(meta.txid);
                w.batch.break_off();
            }
        }
    }
    w.previous = prev;
    w.committed = meta;
    if w.durable == meta.txid {
        w.batch.reset();
    }
    db.note_durable(w.durable);
    Ok(deferred)
}

/// One fdatasync can make `txid` durable when recovery can check every page written since the
/// last durable commit (the batch lists them, and no meta was written since it) and fall back
/// to that commit, whose meta slot `txid` does not overwrite.
fn one_fsync_possible(db: &Inner, w: &WriterState, txid: crate::TxId) -> bool {
    db.opts.one_fsync
        && !w.batch.broken
        && !w.batch.objects.is_empty()
        && w.meta_unsynced.is_none()
        && w.meta_written == w.durable
        && txid % 2 != w.durable % 2
        && fits(db, w, txid, w.batch.runs().len())
}

/// A manifest of `runs` fits the meta page of `txid` (with txids when it lists more than one
/// commit).
fn fits(db: &Inner, w: &WriterState, txid: crate::TxId, runs: usize) -> bool {
    let ps = db.pager.page_size();
    runs <= if txid == w.durable + 1 {
        larch_pager::manifest_capacity(ps)
    } else {
        larch_pager::manifest_batch_capacity(ps)
    }
}

/// When `txid` would overwrite the durable meta's slot: the commit before it can take the
/// other slot with one fdatasync (listing the batch as it was then), after which `txid`'s
/// pages are synced too and its meta needs one more. Two fdatasyncs instead of three.
fn two_step_possible(db: &Inner, w: &WriterState, prev: Meta, txid: crate::TxId) -> bool {
    db.opts.one_fsync
        && !w.batch.broken
        && w.meta_unsynced.is_none()
        && w.meta_written == w.durable
        && txid % 2 == w.durable % 2
        && prev.txid + 1 == txid
        && prev.txid > w.durable
        && {
            let runs = w.batch.runs_before_last().len();
            runs > 0 && fits(db, w, prev.txid, runs)
        }
}

fn write_listed_prev_then(db: &Inner, w: &mut WriterState, prev: Meta, meta: Meta) -> Result<()> {
    write_listed_prev(db, w, prev)?;
    w.meta_written = w.meta_written.max(meta.txid);
    db.pager.write_meta(&meta)?;
    db.pager.sync()?;
    w.durable = meta.txid;
    db.trim_file(meta.high_water);
    Ok(())
}

/// Meta `prev` listing the batch as it stood after `prev`, then one fdatasync (which also
/// covers the pages of the commit after it).
fn write_listed_prev(db: &Inner, w: &mut WriterState, prev: Meta) -> Result<()> {
    let mut p = prev;
    p.manifest_first = if p.txid == w.durable + 1 {
        0
    } else {
        w.durable + 1
    };
    let runs = w.batch.runs_before_last();
    w.meta_written = w.meta_written.max(p.txid);
    db.pager.write_meta_with_manifest(&p, &runs)?;
    db.pager.sync()?;
    w.durable = p.txid;
    Ok(())
}

/// Write `meta` listing the batch, then one fdatasync covers pages and meta.
fn write_listed_meta(db: &Inner, w: &mut WriterState, meta: Meta) -> Result<()> {
    let mut meta = meta;
    // Only this commit's pages: the format's plain one-fsync commit.
    meta.manifest_first = if meta.txid == w.durable + 1 {
        0
    } else {
        w.durable + 1
    };
    let runs = w.batch.runs();
    w.meta_written = w.meta_written.max(meta.txid);
    db.pager.write_meta_with_manifest(&meta, &runs)?;
    db.pager.sync()?;
    w.durable = meta.txid;
    db.trim_file(meta.high_water);
    Ok(())
}

/// Make the newest commit durable (`Db::sync`, close).
pub(crate) fn sync_all(db: &Inner, w: &mut WriterState) -> Result<()> {
    let r = sync_all_inner(db, w);
    db.note_durable(w.durable);
    r
}

fn sync_all_inner(db: &Inner, w: &mut WriterState) -> Result<()> {
    if w.committed.txid == w.durable {
        return Ok(());
    }
    let meta = w.committed;
    if one_fsync_possible(db, w, meta.txid) {
        write_listed_meta(db, w, meta).inspect_err(|_| w.batch.break_off())?;
        w.batch.reset();
        return Ok(());
    }
    let prev = w.previous;
    if two_step_possible(db, w, prev, meta.txid) {
        write_listed_prev_then(db, w, prev, meta).inspect_err(|_| w.batch.break_off())?;
        w.batch.reset();
        return Ok(());
    }
    sync_data(db, w)?;
    if w.committed.txid != w.durable {
        let (prev, meta) = (w.previous, w.committed);
        write_meta_keeping_fallback(db, w, prev, meta)?;
        db.pager.sync()?;
        w.durable = meta.txid;
        db.trim_file(meta.high_water);
    }
    w.batch.reset();
    Ok(())
}
