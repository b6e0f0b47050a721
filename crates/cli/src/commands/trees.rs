//! `larch trees FILE`: the tree names, one per line.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::error::{engine, CliResult};

/// Arguments of `larch trees`.
#[derive(Args, Debug)]
pub struct TreesArgs {
    /// Database file.
    pub file: PathBuf,
}

/// Run `larch trees`.
pub fn run(a: TreesArgs) -> CliResult {
    let db = crate::open::read_only(&a.file)?;
    let rx = db.begin_read().map_err(|e| engine(&a.file, e))?;
    let names = rx.tree_names().map_err(|e| engine(&a.file, e))?;
    let mut out = super::stdout();
    for n in names {
        writeln!(out, "{n}")?;
    }
    out.flush()?;
    Ok(())
}
