//! `larch copy SRC DST|-`: a hot backup, one snapshot of SRC written compacted to a new file
//! or to stdout (like `mdb_copy -c`), and one line saying which commit it holds.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;

use crate::error::{engine, CliError, CliResult};
use crate::progress::Progress;

/// Arguments of `larch copy`.
#[derive(Args, Debug)]
pub struct CopyArgs {
    /// Database to copy (opened read-only; another process may be writing it).
    #[arg(value_name = "SRC")]
    pub src: PathBuf,
    /// New file to write the copy to (must not exist), or `-` for stdout.
    #[arg(value_name = "DST")]
    pub dst: PathBuf,
}

/// What was copied: one snapshot of SRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Copied {
    /// The commit the copy holds.
    txid: u64,
    /// Bytes of the copy.
    bytes: u64,
}

/// The summary line: `copied txid N: X bytes`.
fn summary(c: &Copied) -> String {
    format!("copied txid {}: {} bytes", c.txid, c.bytes)
}

/// Run `larch copy`.
pub fn run(a: CopyArgs) -> CliResult {
    let to_stdout = a.dst.as_os_str() == "-";
    if to_stdout && std::io::stdout().is_terminal() {
        return Err(CliError::usage(
            "copy SRC - writes a database file to stdout; redirect it to a file or a pipe",
        ));
    }
    if !to_stdout && (a.dst.exists() || a.dst.is_symlink()) {
        return Err(CliError::failed(format!(
            "{} already exists; copy writes a new file, so give a DST that does not exist",
            a.dst.display()
        )));
    }
    let db = crate::open::read_only(&a.src)?;
    if to_stdout {
        // compact_to writes a file (synced, then linked into place), so the copy goes to a
        // temporary directory first, removed when this returns, failed or not.
        let tmp = super::TempDir::new("copy")?;
        let file = tmp.path().join("copy.larch");
        let c = copy(&db, &a.src, &file)?;
        let mut src = std::fs::File::open(&file).map_err(|e| {
            CliError::failed(format!("{}: cannot read the copy: {e}", file.display()))
        })?;
        let mut out = std::io::stdout().lock();
        std::io::copy(&mut src, &mut out)?;
        out.flush()?;
        // The data is on stdout; the summary goes to stderr.
        eprintln!("{}", summary(&c));
    } else {
        let c = copy(&db, &a.src, &a.dst)?;
        let mut out = super::stdout();
        writeln!(out, "{}", summary(&c))?;
        out.flush()?;
    }
    Ok(())
}

/// Copy the newest snapshot of `db` (opened from `src`) to the new file `dst`.
fn copy(db: &larch_engine::Db, src: &Path, dst: &Path) -> CliResult<Copied> {
    // Hold the snapshot: the copy is exactly this commit, whatever the writer does meanwhile.
    let rx = db.begin_read().map_err(|e| engine(src, e))?;
    let progress = Progress::spinner("copy");
    let report = rx.compact_to(dst).map_err(|e| engine(src, e));
    progress.finish();
    let report = report?;
    Ok(Copied {
        txid: rx.txid(),
        bytes: report.after_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::{summary, Copied};

    #[test]
    fn summary_line() {
        let c = Copied {
            txid: 7,
            bytes: 8192,
        };
        assert_eq!(summary(&c), "copied txid 7: 8192 bytes");
    }
}
