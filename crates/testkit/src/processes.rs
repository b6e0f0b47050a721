//! What the simulations of several processes and threads (tests/crash_processes.rs,
//! tests/crash_threads.rs) read beside the engine's API: the newest meta a file holds, the
//! commit the lock file names, and one tree's entries as a write or a read transaction sees
//! them.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use larch::raw::{Meta, META_SIZE};
use larch::{ReadTx, WriteTx};

/// One tree's entries.
pub type Tree = BTreeMap<Vec<u8>, Vec<u8>>;

/// The newest txid among the valid metas of the database file `file` whose pages it holds
/// (what an opener takes).
pub fn newest_meta(file: &File, page_size: usize) -> u64 {
    let len = file.metadata().unwrap().len();
    (0..2u64)
        .filter_map(|slot| {
            let mut b = vec![0u8; META_SIZE];
            file.read_exact_at(&mut b, slot * page_size as u64).ok()?;
            let m = Meta::decode(&b).ok()?;
            (m.high_water * u64::from(m.page_size) <= len).then_some(m.txid)
        })
        .max()
        .unwrap_or(0)
}

/// The newest commit the lock file of `path` names, if any: the committed txid plus one at
/// bytes 40..48 of the lock file (docs/format.md, "The lock file", "Layout"), zero for none.
pub fn published(path: &Path) -> Option<u64> {
    let b = std::fs::read(format!("{}-lock", path.display())).ok()?;
    u64::from_ne_bytes(b.get(40..48)?.try_into().ok()?).checked_sub(1)
}

/// Tree `name` as a write transaction sees it.
pub fn tree_in(tx: &WriteTx, name: &str) -> larch::Result<Tree> {
    let t = tx.open_tree(name)?;
    let mut m = Tree::new();
    for e in t.iter()? {
        let (k, v) = e?;
        m.insert(k.to_vec(), v.to_vec());
    }
    Ok(m)
}

/// Tree `name` of a snapshot (empty if it does not exist).
pub fn tree_of(rx: &ReadTx, name: &str) -> Tree {
    match rx.open_tree(name) {
        Ok(t) => t
            .iter()
            .unwrap()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.to_vec(), v.to_vec())
            })
            .collect(),
        Err(_) => Tree::new(),
    }
}

/// The database file a power cut left, opened at `dir/cut.larch` ([`open_cut`]).
pub struct Cut {
    pub db: larch::Db,
    path: std::path::PathBuf,
}

/// Write a cut's image of the database to `dir/cut.larch`, open it as a process would and
/// check it; panics with `ctx()` in the message when either fails. `id` names the file in
/// the messages.
pub fn open_cut(dir: &Path, image: &[u8], id: usize, ctx: &dyn Fn() -> String) -> Cut {
    let path = dir.join("cut.larch");
    std::fs::write(&path, image).unwrap();
    let db = larch::Db::open(&path, larch::Options::default())
        .unwrap_or_else(|e| panic!("{}: open of file {id} failed: {e}", ctx()));
    db.check()
        .unwrap_or_else(|e| panic!("{}: check failed: {e}", ctx()));
    Cut { db, path }
}

impl Cut {
    /// Tree "t" is `want` and the only tree with entries; then the database must take a
    /// new commit, and the file (and its lock file) goes. `what` names the state in the
    /// message.
    pub fn holds_then_takes_a_commit(self, want: &Tree, what: &str, ctx: &dyn Fn() -> String) {
        let mut m = crate::images::Model::new();
        m.insert("t".to_string(), want.clone());
        assert!(
            crate::images::normalize(&crate::images::contents(&self.db))
                == crate::images::normalize(&m),
            "{}: contents {what} differ from that commit's",
            ctx()
        );
        crate::images::takes_a_commit(&self.db).unwrap_or_else(|e| panic!("{}: {e}", ctx()));
        drop(self.db);
        std::fs::remove_file(&self.path).unwrap();
        let _ = std::fs::remove_file(format!("{}-lock", self.path.display()));
    }
}

/// Every cut of a log of `ops` (0 to all done), three images each (DurableOnly, Everything,
/// Random seeded by the cut and `seed`), and a fourth where the cut's last operation wrote a
/// meta: one earlier write of that file that no sync made durable yet lost whole
/// ([`crate::directory::lost_before_meta`], chosen by `seed` and the cut). The meta may name
/// the pages that write held; the open must tell from the manifest, or the meta must not
/// count. Each image is handed to `verify`; how many.
pub fn every_cut(
    ops: &[crate::directory::Op],
    page_size: usize,
    seed: u64,
    mut verify: impl FnMut(usize, crate::images::Image),
) -> usize {
    use crate::images::Image;
    let mut cuts = 0;
    for k in 0..=ops.len() {
        let pick = (k as u64 * 7919 + seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let lost = crate::directory::lost_before_meta(ops, k, page_size, pick);
        for how in [
            Some(Image::DurableOnly),
            Some(Image::Everything),
            Some(Image::Random(k as u64 * 7919 + seed)),
            lost.map(Image::AllBut),
        ]
        .into_iter()
        .flatten()
        {
            verify(k, how);
            cuts += 1;
        }
    }
    cuts
}

/// Rewrite the tail of a tree whose other keys sort below "z" (the simulations' trees): the
/// keys from "z" on go, and 30 to 120 keys of 100 to 300 bytes, tagged `tag`, come in key
/// order, appended or inserted (`rng` picks). With a small spill batch
/// (`larch::set_spill_batch`) the leaves they fill are written before the commit
/// (docs/format.md, "Pages written before the commit"). `next`, the tree's expected contents,
/// follows each change; on an error it holds what was done before it.
pub fn rewrite_tail_in_key_order(
    t: &mut larch::WriteTree<'_>,
    next: &mut Tree,
    tag: u64,
    rng: &mut crate::Rng,
) -> larch::Result<()> {
    let from: &[u8] = b"z";
    t.remove_range(from..)?;
    next.retain(|k, _| k.as_slice() < from);
    let append = rng.below(2) == 0;
    for i in 0..30 + rng.below(91) {
        let k = format!("z-{tag:020}-{i:04}").into_bytes();
        let v = vec![(tag as u8).wrapping_add(i as u8); 100 + rng.below(201) as usize];
        if append {
            t.append(&k, &v)?;
        } else {
            t.insert(&k, &v)?;
        }
        next.insert(k, v);
    }
    Ok(())
}
