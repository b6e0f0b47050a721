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

/// Which commit of SRC the copy holds: the snapshot `Db::compact_to` takes is the newest when
/// it begins, so it lies between the newest commit before the call and the newest after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Copied {
    /// Newest commit just before the copy began.
    from: u64,
    /// Newest commit just after it ended (equal to `from` when nothing was committed).
    to: u64,
    /// Bytes of the copy.
    bytes: u64,
}

/// The summary line: `copied txid N: X bytes`, or the range of commits the snapshot lies in
/// when a writer committed during the copy.
fn summary(c: &Copied) -> String {
    if c.from == c.to {
        format!("copied txid {}: {} bytes", c.from, c.bytes)
    } else {
        format!(
            "copied txid {}..={} (one snapshot; the writer committed during the copy): {} bytes",
            c.from, c.to, c.bytes
        )
    }
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
    let newest = || -> CliResult<u64> { Ok(db.begin_read().map_err(|e| engine(src, e))?.txid()) };
    let from = newest()?;
    let progress = Progress::spinner("copy");
    let report = db.compact_to(dst).map_err(|e| engine(src, e));
    progress.finish();
    let report = report?;
    let to = newest()?;
    Ok(Copied {
        from,
        to,
        bytes: report.after_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::{summary, Copied};

    #[test]
    fn summary_line() {
        let c = Copied {
            from: 7,
            to: 7,
            bytes: 8192,
        };
        assert_eq!(summary(&c), "copied txid 7: 8192 bytes");
        let c = Copied { to: 9, ..c };
        assert_eq!(
            summary(&c),
            "copied txid 7..=9 (one snapshot; the writer committed during the copy): 8192 bytes"
        );
    }
}
