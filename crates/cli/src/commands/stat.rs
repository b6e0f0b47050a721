//! `larch stat FILE [--tree NAME] [--json]`: the shape of each tree, like mdb_stat.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::error::{engine, CliError, CliResult};

/// Arguments of `larch stat`.
#[derive(Args, Debug)]
pub struct StatArgs {
    /// Database file.
    pub file: PathBuf,
    /// Only this tree (default: every tree).
    #[arg(long, value_name = "NAME")]
    pub tree: Option<String>,
    /// Print one JSON object instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// The `--json` object; the keys, their order and their types are a contract.
#[derive(Serialize)]
struct StatJson<'a> {
    page_size: usize,
    txid: u64,
    trees: Vec<TreeJson<'a>>,
}

/// One of `trees`.
#[derive(Serialize)]
struct TreeJson<'a> {
    name: &'a str,
    depth: u32,
    branch_pages: u64,
    leaf_pages: u64,
    overflow_pages: u64,
    entries: u64,
    used_bytes: u64,
    fill: f64,
}

/// Run `larch stat`.
pub fn run(a: StatArgs) -> CliResult {
    let db = crate::open::read_only(&a.file)?;
    let s = db.stats().map_err(|e| engine(&a.file, e))?;
    let trees: Vec<_> = s
        .trees
        .iter()
        .filter(|t| a.tree.as_ref().is_none_or(|n| *n == t.name))
        .collect();
    if let (Some(name), true) = (&a.tree, trees.is_empty()) {
        return Err(CliError::failed(format!(
            "{}: tree {name:?} does not exist",
            a.file.display()
        )));
    }
    let mut out = super::stdout();
    if a.json {
        let v = StatJson {
            page_size: s.page_size,
            txid: s.txid,
            trees: trees
                .iter()
                .map(|t| TreeJson {
                    name: &t.name,
                    depth: t.depth,
                    branch_pages: t.branch_pages,
                    leaf_pages: t.leaf_pages,
                    overflow_pages: t.overflow_pages,
                    entries: t.entries,
                    used_bytes: t.used_bytes,
                    fill: t.fill(s.page_size),
                })
                .collect(),
        };
        crate::json::write_line(&mut out, &v)?;
    } else {
        writeln!(out, "page size: {}", s.page_size)?;
        for t in trees {
            writeln!(out, "tree {:?}", t.name)?;
            writeln!(out, "  depth: {}", t.depth)?;
            writeln!(out, "  branch pages: {}", t.branch_pages)?;
            writeln!(out, "  leaf pages: {}", t.leaf_pages)?;
            writeln!(out, "  overflow pages: {}", t.overflow_pages)?;
            writeln!(out, "  entries: {}", t.entries)?;
            writeln!(out, "  fill: {:.1}%", t.fill(s.page_size) * 100.0)?;
        }
    }
    out.flush()?;
    Ok(())
}
