//! Background compaction by threshold (`Options::compaction_threshold`, as in ForestDB): when,
//! after a commit, the slack (pages free or held only by readers, at their fewest over the last
//! two sync windows) is more than that fraction of the file and the file is over a minimum size, a thread copies the live data to a new file, catches up with
//! the commits made meanwhile, and atomically puts the new file in place of the old. Open,
//! `Db::sync` and the handle's timer look too, and closing the last handle lets a running
//! compaction finish (docs/format.md, "Across opens and processes").
//!
//! The switch (docs/format.md, "Compaction"): with the writer lock held, the last commits are
//! applied to the new file and it is synced; then it is renamed over the old path and the
//! directory synced; then the handle's current file becomes the new one. A crash before the
//! rename leaves the old file (whole); after it, the new file (whole and synced). Readers that
//! began before the switch keep reading the old file through their own mapping.
//!
//! The database is its inode, not a name (tests/links.rs). `h.path` is resolved at open, so
//! the rename never replaces a symlink. A file with more than one hard link is never switched
//! (the other names would keep the old inode: a stale database no lock protects), and just
//! before the rename the path must still name the handle's file; otherwise the switch is
//! abandoned and the old file kept.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::compact::copy_snapshot;
use crate::compaction_state::{CompactReport, Trigger};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::file::{OpenFile, Shared, WriterState};
use crate::options::Durability;
use crate::process::{InodeClaim, ProcessLock};
use crate::read::ReadTx;

/// Catch-up rounds before the writer is held off for the last one.
const CATCH_UP_ROUNDS: usize = 4;

/// After a commit on `open_file` (its writer state `w`): start a compaction if the threshold says so.
pub(crate) fn maybe_start(shared: &Arc<Shared>, open_file: &OpenFile, w: &mut WriterState) {
    evaluate(shared, open_file, w, false)
}

/// Without a commit (`Db::sync`, the handle's timer): the same, counting a quiet interval as
/// a window (compaction_state.rs, `Trigger::quiet`).
pub(crate) fn check_quiet(shared: &Arc<Shared>, open_file: &OpenFile, w: &mut WriterState) {
    evaluate(shared, open_file, w, true)
}

/// At open: a file that earlier processes left with dead space past the threshold is
/// compacted by the process that opens it, even one that only reads, and the copy is under
/// way while it writes. The trigger has no history yet, so it counts the free pages less
/// the working space (compaction_state.rs, `Trigger`). Only while no other process has the
/// file open: the switch would be refused anyway (a refusal counted at every open); the
/// first look once they have gone counts as this one would have.
pub(crate) fn at_open(shared: &Arc<Shared>) {
    if shared.opts.compaction_threshold.is_none() || shared.opts.read_only {
        return;
    }
    let f = shared.current_file();
    if others_attached(&f) {
        return;
    }
    let mut w = f.writer.lock();
    if f.writer_state_current() {
        check_quiet(shared, &f, &mut w);
    }
}

/// The handle's timer ([`Options::compaction_check_every`](crate::Options)): while the handle
/// is open, look at the threshold each interval, unless a transaction holds the writer lock.
pub(crate) fn start_timer(shared: &Arc<Shared>) {
    if shared.opts.compaction_threshold.is_none() || shared.opts.read_only {
        return;
    }
    let weak = Arc::downgrade(shared);
    let every = shared.opts.compaction_check;
    let spawned = std::thread::Builder::new()
        .name("larch-compact-timer".into())
        .spawn(move || loop {
            let Some(h) = weak.upgrade() else {
                return;
            };
            if h.compaction.timer.wait(every) {
                return;
            }
            let f = h.current_file();
            timer_tick(&h, &f);
        });
    if let Ok(t) = spawned {
        *shared.compaction.timer.thread.lock() = Some(t);
    }
}

/// One look of the handle's timer at `f`, the file it took as current: unless a transaction
/// holds the writer lock. `f` may have been switched away since it was taken (a switch can
/// complete between the two).
fn timer_tick(h: &Arc<Shared>, f: &OpenFile) {
    let w = f.writer.try_lock();
    if let Some(mut w) = w {
        if f.writer_state_for_check(&mut w) {
            check_quiet(h, f, &mut w);
        }
        f.release_writer_if_on_disk();
    }
}

fn evaluate(shared: &Arc<Shared>, open_file: &OpenFile, w: &mut WriterState, quiet: bool) {
    let Some(threshold) = shared.opts.compaction_threshold else {
        return;
    };
    let c = &shared.compaction;
    let (committed, durable) = {
        let st = open_file.durability.lock();
        (st.committed, st.durable)
    };
    let hw = committed.high_water;
    // Free now, or held back only by readers (the compacted file has none of those). Pages
    // the newest commit freed wait for a newer commit while it is not durable (the meta
    // before it may still be written); once it is durable, the next transaction reuses them.
    let settled = if durable >= committed.txid {
        committed.txid
    } else {
        durable.min(committed.txid.saturating_sub(1))
    };
    // Pages on their way back to the free set: what the next transaction's begin releases
    // (`Txn::begin`), and what the newest commit freed while it is not durable (released
    // at the begin after). Under a policy that reuses pages they are the next commits'
    // working space, not slack: every commit frees its copied pages again, so they never
    // look idle, and counting them compacted a load of 1,000-key Async commits at 12 MB.
    // So as many as the last commit took from the free set, per commit in flight, do not
    // count (none under Null, which takes nothing); the rest, and all of them when no
    // commit came since the last look, do. Pages only readers hold always count.
    let readers_safe = open_file
        .snapshot_and_oldest_reader()
        .1
        .unwrap_or(committed.txid);
    let below = if committed.txid > durable {
        committed.txid - 1
    } else {
        committed.txid
    };
    let pending_settled = w.free.pending.freed_up_to(settled);
    let in_flight = w
        .free
        .pending
        .freed_through(readers_safe.min(settled))
        .min(pending_settled)
        + w.reader_pinned.freed_through(readers_safe.min(below))
        + w.reader_pinned.freed_after(below);
    let taken = w.trigger.taken_since_begin(w.free.free_pages());
    // Pages a durable point in the background pins (written by a commit up to its own, freed
    // since) wait in the pending queue until a point after it ends, where only readers would
    // hold them without it: they count as held. Under Null, which reuses nothing, they are
    // dead space; left out, the free count dipped at every point and the minimum over the
    // windows kept the dip, so the file grew past its bound. Under a policy that reuses
    // pages they are the working space the point keeps from the writer, which takes from
    // the free set or the end of the file instead: as many as the last commit took from the
    // free set, per commit since the durable one, do not count.
    let point_pinned = w.reader_pinned.point_pinned_after(settled);
    let point_working = if quiet && w.trigger.idle() {
        0
    } else {
        point_pinned.min(taken.saturating_mul((committed.txid - settled).max(1)))
    };
    let held = pending_settled + w.reader_pinned.len() + point_pinned - point_working;
    let working = if quiet && w.trigger.idle() {
        0
    } else {
        // Plus one: a durable point releases what waited for it at once (the pages of the
        // commits since the last one), and the commit after it leaves up to a commit's worth
        // of them in the free set, which the commits after it take back.
        let commits_in_flight = if committed.txid > durable { 3 } else { 2 };
        taken.saturating_mul(commits_in_flight)
    };
    // The working space comes out of the pages in flight first, and what is left of it out
    // of the free set: after a durable point released two commits' pages at once, the next
    // commit leaves one commit's worth in the free set for the commit after it.
    let from_flight = in_flight.min(working).min(held);
    let from_free = (working - from_flight).min(w.free.free_pages());
    let free = w.free.free_pages() - from_free + (held - from_flight);
    // The working space a writer may need between durable points, in pages.
    let ps = u64::from(committed.page_size).max(1);
    let span = shared
        .opts
        .max_unsynced
        .limit(committed.live_pages * ps)
        .map_or(u64::MAX, |b| b / ps);
    let slack = if quiet {
        w.trigger.quiet(free, durable, span, hw)
    } else {
        w.trigger.observe(free, durable, span)
    };
    if hw == 0 {
        return;
    }
    if slack as f64 <= threshold * hw as f64
        || open_file.pager.file_len() < shared.opts.compaction_min_bytes
    {
        return;
    }
    if c.running.load(Ordering::Acquire) {
        return;
    }
    let refused = switch_refused(open_file.pager.file(), &shared.path).or_else(|| {
        others_attached(open_file).then(|| {
            "other processes have the file open (their handles would stay on the old file)"
                .to_string()
        })
    });
    if let Some(why) = refused {
        // The copy could never be put in place: do not make it. Checked on every commit that
        // crosses the threshold, so removing the other links lets compaction run again.
        c.refused.fetch_add(1, Ordering::AcqRel);
        *c.last.lock() = Some(Err(format!("not started: {why}")));
        return;
    }
    if c.running.swap(true, Ordering::AcqRel) {
        return;
    }
    let len = open_file.pager.file_len();
    c.limit
        .store(len + (len as f64 * threshold) as u64, Ordering::Release);
    // A previous run has finished (running was false): reap its thread.
    c.join();
    let h = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("larch-compact".into())
        .spawn(move || {
            let r = run(&h);
            if r.is_ok() {
                h.compaction.completed.fetch_add(1, Ordering::AcqRel);
            }
            *h.compaction.last.lock() = Some(r.map_err(|e| e.to_string()));
            h.compaction.finish();
        });
    match spawned {
        Ok(t) => *c.thread.lock() = Some(t),
        Err(_) => c.finish(),
    }
}

/// Do other processes have the file open (through its lock file)? The background switch
/// would strand them on the old inode, so it runs only while this process is alone.
fn others_attached(open_file: &OpenFile) -> bool {
    open_file
        .lock()
        .is_some_and(|l| l.file.others_attached().unwrap_or(true))
}

/// Why renaming a compacted file over `path` would not replace the database open as `file`,
/// if it would not: the file has other hard links (they would keep the old inode, a second
/// database no lock protects), or `path` no longer names it (replaced, moved or removed).
fn switch_refused(file: &File, path: &Path) -> Option<String> {
    let open = match file.metadata() {
        Ok(m) => m,
        Err(e) => return Some(format!("cannot stat the open file: {e}")),
    };
    if open.nlink() > 1 {
        return Some(format!(
            "{} has {} hard links; renaming a compacted file over one name would split the \
             database into two files (Db::compact and Db::compact_to are unaffected)",
            path.display(),
            open.nlink()
        ));
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if (m.dev(), m.ino()) == (open.dev(), open.ino()) => None,
        Ok(_) => Some(format!(
            "{} no longer names this database's file (it was replaced)",
            path.display()
        )),
        Err(e) => Some(format!(
            "{} no longer names this database's file: {e}",
            path.display()
        )),
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.join(format!(".{name}.autocompact.{}", std::process::id()))
}

fn run(h: &Arc<Shared>) -> Result<CompactReport> {
    let tmp = temp_path(&h.path);
    let _ = h.fs.remove(&tmp);
    let r = switch(h, &tmp);
    if r.is_err() {
        let _ = h.fs.remove(&tmp);
    }
    r
}

fn io_err(op: &'static str, path: &Path, e: std::io::Error) -> Error {
    Error::io(op, path, e)
}

fn switch(h: &Arc<Shared>, tmp: &Path) -> Result<CompactReport> {
    let old = h.current_file();
    let mut base = old.begin_read()?;
    copy_snapshot(&base, old.pager.file_len(), tmp, &*h.fs)?;
    // Open the copy under the final path's name (for messages); it keeps its own lock.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(tmp)
        .map_err(|e| io_err("open compacted file", tmp, e))?;
    let mut opts = h.opts;
    opts.compaction_threshold = None;
    // Nor an age timer: the handle the copy is opened with is not the user's, and once the
    // switch makes its file current, the user's handle's timer looks at it.
    opts.max_unsynced_age = None;
    let storage = h.fs.storage(tmp, file, opts.write_mode);
    // Shared flock when other processes may open it after the switch (through the lock file).
    let flock = if old.lock().is_some() {
        larch_pager::FileLock::Shared
    } else {
        larch_pager::FileLock::ByMode
    };
    let new = Db::open_storage_at(&h.path, storage, opts, Arc::new(crate::fs::RealFs), flock)?;
    // Catch up with commits made during the copy, while writers carry on.
    for _ in 0..CATCH_UP_ROUNDS {
        let cur = old.begin_read()?;
        if cur.txid() == base.txid() {
            break;
        }
        apply_diff(&base, &cur, &new, Durability::Sync)?;
        base = cur;
    }
    // The last round holds the writer off, so nothing is missed; then switch files.
    let mut w = old.writer.lock_arc();
    if old.retired.load(Ordering::Acquire) {
        return Err(Error::Compaction("the file was replaced meanwhile".into()));
    }
    // Other processes' writers too, from the last snapshot to the rename: a process that
    // commits to the old file after that snapshot and detaches before the rename would lose
    // its commit with the old file. One that holds the lock now is attached, which refuses
    // the switch anyway: do not wait for it.
    let lock = old.lock().cloned();
    if let Some(l) = &lock {
        if !l.acquire(false)? {
            return Err(Error::Compaction(
                "switch abandoned, the old file kept: another process is writing".into(),
            ));
        }
        // What a write transaction does after its take: a writer of another process killed
        // before publishing may have left a newer meta, which the last round must copy (the
        // snapshots it reads follow the lock file only).
        if let Err(e) = old.reload_if_changed(&mut w) {
            old.release_writer_if_on_disk();
            return Err(e);
        }
    }
    let (before, open_file) = match last_round(h, &old, base, &new, tmp, lock.as_ref()) {
        Ok(done) => done,
        Err(e) => {
            // Still the old file's writer (`w`): let other processes write again.
            old.release_writer_if_on_disk();
            return Err(e);
        }
    };
    if let Some(l) = &lock {
        // Every commit is in the new file and synced; before the new file is current, so
        // no transaction of this process runs on it yet.
        l.release();
    }
    open_file.writer.lock().trigger = Trigger::compacted();
    let after = open_file.pager.file_len();
    let _ = old.successor.set(Arc::downgrade(&open_file));
    *h.current.write() = open_file;
    old.retired.store(true, Ordering::Release);
    // The old file's readers pin nothing of the new one (no process writes the old inode).
    old.readers.release_slots();
    // Cached snapshots of the old file would keep it open; new reads go to the new one.
    h.snapshots.clear();
    drop(w);
    Ok(CompactReport {
        before_bytes: before,
        after_bytes: after,
    })
}

/// The switch's last round, under the old file's writer lock (and the lock file's, if
/// any): copy the last commits, sync, rename the new file over the path. Returns the old
/// file's size and the new file.
fn last_round(
    h: &Arc<Shared>,
    old: &Arc<OpenFile>,
    base: ReadTx,
    new: &Db,
    tmp: &Path,
    lock: Option<&Arc<ProcessLock>>,
) -> Result<(u64, Arc<OpenFile>)> {
    let cur = old.begin_read()?;
    apply_diff(&base, &cur, new, Durability::Sync)?;
    // Both sizes at the switch: the old file kept growing while the copy ran.
    let before = old.pager.file_len();
    new.sync()?;
    drop(base);
    // The path must still name the old file, with no other name: else the rename would put
    // the new file beside a live old one (or over someone else's file). A change between
    // this check and the rename is not caught; the window is a few system calls.
    if let Some(why) = switch_refused(old.pager.file(), &h.path) {
        return Err(Error::Compaction(format!(
            "switch abandoned, the old file kept: {why}"
        )));
    }
    // No other process may be attached across the rename: hold the lock file's attach byte
    // exclusively (processes opening meanwhile wait in their attach, then open the new file).
    let new_file = new.current_file();
    if let Some(l) = lock {
        if !l.file.try_attach_exclusive()? {
            return Err(Error::Compaction(
                "switch abandoned, the old file kept: another process has it open".into(),
            ));
        }
        let switched = (|| -> Result<()> {
            // Another process may have attached, committed and gone since the last round
            // (the in-process writer lock does not hold it off): nobody else is attached
            // now, so one more round under the exclusive hold misses nothing.
            let latest = old.begin_read()?;
            if latest.txid() != cur.txid() {
                apply_diff(&cur, &latest, new, Durability::Sync)?;
                new.sync()?;
            }
            // Within this process the new inode is the database now.
            let claim = InodeClaim::claim_file(new_file.pager.file(), true, &h.path)?;
            h.fs.rename(tmp, &h.path)
                .map_err(|e| io_err("rename compacted file into place", &h.path, e))?;
            let _ = new_file.inode.set(claim);
            // The new file's commits are what the lock file names from now on. A `Db::sync`
            // or group-commit leader of this process that took the old file before the
            // switch publishes under the old file's durability lock: held here, so it
            // publishes before the reset or sees the old file superseded.
            let st = old.durability.lock();
            old.superseded.store(true, Ordering::Release);
            let txid = new_file.durability.lock().committed.txid;
            l.file.set_committed(txid);
            l.file.bump_generation_alone();
            drop(st);
            let _ = new_file.lock.set(l.clone());
            Ok(())
        })();
        let attached = l.file.attach_shared();
        switched?;
        if attached.is_err() {
            // The rename stands, so the switch goes through. Try once more; if that fails
            // too, the exclusive hold stays until this handle closes: processes opening
            // meanwhile wait in their attach, which is safe where a switch abandoned after
            // its rename is not (this handle would write an inode no name reaches).
            let _ = l.file.attach_shared();
        }
    } else {
        h.fs.rename(tmp, &h.path)
            .map_err(|e| io_err("rename compacted file into place", &h.path, e))?;
        let _st = old.durability.lock();
        old.superseded.store(true, Ordering::Release);
    }
    let dir = h
        .path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    if h.fs.sync_dir(&dir).is_err() {
        // The rename stands: the path names the new file, so the switch must go through
        // (abandoning it left this handle writing an inode no name reached, and every later
        // commit was gone at the next open). The name is durable only once the directory
        // is: the new file's next sync fsyncs it first and fails if it cannot.
        let fs = h.fs.clone();
        new_file
            .pager
            .sync_name_at_next_sync(larch_pager::SyncName(Box::new(move || fs.sync_dir(&dir))));
    }
    Ok((before, new_file))
}

/// Apply to `new` every change between snapshots `base` and `cur` of the old file. Trees
/// whose root page did not change are skipped (copy-on-write: same page, same contents).
fn apply_diff(base: &ReadTx, cur: &ReadTx, new: &Db, d: Durability) -> Result<()> {
    let mut tx = new.begin_write()?;
    tx.set_durability(d);
    let before: BTreeSet<String> = base.tree_names()?.into_iter().collect();
    let after: BTreeSet<String> = cur.tree_names()?.into_iter().collect();
    for gone in before.difference(&after) {
        tx.delete_tree(gone)?;
    }
    for name in &after {
        let c = cur.open_tree(name)?;
        let b = if before.contains(name) {
            Some(base.open_tree(name)?)
        } else {
            None
        };
        if b.as_ref().is_some_and(|b| b.root() == c.root()) {
            continue;
        }
        let mut t = tx.open_tree(name)?;
        let mut old_it = match &b {
            Some(b) => Some(b.iter()?.peekable()),
            None => None,
        };
        for entry in c.iter()? {
            let (k, v) = entry?;
            // Entries of the old tree before k are gone.
            if let Some(it) = old_it.as_mut() {
                while let Some(Ok((ok, _))) = it.peek() {
                    if *ok >= k {
                        break;
                    }
                    let gone = ok.to_vec();
                    it.next();
                    t.remove(&gone)?;
                }
                if let Some(Err(_)) = it.peek() {
                    if let Some(Err(e)) = it.next() {
                        return Err(e);
                    }
                }
                if let Some(Ok((ok, ov))) = it.peek() {
                    if *ok == k {
                        let same = *ov == v;
                        it.next();
                        if same {
                            continue;
                        }
                    }
                }
            }
            t.insert(k, v)?;
        }
        if let Some(it) = old_it {
            for entry in it {
                let (ok, _) = entry?;
                t.remove(ok)?;
            }
        }
    }
    tx.commit()
}

impl Db {
    /// Wait for a background compaction (if one runs) to finish; its result, or None if
    /// none has run since the last call.
    ///
    /// ```
    /// use larch_engine::{Db, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// // Compact in the background once 30% of the file has stayed free.
    /// let db = Db::open(dir.path().join("t.larch"), Options::default().compaction_threshold(Some(0.3)))?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// // A tiny file (under `compaction_min_bytes`) is never compacted.
    /// assert!(db.wait_for_compaction()?.is_none());
    /// assert_eq!((db.compactions(), db.compactions_refused()), (0, 0));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn wait_for_compaction(&self) -> Result<Option<CompactReport>> {
        self.shared.compaction.join();
        match self.shared.compaction.last.lock().take() {
            None => Ok(None),
            Some(Ok(r)) => Ok(Some(r)),
            Some(Err(e)) => Err(Error::Compaction(e)),
        }
    }

    /// One tick of the handle's compaction timer, on the file `rx` reads rather than the
    /// current one: what the timer thread does when it took that file as current just before
    /// a background switch made another current (the switch can complete between the
    /// timer's look at the current file and its `try_lock` of that file's writer). A test
    /// hook: only with the feature `test-hooks`.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn compaction_timer_tick_on(&self, rx: &ReadTx) {
        timer_tick(&self.shared, rx.file());
    }

    /// Background compactions completed by this handle. See [`Db::wait_for_compaction`] for
    /// an example.
    pub fn compactions(&self) -> u64 {
        self.shared.compaction.completed.load(Ordering::Acquire)
    }

    /// Background compactions the threshold called for but that were not started, because
    /// the file has other hard links or its path no longer names it (renaming a compacted
    /// file over the path would not replace the database). [`Db::wait_for_compaction`]
    /// returns the reason. See [`Db::wait_for_compaction`] for an example.
    pub fn compactions_refused(&self) -> u64 {
        self.shared.compaction.refused.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;

    use larch_pager::{FileLock, FileStorage, WriteMode};

    use crate::{Db, Durability, Options};

    /// Directory fsyncs fail once a rename (the switch's) has happened.
    #[derive(Debug, Default)]
    struct DirSyncFails {
        renamed: AtomicBool,
        failed: AtomicUsize,
    }

    impl crate::fs::CompactionFs for DirSyncFails {
        fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
            std::fs::rename(from, to)?;
            self.renamed.store(true, SeqCst);
            Ok(())
        }

        fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
            if self.renamed.load(SeqCst) {
                self.failed.fetch_add(1, SeqCst);
                return Err(std::io::Error::other("directory fsync refused by the test"));
            }
            larch_pager::sync_dir(dir)
        }
    }

    /// A group-commit follower waits on the file it committed to (`OpenFile::wait_durable`);
    /// once a switch retired that file it returned Ok at once, its commit being in the new
    /// file, synced. But when the switch's directory fsync failed, the new file's name is not
    /// durable: a power cut can bring back the old file, where the commit never became
    /// durable. The follower must not be told its commit is durable then.
    #[test]
    fn a_follower_on_a_retired_file_is_not_durable_under_a_name_not_synced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("follower.larch");
        drop(Db::open(&path, Options::default()).unwrap());
        let path = larch_pager::resolve_path(&path).unwrap();
        let fs = Arc::new(DirSyncFails::default());
        let opts = Options::default()
            .durability(Durability::Sync)
            .compaction_threshold(Some(0.3))
            .compaction_min_bytes(0)
            .compaction_check_every(std::time::Duration::from_secs(3600));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let storage = Box::new(FileStorage::new(file, WriteMode::Pwrite));
        let db = Db::open_storage_at(&path, storage, opts, fs.clone(), FileLock::ByMode).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..20_000u32 {
                t.insert(&i.to_be_bytes(), &[7u8; 200]).unwrap();
            }
        }
        tx.commit().unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in (0..20_000u32).filter(|i| i % 10 != 0) {
                t.remove(&i.to_be_bytes()).unwrap();
            }
        }
        tx.commit().unwrap();
        // Commits until one starts the compaction.
        let mut old = db.shared.current_file();
        for i in 0..100u32 {
            old = db.shared.current_file();
            let tx = db.begin_write().unwrap();
            tx.open_tree("t")
                .unwrap()
                .insert(b"k", &i.to_be_bytes())
                .unwrap();
            tx.commit().unwrap();
            let _ = db.wait_for_compaction();
            if db.compactions() > 0 {
                break;
            }
        }
        assert_eq!(db.compactions(), 1, "no switch");
        assert!(
            fs.failed.load(SeqCst) > 0,
            "the switch's directory fsync did not fail"
        );
        assert!(old.retired.load(SeqCst));
        // A follower's commit, deferred to a later sync (group commit), is the old file's
        // newest and not durable in it; the last round copied it into the new file, and the
        // follower, still waiting, finds the old file retired. (Which txid it waits for does
        // not matter to the retired branch; the timing that puts a follower there, a switch
        // within its 2 ms wait, is not one a test can arrange.)
        let waiting = old.durable_txid.load(SeqCst) + 1;
        assert!(
            old.wait_durable(waiting).is_err(),
            "a commit was reported durable in a file whose name a power cut can still undo"
        );
    }
}
