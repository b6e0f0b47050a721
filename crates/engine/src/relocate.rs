//! In-place compaction: move live pages from the end of the file to free pages near its head,
//! over as many commits as it takes, then give the free tail back (docs/format.md,
//! "Compaction").
//!
//! A round copies every page at or past a limit (and the path above it) to the lowest free
//! pages, as an ordinary copy-on-write commit: readers keep their snapshots, and the old pages
//! become free only when no reader and no fallback meta can reach them. The next commit finds
//! them as a free tail and lowers the high-water mark; once that is durable the file is
//! truncated.

use std::path::Path;
use std::sync::Arc;

use larch_pager::PageRole;

use crate::compact::copy_snapshot;
use crate::compaction_state::CompactReport;
use crate::db::Db;
use crate::error::Result;
use crate::node::{Child, Run};
use crate::options::Durability;
use crate::view::View;
use crate::write::{Txn, CATALOG, FREEMAP};
use crate::PageId;

impl Txn {
    /// Rewrite every page of every tree that lies at or past `limit`.
    pub(crate) fn relocate_all(&mut self, limit: PageId) -> Result<()> {
        let names = self.tree_names()?;
        let mut trees = vec![CATALOG, FREEMAP];
        for name in names {
            if let Some(i) = self.tree_index(&name, false)? {
                trees.push(i);
            }
        }
        for t in trees {
            self.activate(t);
            let Some(root) = self.trees[t].root else {
                continue;
            };
            let (depth, role) = (self.trees[t].depth, self.trees[t].role);
            if let Some(new) = self.relocate(root, depth, role, limit)? {
                self.trees[t].root = Some(new);
                self.trees[t].dirty = true;
            }
        }
        Ok(())
    }

    /// Copy the subtree at `c` wherever it reaches past `limit`; the new child if it moved.
    fn relocate(
        &mut self,
        c: Child,
        level: u32,
        role: PageRole,
        limit: PageId,
    ) -> Result<Option<Child>> {
        let Child::Page(p) = c else { return Ok(None) };
        let base = Arc::clone(&self.base);
        let view = View::new(&base.map, &base.meta, self.db.opts.verify_checksums);
        let page = view.node(p, role)?;
        if level == 0 || page.leaf != (level == 1) {
            return Err(crate::Error::corrupt(
                p,
                "leaf and branch levels do not match the tree depth",
            ));
        }
        if page.leaf {
            let mut far_values = false;
            for i in 0..page.count {
                if let crate::node_page::ValRef::Overflow { page: o, len } = page.entry(i)?.1 {
                    far_values |= o + self.limits.overflow_pages(len) > limit;
                }
            }
            if p < limit && !far_values {
                return Ok(None);
            }
            let id = self.touch(c, role)?;
            for i in 0..self.nodes[id].len() {
                if let Some(Run {
                    page: o,
                    len,
                    fresh: false,
                }) = self.nodes[id].run(i)
                {
                    let n = self.limits.overflow_pages(len);
                    if o + n > limit {
                        let bytes = view.overflow(o, len)?;
                        let moved = self.write_overflow(bytes)?;
                        self.free_committed(o, n);
                        self.nodes[id].set_val(i, moved);
                    }
                }
            }
            return Ok(Some(Child::Node(id)));
        }
        let mut moved = Vec::new();
        for j in 0..page.count {
            if let Some(nc) = self.relocate(Child::Page(page.child(j)?), level - 1, role, limit)? {
                moved.push((j, nc));
            }
        }
        if p < limit && moved.is_empty() {
            return Ok(None);
        }
        let id = self.touch(c, role)?;
        for (j, nc) in moved {
            self.nodes[id].children[j] = nc;
        }
        Ok(Some(Child::Node(id)))
    }
}

impl Db {
    /// Shrink the file in place: move live pages from its end toward its head, then truncate
    /// the free tail. Readers may stay open (pages they still see are moved but not reused
    /// until they finish, so the file shrinks less while they live). Works under every policy.
    /// Commits with `Sync`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for i in 0..5000u32 {
    ///     t.insert(&i.to_be_bytes(), &[0; 200])?;
    /// }
    /// drop(t);
    /// tx.commit()?;
    /// let tx = db.begin_write()?;
    /// let from = 100u32.to_be_bytes();
    /// tx.open_tree("t")?.remove_range(&from[..]..)?; // most of the file is now free
    /// tx.commit()?;
    /// let report = db.compact()?;
    /// assert!(report.after_bytes < report.before_bytes);
    /// assert_eq!(std::fs::metadata(db.path()).unwrap().len(), report.after_bytes);
    /// assert_eq!(db.begin_read()?.open_tree("t")?.len()?, 100);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn compact(&self) -> Result<CompactReport> {
        let before = self.current_file().pager.file_len();
        let mut last_high_water = u64::MAX;
        let mut stalled = 0;
        for _round in 0..32 {
            let mut tx = self.begin_write()?.into_txn();
            tx.compacting = true;
            tx.durability = Durability::Sync;
            let unreachable = tx.writer.unreachable_pages();
            let high_water = tx.high_water;
            let live = high_water.saturating_sub(unreachable);
            // Room for the pages to move plus the branches above them.
            let limit = live + live / 32 + 16;
            let fragmented = high_water > limit;
            if fragmented {
                tx.relocate_all(limit)?;
            }
            tx.commit()?;
            let now = self.current_file().durability.lock().committed.high_water;
            if !fragmented && now >= last_high_water {
                break;
            }
            if now >= last_high_water {
                stalled += 1;
                if stalled >= 2 {
                    break;
                }
            } else {
                stalled = 0;
            }
            last_high_water = now;
        }
        self.sync()?;
        Ok(CompactReport {
            before_bytes: before,
            after_bytes: self.current_file().pager.file_len(),
        })
    }

    /// Write the newest commit's live data into a new file at `path` (which must not exist):
    /// in key order, leaves adjacent, branches after their children, no free pages. The file
    /// appears at `path` only when complete and synced.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// let copy = dir.path().join("copy.larch");
    /// let report = db.compact_to(&copy)?;
    /// assert_eq!(std::fs::metadata(&copy).unwrap().len(), report.after_bytes);
    /// let db2 = larch_engine::Db::open(&copy, Default::default())?;
    /// assert_eq!(db2.begin_read()?.open_tree("t")?.get(b"k")?, Some(&b"v"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn compact_to(&self, path: impl AsRef<Path>) -> Result<CompactReport> {
        let rx = self.begin_read()?;
        copy_snapshot(
            &rx,
            self.current_file().pager.file_len(),
            path.as_ref(),
            &*self.shared.fs,
        )
    }
}

impl crate::read::ReadTx {
    /// [`Db::compact_to`] for this snapshot: a dense copy of exactly the commit this
    /// transaction reads (`txid()`), however many commits came since (`larch copy`).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"old")?;
    /// tx.commit()?;
    /// let rx = db.begin_read()?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"new")?;
    /// tx.commit()?;
    /// let copy = dir.path().join("copy.larch");
    /// rx.compact_to(&copy)?;
    /// let db2 = larch_engine::Db::open(&copy, Default::default())?;
    /// assert_eq!(db2.begin_read()?.open_tree("t")?.get(b"k")?, Some(&b"old"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn compact_to(&self, path: impl AsRef<Path>) -> Result<CompactReport> {
        let open_file = self.file();
        copy_snapshot(
            self,
            open_file.pager.file_len(),
            path.as_ref(),
            &crate::fs::RealFs,
        )
    }
}
