//! `larch pages FILE [--json]`: one row per page of the newest commit.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use larch_engine::{Db, ReadTx};
use serde::Serialize;

use crate::error::{engine, CliError, CliResult};
use crate::layout::{self, Layout, Row};
use crate::pagefile::PageFile;

/// Arguments of `larch pages`.
#[derive(Args, Debug)]
pub struct PagesArgs {
    /// Database file.
    pub file: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A commit's page map, with the read-only handle and snapshot that keep its pages in place.
pub struct Snapshot {
    /// The file, its metas as read once the snapshot was held.
    pub pf: PageFile,
    /// The walk of the snapshot's commit.
    pub layout: Layout,
    /// Held while the caller reads pages: a writer in another process never reuses a page the
    /// snapshot reaches while it is held (docs/format.md, "The two invariants").
    _rx: ReadTx,
    _db: Db,
}

/// How many snapshots [`layout_of`] tries before giving up on a writer that keeps outrunning it.
const ATTEMPTS: usize = 1000;

/// Open `path` read-only (its lock, and the engine's verdict on the metas), take a snapshot
/// and walk its commit. On a live file (another process writing) the snapshot is held through
/// the walk, so every page the walk reads stays as that commit wrote it; the commit's meta is
/// read from its slot, and if the writer has since reused that slot (two commits later), a
/// newer snapshot is taken.
pub fn layout_of(path: &Path) -> CliResult<Snapshot> {
    let db = crate::open::read_only(path)?;
    let mut prev = None;
    for _ in 0..ATTEMPTS {
        let rx = db.begin_read().map_err(|e| engine(path, e))?;
        let txid = rx.txid();
        let pf = PageFile::open(path)?;
        if let Some(meta) = pf.meta_of(txid) {
            let layout = layout::walk(&pf, meta);
            return Ok(Snapshot {
                pf,
                layout,
                _rx: rx,
                _db: db,
            });
        }
        // Only a writer that committed since can have moved the slot on; with no newer
        // commit, retrying would read the same file.
        if prev.is_some_and(|p| p >= txid) {
            return Err(CliError::failed(format!(
                "{}: no meta slot holds txid {txid}, which the engine opened",
                path.display()
            )));
        }
        prev = Some(txid);
    }
    Err(CliError::failed(format!(
        "{}: the writer overwrote the meta of {ATTEMPTS} snapshots in a row before they \
         could be read; try again",
        path.display()
    )))
}

fn dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn crc_name(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "ok",
        Some(false) => "BAD",
        None => "-",
    }
}

/// The `--json` object; the keys, their order and their types are a contract.
#[derive(Serialize)]
struct PagesJson<'a> {
    page_size: usize,
    txid: u64,
    high_water: u64,
    file_pages: u64,
    pages: Vec<PageJson<'a>>,
    problems: &'a [String],
}

/// One of `pages`.
#[derive(Serialize)]
struct PageJson<'a> {
    id: usize,
    #[serde(rename = "type")]
    kind: &'static str,
    tree: Option<&'static str>,
    name: Option<&'a str>,
    txid: Option<u64>,
    count: Option<u64>,
    overflow_len: Option<u64>,
    crc_ok: Option<bool>,
}

/// Run `larch pages`.
pub fn run(a: PagesArgs) -> CliResult {
    let snap = layout_of(&a.file)?;
    let (pf, l) = (&snap.pf, &snap.layout);
    let tree_name = |r: &Row| r.tree.and_then(|i| l.trees.get(i)).cloned();
    let mut out = super::stdout();
    if a.json {
        let v = PagesJson {
            page_size: pf.page_size,
            txid: l.meta.txid,
            high_water: l.meta.high_water,
            file_pages: pf.pages(),
            pages: l
                .rows
                .iter()
                .enumerate()
                .map(|(id, r)| PageJson {
                    id,
                    kind: r.kind.name(),
                    tree: r.role.map(|x| x.name()),
                    name: r.tree.and_then(|i| l.trees.get(i)).map(String::as_str),
                    txid: r.txid,
                    count: r.count,
                    overflow_len: r.overflow_len,
                    crc_ok: r.crc_ok,
                })
                .collect(),
            problems: &l.problems,
        };
        crate::json::write_line(&mut out, &v)?;
    } else {
        writeln!(
            out,
            "{:>10}  {:<13}  {:<7}  {:>10}  {:>5}  {:>10}  {:<3}  name",
            "id", "type", "tree", "txid", "count", "overflow", "crc"
        )?;
        for (id, r) in l.rows.iter().enumerate() {
            writeln!(
                out,
                "{:>10}  {:<13}  {:<7}  {:>10}  {:>5}  {:>10}  {:<3}  {}",
                id,
                r.kind.name(),
                r.role.map_or("-", |x| x.name()),
                dash(r.txid),
                dash(r.count),
                dash(r.overflow_len),
                crc_name(r.crc_ok),
                tree_name(r).unwrap_or_else(|| "-".into()),
            )?;
        }
    }
    out.flush()?;
    if l.problems.is_empty() {
        return Ok(());
    }
    if !a.json {
        for p in &l.problems {
            eprintln!("larch: {p}");
        }
    }
    Err(CliError::failed(format!(
        "{}: the page walk found {} problem(s); run `larch check` for the full verdict",
        a.file.display(),
        l.problems.len()
    )))
}
