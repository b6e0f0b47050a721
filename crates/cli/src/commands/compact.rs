//! `larch compact SRC DST` and `larch compact --in-place FILE`: rewrite a file without its
//! free pages, and print `SRC_BYTES -> DST_BYTES bytes (gain=X.XXx)`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use larch_engine::{CompactReport, Options};

use crate::error::{engine, CliError, CliResult};
use crate::progress::Progress;

/// Arguments of `larch compact`.
#[derive(Args, Debug)]
pub struct CompactArgs {
    /// Database to compact (opened read-only), or with --in-place the file to shrink.
    #[arg(value_name = "SRC")]
    pub src: PathBuf,
    /// New file to write the compacted copy to (must not exist).
    #[arg(value_name = "DST", required_unless_present = "in_place")]
    pub dst: Option<PathBuf>,
    /// Shrink SRC itself instead of writing DST: move live pages toward the head of the file
    /// and truncate the free tail.
    #[arg(long, conflicts_with = "dst")]
    pub in_place: bool,
}

/// Run `larch compact`.
pub fn run(a: CompactArgs) -> CliResult {
    let report = match &a.dst {
        Some(dst) => to_new_file(&a, dst)?,
        None => in_place(&a)?,
    };
    let mut out = super::stdout();
    writeln!(out, "{}", summary(&report))?;
    out.flush()?;
    Ok(())
}

/// The one line of output: `SRC_BYTES -> DST_BYTES bytes (gain=X.XXx)`.
fn summary(r: &CompactReport) -> String {
    format!(
        "{} -> {} bytes (gain={:.2}x)",
        r.before_bytes,
        r.after_bytes,
        r.gain()
    )
}

/// `compact SRC DST`: copy the newest commit of SRC (never modified) into DST.
fn to_new_file(a: &CompactArgs, dst: &Path) -> CliResult<CompactReport> {
    // The engine refuses too (and never replaces a file), but say it before reading SRC,
    // naming the right file.
    if dst.exists() {
        return Err(CliError::failed(format!(
            "{} already exists; compact writes a new file, so give a DST that does not exist \
             (or use --in-place to shrink SRC itself)",
            dst.display()
        )));
    }
    let db = crate::open::read_only(&a.src)?;
    let progress = Progress::spinner("compact");
    let report = db.compact_to(dst).map_err(|e| engine(&a.src, e));
    progress.finish();
    report
}

/// `compact --in-place FILE`: shrink FILE in its own commits.
fn in_place(a: &CompactArgs) -> CliResult<CompactReport> {
    // Never create a missing file; verify checksums so damage stops the compaction instead
    // of being copied into relocated pages.
    let opts = Options::default().create(false).verify_checksums(true);
    let db = crate::open::writable(&a.src, opts)?;
    let progress = Progress::spinner("compact");
    let report = db.compact().map_err(|e| engine(&a.src, e));
    progress.finish();
    report
}

#[cfg(test)]
mod tests {
    use super::summary;
    use larch_engine::CompactReport;

    #[test]
    fn summary_line() {
        let r = CompactReport {
            before_bytes: 1 << 20,
            after_bytes: 3 << 16,
        };
        assert_eq!(summary(&r), "1048576 -> 196608 bytes (gain=5.33x)");
        let same = CompactReport {
            before_bytes: 8192,
            after_bytes: 8192,
        };
        assert_eq!(summary(&same), "8192 -> 8192 bytes (gain=1.00x)");
    }
}
