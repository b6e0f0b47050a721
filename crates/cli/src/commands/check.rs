//! `larch check FILE [--json] [--fall-back]`: the engine's full integrity check as a verdict and an exit
//! code.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::error::{engine, CliError, CliResult};
use crate::progress::Progress;

/// Arguments of `larch check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Database file.
    pub file: PathBuf,
    /// Print one JSON object instead of lines.
    #[arg(long)]
    pub json: bool,
    /// If the newest commit was durable but its pages are damaged, check the commit before
    /// it instead, and report the newest as discarded (the check still fails).
    #[arg(long)]
    pub fall_back: bool,
}

/// The `--json` object of a file that was checked; the keys, their order and their types are
/// a contract.
#[derive(Serialize)]
struct CheckJson<'a> {
    ok: bool,
    txid: u64,
    reachable_pages: u64,
    unreachable_pages: u64,
    notes: &'a [String],
    problems: Vec<ProblemJson<'a>>,
}

/// One of `problems`.
#[derive(Serialize)]
struct ProblemJson<'a> {
    page: Option<u64>,
    what: &'a str,
}

/// The `--json` object of a file that could not be opened.
#[derive(Serialize)]
struct OpenFailedJson {
    ok: bool,
    error: String,
    /// Always empty: the same key as a checked file's, for scripts.
    problems: Vec<ProblemJson<'static>>,
}

/// Run `larch check`.
pub fn run(a: CheckArgs) -> CliResult {
    let progress = Progress::spinner("check");
    let opts = larch_engine::Options::default().fall_back_on_damage(a.fall_back);
    let report = crate::open::read_only_with(&a.file, opts)
        .and_then(|db| db.check_report().map_err(|e| engine(&a.file, e)));
    progress.finish();
    let mut out = super::stdout();
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            // A file that cannot even be opened is damage too. With --json, scripts still get
            // an object to read.
            if a.json {
                let v = OpenFailedJson {
                    ok: false,
                    error: e.message.clone().unwrap_or_default(),
                    problems: Vec::new(),
                };
                crate::json::write_line(&mut out, &v)?;
                out.flush()?;
            }
            return Err(e);
        }
    };
    if a.json {
        let v = CheckJson {
            ok: report.is_ok(),
            txid: report.txid,
            reachable_pages: report.reachable_pages,
            unreachable_pages: report.unreachable_pages,
            notes: &report.notes,
            problems: report
                .problems
                .iter()
                .map(|p| ProblemJson {
                    page: p.page,
                    what: &p.what,
                })
                .collect(),
        };
        crate::json::write_line(&mut out, &v)?;
    } else {
        if report.is_ok() {
            writeln!(out, "ok")?;
        }
        for p in &report.problems {
            writeln!(out, "{p}")?;
        }
        for n in &report.notes {
            writeln!(out, "note: {n}")?;
        }
        if report.is_ok() {
            let free = if report.freemap_behind {
                "unreachable (found by the walk: the free map is behind this commit)"
            } else {
                "marked free"
            };
            writeln!(
                out,
                "txid {}: {} reachable pages, {} {free}",
                report.txid, report.reachable_pages, report.unreachable_pages
            )?;
        }
    }
    out.flush()?;
    if report.is_ok() {
        Ok(())
    } else {
        Err(CliError::failed(format!(
            "{}: check found {} problem(s)",
            a.file.display(),
            report.problems.len()
        )))
    }
}
