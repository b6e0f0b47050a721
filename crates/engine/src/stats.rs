//! `Db::stats`: space accounting for the newest commit and the shape of every tree.

use larch_pager::{PageRole, TreeRoot};

use crate::db::Db;
use crate::error::Result;
use crate::node_page::ValRef;
use crate::view::View;
use crate::TxId;

/// Shape of one tree (like mdb_stat). See [`Db::stats`] for an example.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeStats {
    /// Tree name.
    pub name: String,
    /// Levels (0 for an empty tree).
    pub depth: u32,
    /// Branch pages.
    pub branch_pages: u64,
    /// Leaf pages.
    pub leaf_pages: u64,
    /// Pages in overflow runs.
    pub overflow_pages: u64,
    /// Entries.
    pub entries: u64,
    /// Bytes used by slots and cells in branch and leaf pages (for the fill factor).
    pub used_bytes: u64,
}

impl TreeStats {
    /// Average fill of branch and leaf pages, 0.0..=1.0.
    pub fn fill(&self, page_size: usize) -> f64 {
        let pages = self.branch_pages + self.leaf_pages;
        if pages == 0 {
            return 0.0;
        }
        self.used_bytes as f64 / (pages as f64 * (page_size - larch_pager::PAGE_HEADER_SIZE) as f64)
    }
}

/// Space accounting of the newest commit. See [`Db::stats`] for an example.
///
/// A page of the file is *live* (reachable from the newest commit), *free* (reusable now) or
/// *pending* (unreachable from the newest commit, but a reader's snapshot or the last durable
/// commit may still need it); *high water* is the number of pages ever used, below which all
/// three lie.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Page size.
    pub page_size: usize,
    /// Newest committed txid.
    pub txid: TxId,
    /// Newest txid that survives power loss.
    pub durable_txid: TxId,
    /// Txid the other meta slot held when the file was opened, if valid (commits since then
    /// rewrite both slots in turn; `durable_txid` is the current fallback).
    pub other_meta_txid: Option<TxId>,
    /// Set when open found the other meta slot damaged (a torn or corrupt meta) and used this one.
    pub meta_fallback: Option<String>,
    /// File length.
    pub file_bytes: u64,
    /// First page never used.
    pub high_water: u64,
    /// Pages reachable from the newest meta (metas included).
    pub live_pages: u64,
    /// Unreachable pages that may be reused now.
    pub free_pages: u64,
    /// Unreachable pages a reader or the durable fallback may still need.
    pub pending_pages: u64,
    /// Pages below the high-water mark not reachable from the newest meta (free + pending).
    pub dead_pages: u64,
    /// dead_pages / high_water.
    pub dead_ratio: f64,
    /// Oldest snapshot a reader holds.
    pub oldest_reader: Option<TxId>,
    /// How many commits behind the newest that reader is.
    pub oldest_reader_age: Option<u64>,
    /// Freed pages that would be reusable now but for the oldest reader (it can still reach
    /// them): what a long-lived reader costs in file growth.
    pub oldest_reader_pinned_pages: u64,
    /// Open read transactions.
    pub readers: usize,
    /// Every tree.
    pub trees: Vec<TreeStats>,
}

/// Walk a tree and count its pages.
pub(crate) fn tree_stats(
    view: &View<'_>,
    name: String,
    root: &TreeRoot,
    role: PageRole,
) -> Result<TreeStats> {
    let limits = crate::node_page::Limits::new(view.page_size);
    let mut s = TreeStats {
        name,
        depth: root.depth,
        branch_pages: 0,
        leaf_pages: 0,
        overflow_pages: 0,
        entries: root.entries,
        used_bytes: 0,
    };
    if root.root == 0 {
        return Ok(s);
    }
    let mut stack = vec![(root.root, root.depth)];
    let mut visited = 0u64;
    while let Some((id, level)) = stack.pop() {
        visited += 1;
        if visited > view.high_water || level == 0 || level > crate::view::MAX_DEPTH {
            return Err(crate::Error::corrupt(
                id,
                "tree walk visits more pages than the file holds (cycle?)",
            ));
        }
        let p = view.node(id, role)?;
        let used = p.bytes.len() - larch_pager::PAGE_HEADER_SIZE;
        let mut free = 0usize;
        // Used bytes: slots plus cells (the page is packed from the end down to the lowest cell).
        let mut lowest = p.bytes.len();
        for i in 0..p.count {
            let off = u16::from_le_bytes([p.bytes[16 + 2 * i], p.bytes[17 + 2 * i]]) as usize;
            lowest = lowest.min(off);
        }
        free += lowest.saturating_sub(16 + 2 * p.count);
        s.used_bytes += used.saturating_sub(free) as u64;
        if p.leaf {
            s.leaf_pages += 1;
            for i in 0..p.count {
                if let ValRef::Overflow { len, .. } = p.entry(i)?.1 {
                    s.overflow_pages += limits.overflow_pages(len);
                }
            }
        } else {
            s.branch_pages += 1;
            for i in 0..p.count {
                stack.push((p.child(i)?, level - 1));
            }
        }
    }
    Ok(s)
}

impl Db {
    /// Space accounting and per-tree shape of the newest commit.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for i in 0..1000u32 {
    ///     t.insert(&i.to_be_bytes(), &[0; 100])?;
    /// }
    /// drop(t);
    /// tx.commit()?;
    /// let stats = db.stats()?;
    /// assert_eq!((stats.txid, stats.durable_txid), (1, 1));
    /// let t = &stats.trees[0];
    /// assert_eq!((t.name.as_str(), t.entries, t.depth), ("t", 1000, 2));
    /// assert!(t.leaf_pages > 1 && t.fill(stats.page_size) > 0.4);
    /// assert_eq!(stats.readers, 0);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn stats(&self) -> Result<Stats> {
        let rx = self.begin_read()?;
        let view = rx.view();
        let meta = rx.meta();
        let mut trees = Vec::new();
        for name in rx.tree_names()? {
            let t = rx.open_tree(&name)?;
            let root = t.root();
            trees.push(tree_stats(&view, name, &root, PageRole::Data)?);
        }
        let (oldest, readers) = {
            let mut held = rx.file().readers.held();
            // Our own reader is in the table; do not count it.
            if let Some(i) = held.iter().position(|&(t, _)| t == rx.txid()) {
                held[i].1 -= 1;
                if held[i].1 == 0 {
                    held.remove(i);
                }
            }
            (
                held.first().map(|&(t, _)| t),
                held.iter().map(|&(_, n)| n).sum(),
            )
        };
        // A process that does not hold the lock file's writer lock knows what is durable from
        // the lock file (its own state may be stale: another process writes).
        let elsewhere = rx.file().lock().filter(|l| !l.held()).map(|l| {
            // Nothing recorded: no writer attached since the lock file was made; the
            // newest meta on disk is all there is.
            l.file
                .durable_txid()
                .map_or(meta.txid, |d| d.min(meta.txid))
        });
        let (durable, free_pages, pending_pages, pinned) = match rx.file().writer.try_lock() {
            Some(_) if elsewhere.is_some() && rx.file().opts.read_only => {
                (elsewhere.unwrap_or(0), meta.unreachable_pages, 0, 0)
            }
            Some(w) => {
                // Freed by a transaction newer than the oldest reader's snapshot: it can see them.
                let pinned = oldest.map_or(0, |o| {
                    let waiting = w.free.pending.iter().chain(w.reader_pinned.iter());
                    waiting.filter(|&(t, _, _)| t > o).map(|(_, _, n)| n).sum()
                });
                let pending = w.free.pending_pages() + w.reader_pinned.len();
                (
                    elsewhere.unwrap_or_else(|| rx.file().durability.lock().durable),
                    w.free.free_pages(),
                    pending,
                    pinned,
                )
            }
            None => (elsewhere.unwrap_or(meta.txid), meta.unreachable_pages, 0, 0),
        };
        let opened = &rx.file().opened;
        let dead = meta.high_water.saturating_sub(meta.live_pages);
        Ok(Stats {
            page_size: meta.page_size as usize,
            txid: meta.txid,
            durable_txid: durable,
            other_meta_txid: opened.other.as_ref().ok().map(|m| m.txid),
            meta_fallback: opened.discarded.clone().or_else(|| {
                opened.other_damaged.then(|| {
                    format!(
                        "the other meta page is damaged ({}); opened at txid {}",
                        opened.other.as_ref().err().cloned().unwrap_or_default(),
                        opened.current.txid
                    )
                })
            }),
            file_bytes: rx.file().pager.file_len(),
            high_water: meta.high_water,
            live_pages: meta.live_pages,
            free_pages,
            pending_pages,
            dead_pages: dead,
            dead_ratio: if meta.high_water == 0 {
                0.0
            } else {
                dead as f64 / meta.high_water as f64
            },
            oldest_reader: oldest,
            oldest_reader_age: oldest.map(|o| meta.txid - o),
            oldest_reader_pinned_pages: pinned,
            readers,
            trees,
        })
    }
}
