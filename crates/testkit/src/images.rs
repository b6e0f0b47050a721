//! Power-cut images: what a disk may hold after a cut that follows the first `k` operations
//! of a [`Recording`](crate::recording::Recording)'s log, and what a recovered database must
//! then show. Everything up to the last completed sync is on the disk; what came after it
//! lands as the [`Image`] says, but for a durable write ([`IoOp::DurableWrite`]), which is
//! on the disk whole in every image once it returned. A sync on another thread counts from
//! its start once it is done ([`durable_prefix`]).

use std::collections::BTreeMap;

use larch::{Db, Durability};

use crate::recording::IoOp;
use crate::{apply, apply_some, Rng};

/// Trees by name, each its entries.
pub type Model = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// Which of the operations after the last sync reached the disk.
#[derive(Clone, Copy, Debug)]
pub enum Image {
    /// Nothing after the last sync reached the disk.
    DurableOnly,
    /// Every write reached the disk.
    Everything,
    /// Each 4 KiB block of each later write: lost, written, torn (a prefix), or one sector;
    /// each later resize done or not (seeded by the number).
    Random(u64),
    /// Every later write but the one at this index of the log (lost whole). A durable write
    /// is lost only as the last operation of the cut (the one the cut interrupted).
    AllBut(usize),
    /// Every later write, the one at this index torn: only its first 64 bytes (half a meta).
    /// A durable write is torn only as the last operation of the cut.
    Torn(usize),
    /// Every later write, but one page (of the file's page size) of the multi-page write at
    /// this index: (op index, page within the write).
    AllButPage(usize, usize),
}

/// The file a cut after the first `k` of `ops` leaves, starting from `initial` (the file
/// before the log began). `page_size` is used only by [`Image::AllButPage`].
pub fn image_at(initial: &[u8], ops: &[IoOp], k: usize, how: Image, page_size: usize) -> Vec<u8> {
    let mut rng = Rng(match how {
        Image::Random(seed) => seed | 1,
        _ => 1,
    });
    let mut img = initial.to_vec();
    land(&mut img, &ops[..k], how, page_size, &mut rng);
    img
}

/// Apply `ops` (the whole log up to the cut) to `img` as [`image_at`] does, drawing the random
/// choices of [`Image::Random`] from `rng` (its seed is not used here), for a simulation that
/// builds several files from one seed.
pub fn land(img: &mut Vec<u8>, ops: &[IoOp], how: Image, page_size: usize, rng: &mut Rng) {
    let durable_end = durable_prefix(ops);
    for op in &ops[..durable_end] {
        match op {
            IoOp::Write { off, data } | IoOp::DurableWrite { off, data } => apply(img, *off, data),
            IoOp::SetLen(len) => img.resize(*len as usize, 0),
            IoOp::Sync | IoOp::SyncStart(_) | IoOp::SyncEnd(_) => {}
        }
    }
    for (i, op) in ops[durable_end..].iter().enumerate() {
        let at = durable_end + i;
        match (op, how) {
            // Durable by itself once it returned, over whatever earlier writes to its range
            // did land. The last operation of a cut may be the one the cut interrupted: as
            // that, `AllBut` and `Torn` may lose or tear it.
            (IoOp::DurableWrite { off, data }, how) => match how {
                Image::AllBut(j) if j == at && at + 1 == ops.len() => {}
                Image::Torn(j) if j == at && at + 1 == ops.len() => {
                    apply(img, *off, &data[..64.min(data.len())])
                }
                _ => apply(img, *off, data),
            },
            (_, Image::DurableOnly) | (IoOp::Sync | IoOp::SyncStart(_) | IoOp::SyncEnd(_), _) => {}
            (IoOp::Write { off, data }, Image::Everything) => apply(img, *off, data),
            (IoOp::Write { off, data }, Image::AllBut(j)) => {
                if at != j {
                    apply(img, *off, data)
                }
            }
            (IoOp::Write { off, data }, Image::Torn(j)) => {
                if at == j {
                    apply(img, *off, &data[..64.min(data.len())])
                } else {
                    apply(img, *off, data)
                }
            }
            (IoOp::Write { off, data }, Image::AllButPage(j, page)) => {
                if at == j {
                    for (n, chunk) in data.chunks(page_size).enumerate() {
                        if n != page {
                            apply(img, off + (n * page_size) as u64, chunk);
                        }
                    }
                } else {
                    apply(img, *off, data)
                }
            }
            (IoOp::Write { off, data }, Image::Random(_)) => apply_some(img, *off, data, rng),
            (IoOp::SetLen(len), Image::Random(_)) => {
                if rng.below(2) == 0 {
                    img.resize(*len as usize, 0);
                }
            }
            (
                IoOp::SetLen(len),
                Image::Everything | Image::AllBut(_) | Image::Torn(_) | Image::AllButPage(..),
            ) => img.resize(*len as usize, 0),
        }
    }
}

/// How many of `ops` (a log up to a cut) are durable: those before the start of the last
/// sync that completed, a foreground one ([`IoOp::Sync`], logged when it returned) or one on
/// another thread ([`IoOp::SyncStart`] whose [`IoOp::SyncEnd`] is in `ops`).
pub fn durable_prefix(ops: &[IoOp]) -> usize {
    let mut end = ops
        .iter()
        .rposition(|o| matches!(o, IoOp::Sync))
        .map_or(0, |i| i + 1);
    let mut started = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        match op {
            IoOp::SyncStart(id) => {
                started.insert(*id, i);
            }
            IoOp::SyncEnd(id) => {
                if let Some(&s) = started.get(id) {
                    end = end.max(s + 1);
                }
            }
            _ => {}
        }
    }
    end
}

/// The oldest txid a cut after `k` ops may show, given the acknowledged commits as (ops done
/// when the call returned, txid, durability asked for): a Sync commit once acknowledged, a
/// NoMetaSync one once a later sync completed; Async ones never on their own. The
/// acknowledgements need not be in order (racing threads).
pub fn min_durable(acks: &[(usize, u64, Durability)], ops: &[IoOp], k: usize) -> u64 {
    let mut min = 0;
    for &(done, txid, d) in acks {
        if done > k {
            continue;
        }
        let durable = match d {
            Durability::Sync => true,
            // A sync that started after it was acknowledged completed.
            Durability::NoMetaSync => durable_prefix(&ops[..k]) > done,
            Durability::Async => false,
        };
        if durable {
            min = min.max(txid);
        }
    }
    min
}

/// Every tree's entries, by a full scan; panics if a tree's `len()` disagrees with its scan.
pub fn contents(db: &Db) -> Model {
    reader_contents(&db.begin_read().unwrap())
}

/// Every tree of a read transaction's snapshot, scanned whole.
pub fn reader_contents(rx: &larch::ReadTx) -> Model {
    let mut m = Model::new();
    for name in rx.tree_names().unwrap() {
        let t = rx.open_tree(&name).unwrap();
        let entries: BTreeMap<Vec<u8>, Vec<u8>> = t
            .iter()
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("scan of {name:?} failed: {e}"));
        assert_eq!(
            t.len().unwrap(),
            entries.len() as u64,
            "len() of {name:?} disagrees with a scan"
        );
        m.insert(name, entries);
    }
    m
}

/// Trees that exist but are empty compare equal to trees that do not exist.
pub fn normalize(m: &Model) -> Model {
    m.iter()
        .filter(|(_, t)| !t.is_empty())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A recovered database must also take a new commit and check clean after it; Err says which
/// step failed.
pub fn takes_a_commit(db: &Db) -> Result<(), String> {
    let tx = db.begin_write().map_err(|e| format!("begin_write: {e}"))?;
    tx.open_tree("after-crash")
        .map_err(|e| format!("open_tree: {e}"))?
        .insert(b"k", b"v")
        .map_err(|e| format!("insert: {e}"))?;
    tx.commit()
        .map_err(|e| format!("commit after recovery: {e}"))?;
    db.check()
        .map_err(|e| format!("check after a new commit failed: {e}"))
}
