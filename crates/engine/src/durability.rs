//! When a commit's meta is written and synced, per durability (docs/format.md, "Commit
//! protocol"). The rule that keeps a fallback: the meta slot being written never holds the
//! last durable meta.

use larch_pager::{ManifestRun, Meta};

use crate::db::{Inner, WriterState};
use crate::error::Result;
use crate::options::Durability;

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

/// Finish a commit whose pages are written: sync and write the meta as `d` asks.
pub(crate) fn commit_meta(
    db: &Inner,
    w: &mut WriterState,
    prev: Meta,
    meta: Meta,
    d: Durability,
    manifest: &[ManifestRun],
) -> Result<()> {
    // One fdatasync covers pages and meta when recovery can check the pages (the manifest)
    // and fall back to the previous commit, which must itself be durable already.
    let one_fsync = d == Durability::Sync
        && db.opts.one_fsync
        && !manifest.is_empty()
        && w.durable == prev.txid
        && w.meta_unsynced.is_none();
    match d {
        Durability::Sync if one_fsync => {
            w.meta_written = w.meta_written.max(meta.txid);
            db.pager.write_meta_with_manifest(&meta, manifest)?;
            db.pager.sync()?;
            w.durable = meta.txid;
            db.trim_file(meta.high_water);
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
            }
        }
    }
    w.previous = prev;
    w.committed = meta;
    Ok(())
}

/// Make the newest commit durable (`Db::sync`, close).
pub(crate) fn sync_all(db: &Inner, w: &mut WriterState) -> Result<()> {
    if w.committed.txid == w.durable {
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
    Ok(())
}
