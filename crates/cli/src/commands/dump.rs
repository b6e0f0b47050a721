//! `larch dump FILE [--tree NAME]`: every record as `HEXKEY<TAB>HEXVALUE`, in key order.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::error::{engine, CliResult};
use crate::progress::Progress;
use crate::TreeArg;

/// Arguments of `larch dump`.
#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Database file.
    pub file: PathBuf,
    #[command(flatten)]
    pub tree: TreeArg,
}

/// Run `larch dump`.
pub fn run(a: DumpArgs) -> CliResult {
    let db = crate::open::read_only(&a.file)?;
    let rx = db.begin_read().map_err(|e| engine(&a.file, e))?;
    let tree = rx.open_tree(&a.tree.tree).map_err(|e| engine(&a.file, e))?;
    let progress = Progress::bar(tree.len().map_err(|e| engine(&a.file, e))?, "dump");
    let mut out = super::stdout();
    let mut line = Vec::new();
    for entry in tree.iter().map_err(|e| engine(&a.file, e))? {
        let (k, v) = entry.map_err(|e| engine(&a.file, e))?;
        line.clear();
        crate::hex::encode_into(k, &mut line);
        line.push(b'\t');
        crate::hex::encode_into(v, &mut line);
        line.push(b'\n');
        out.write_all(&line)?;
        progress.inc(1);
    }
    out.flush()?;
    Ok(())
}
