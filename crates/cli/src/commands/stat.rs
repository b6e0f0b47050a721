//! `larch stat FILE [--tree NAME] [--json]`: the shape of each tree, like mdb_stat.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::error::{engine, CliError, CliResult};
use crate::json::Json;

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
        let rows = trees
            .iter()
            .map(|t| {
                Json::Obj(vec![
                    ("name", t.name.as_str().into()),
                    ("depth", t.depth.into()),
                    ("branch_pages", t.branch_pages.into()),
                    ("leaf_pages", t.leaf_pages.into()),
                    ("overflow_pages", t.overflow_pages.into()),
                    ("entries", t.entries.into()),
                    ("used_bytes", t.used_bytes.into()),
                    ("fill", t.fill(s.page_size).into()),
                ])
            })
            .collect();
        let v = Json::Obj(vec![
            ("page_size", s.page_size.into()),
            ("txid", s.txid.into()),
            ("trees", Json::Arr(rows)),
        ]);
        writeln!(out, "{}", v.render())?;
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
