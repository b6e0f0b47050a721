//! Compaction by copy: write the live data of a snapshot into a new file, tree by tree in key
//! order: full leaves on adjacent pages, then that tree's overflow runs, then its branches
//! level by level (each after its children). The new file has no free pages; it appears at
//! its path only when complete and synced (docs/format.md, "Compaction").

use std::path::{Path, PathBuf};

use larch_pager::{Meta, PageHeader, PageRole, PageType, Pager, PagerOptions, TreeRoot};

use crate::compaction_state::CompactReport;
use crate::error::{Error, Result};
use crate::fs::CompactionFs;
use crate::node::{Child, Node, Val};
use crate::node_page::{Limits, ValRef, OVERFLOW_HEADER};
use crate::read::ReadTx;
use crate::view::View;
use crate::{PageId, TxId};

/// The txid every page and the meta of a compacted file carry.
const COPY_TXID: TxId = 1;

/// One finished child for the level above: its page and its first and last keys.
struct Built {
    page: PageId,
    first: Vec<u8>,
    last: Vec<u8>,
}

/// Writes pages of the new file in order.
struct Writer<'a> {
    pager: &'a Pager,
    limits: Limits,
    next: PageId,
    buf: Vec<u8>,
    /// Pages buffered for one vectored write.
    pending_from: PageId,
}

impl Writer<'_> {
    fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.pager.ensure_pages(self.next)?;
            self.pager.write_pages(self.pending_from, &[&self.buf])?;
            self.buf.clear();
        }
        self.pending_from = self.next;
        Ok(())
    }

    fn node(&mut self, n: &Node) -> Result<PageId> {
        let ps = self.limits.page_size;
        n.encode(&mut self.buf, ps, COPY_TXID, |_| 0);
        let id = self.next;
        self.next += 1;
        if self.buf.len() >= 256 * ps {
            self.flush()?;
        }
        Ok(id)
    }

    fn overflow(&mut self, at: PageId, value: &[u8]) -> Result<()> {
        let n = self.limits.overflow_pages(value.len() as u64);
        let mut run = vec![0u8; n as usize * self.limits.page_size];
        PageHeader {
            page_type: PageType::Overflow,
            role: PageRole::Data,
            count: 0,
            txid: COPY_TXID,
        }
        .write(&mut run);
        run[16..24].copy_from_slice(&(value.len() as u64).to_le_bytes());
        run[OVERFLOW_HEADER..OVERFLOW_HEADER + value.len()].copy_from_slice(value);
        larch_pager::set_run_checksum(&mut run);
        self.pager.ensure_pages(at + n)?;
        Ok(self.pager.write_pages(at, &[&run])?)
    }
}

/// The next (key, value) of a sorted stream.
type Entries<'s, 'v> = &'s mut dyn FnMut() -> Result<Option<(&'v [u8], &'v [u8])>>;

/// Bulk-load one tree from sorted entries; returns its root record.
fn load_tree<'v>(
    w: &mut Writer<'_>,
    role: PageRole,
    entries: Entries<'_, 'v>,
    count_pass: &mut dyn FnMut() -> Result<Vec<(usize, usize)>>,
) -> Result<TreeRoot> {
    let limits = w.limits;
    // Pass 1: sizes only, to know how many leaves come before the overflow runs.
    let sizes = count_pass()?;
    if sizes.is_empty() {
        return Ok(TreeRoot::default());
    }
    let mut leaves = 0u64;
    let mut used = limits.capacity;
    let mut overflow_pages = 0u64;
    for &(klen, vlen) in &sizes {
        let inline = limits.inline(klen, vlen);
        let stored = if inline { vlen } else { 8 };
        if !inline {
            overflow_pages += limits.overflow_pages(vlen as u64);
        }
        let size = Node::leaf_entry_len(klen, stored);
        if used + size > limits.capacity {
            leaves += 1;
            used = 0;
        }
        used += size;
    }
    w.flush()?;
    let first_leaf = w.next;
    let mut next_overflow = first_leaf + leaves;
    // Pass 2: leaves, with overflow values written to their run after the leaves.
    let mut built: Vec<Built> = Vec::with_capacity(leaves as usize);
    let mut node = Node::empty(0, true, role);
    let finish = |w: &mut Writer<'_>, node: &mut Node, built: &mut Vec<Built>| -> Result<()> {
        if node.is_empty() {
            return Ok(());
        }
        let page = w.node(node)?;
        built.push(Built {
            page,
            first: node.key(0).to_vec(),
            last: node.last_key().to_vec(),
        });
        *node = Node::empty(0, true, role);
        Ok(())
    };
    let mut total = 0u64;
    while let Some((k, v)) = entries()? {
        let val = if limits.inline(k.len(), v.len()) {
            Val::Inline(v)
        } else {
            let at = next_overflow;
            next_overflow += limits.overflow_pages(v.len() as u64);
            w.overflow(at, v)?;
            Val::Overflow {
                page: at,
                len: v.len() as u64,
                fresh: false,
            }
        };
        if !node.has_room(Node::leaf_entry_size(k, &val), limits.capacity) {
            finish(w, &mut node, &mut built)?;
        }
        node.push(k, val);
        total += 1;
    }
    finish(w, &mut node, &mut built)?;
    w.flush()?;
    if built.len() as u64 != leaves || total != sizes.len() as u64 {
        return Err(Error::corrupt(
            0,
            "the tree changed between the two passes of compaction",
        ));
    }
    w.next = first_leaf + leaves + overflow_pages;
    w.pending_from = w.next;
    // Branches, level by level, each after the level below.
    let mut depth = 1;
    while built.len() > 1 {
        let mut level = Vec::new();
        let mut node = Node::empty(0, false, role);
        let mut first: Vec<u8> = Vec::new();
        let mut prev_last: Vec<u8> = Vec::new();
        for child in built.iter() {
            let sep = if node.is_empty() {
                Vec::new()
            } else {
                crate::mutate::separator(&prev_last, &child.first)
            };
            if !node.has_room(Node::branch_entry_size(&sep), limits.capacity) {
                let page = w.node(&node)?;
                level.push(Built {
                    page,
                    first: std::mem::take(&mut first),
                    last: prev_last.clone(),
                });
                node = Node::empty(0, false, role);
            }
            if node.is_empty() {
                first = child.first.clone();
            }
            node.push_child(&sep, Child::Page(child.page));
            prev_last = child.last.clone();
        }
        let page = w.node(&node)?;
        level.push(Built {
            page,
            first,
            last: prev_last,
        });
        built = level;
        depth += 1;
    }
    w.flush()?;
    Ok(TreeRoot {
        root: built[0].page,
        entries: total,
        depth,
    })
}

/// Write the snapshot `rx` into a new file at `dest` (which must not exist).
pub(crate) fn copy_snapshot(
    rx: &ReadTx,
    src_bytes: u64,
    dest: &Path,
    fs: &dyn CompactionFs,
) -> Result<CompactReport> {
    if dest.exists() {
        return Err(Error::InvalidOption(format!(
            "{} already exists; compaction writes a new file",
            dest.display()
        )));
    }
    let page_size = rx.meta().page_size as usize;
    let dir = dest
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.compacting.{}", std::process::id()));
    let _ = fs.remove(&tmp);
    let result = (|| -> Result<u64> {
        // The copy's pages go into the page cache as the database's own writes would
        // (`Options::cache_folios`): the file is the database's once it is switched in.
        let opts = PagerOptions {
            page_size,
            create: true,
            cache_folios: rx.file().opts.cache_folios,
            ..PagerOptions::default()
        };
        let (pager, _) = Pager::open_wrapped(&tmp, opts, &|f, m| fs.storage(&tmp, f, m))?;
        let limits = Limits::new(page_size);
        let mut w = Writer {
            pager: &pager,
            limits,
            next: 2,
            buf: Vec::new(),
            pending_from: 2,
        };
        let view = rx.view();
        let names = rx.tree_names()?;
        let mut roots = Vec::with_capacity(names.len());
        for name in &names {
            let tree = rx.open_tree(name)?;
            let root = tree.root();
            let mut it = crate::cursor::Range::new(
                view,
                root,
                PageRole::Data,
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
            );
            let mut sizes = || -> Result<Vec<(usize, usize)>> { sized(view, root) };
            let mut next = || it.next().transpose();
            roots.push(load_tree(&mut w, PageRole::Data, &mut next, &mut sizes)?);
        }
        // The catalog: names to the new roots.
        let encoded: Vec<(Vec<u8>, [u8; 24])> = names
            .iter()
            .zip(&roots)
            .map(|(n, r)| (n.as_bytes().to_vec(), r.encode()))
            .collect();
        let mut i = 0;
        let mut next = || -> Result<Option<(&[u8], &[u8])>> {
            let r = encoded.get(i).map(|(k, v)| (k.as_slice(), &v[..]));
            i += 1;
            Ok(r)
        };
        let mut sizes = || Ok(encoded.iter().map(|(k, v)| (k.len(), v.len())).collect());
        let catalog = load_tree(&mut w, PageRole::Catalog, &mut next, &mut sizes)?;
        w.flush()?;
        let hwm = w.next;
        let meta = Meta {
            page_size: page_size as u32,
            txid: COPY_TXID,
            catalog,
            freemap: TreeRoot::default(),
            freemap_behind: false,
            high_water: hwm,
            live_pages: hwm,
            unreachable_pages: 0,
            manifest_runs: 0,
            manifest_crc: 0,
            manifest_first: 0,
            closed_at: 0,
            closed_at_crc: 0,
        };
        pager.ensure_pages(hwm)?;
        pager.truncate(hwm)?;
        pager.sync()?;
        pager.write_meta(&meta)?;
        pager.sync()?;
        Ok(hwm * page_size as u64)
    })();
    let after = match result {
        Ok(b) => b,
        Err(e) => {
            let _ = fs.remove(&tmp);
            return Err(e);
        }
    };
    // Appear at `dest` only complete: link (never replacing a file), then sync the directory.
    let linked = fs.hard_link(&tmp, dest);
    let _ = fs.remove(&tmp);
    linked.map_err(|e| Error::io("link compacted file into place", dest, e))?;
    fs.sync_dir(&dir)
        .map_err(|e| Error::io("fsync directory", &dir, e))?;
    Ok(CompactReport {
        before_bytes: src_bytes,
        after_bytes: after,
    })
}

/// (key length, value length) of every entry, in order.
fn sized(view: View<'_>, root: TreeRoot) -> Result<Vec<(usize, usize)>> {
    let mut out = Vec::with_capacity(root.entries.min(1 << 24) as usize);
    let mut stack = Vec::new();
    if root.root != 0 {
        stack.push((root.root, root.depth));
    }
    // Depth-first, children pushed in reverse so leaves come out in key order.
    let mut visited = 0u64;
    while let Some((id, level)) = stack.pop() {
        visited += 1;
        if visited > view.high_water || level == 0 {
            return Err(Error::corrupt(
                id,
                "tree walk visits more pages than the file holds (cycle?)",
            ));
        }
        let p = view.node(id, PageRole::Data)?;
        if p.leaf {
            for i in 0..p.count {
                let (k, v) = p.entry(i)?;
                let vlen = match v {
                    ValRef::Inline(b) => b.len(),
                    ValRef::Overflow { len, .. } => len as usize,
                };
                out.push((k.len(), vlen));
            }
        } else {
            for i in (0..p.count).rev() {
                stack.push((p.child(i)?, level - 1));
            }
        }
    }
    Ok(out)
}
