//! `larch check FILE [--json] [--fall-back]`: the engine's full integrity check as a verdict and an exit
//! code.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::error::{engine, CliError, CliResult};
use crate::json::Json;
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
                let msg = e.message.clone().unwrap_or_default();
                let v = Json::Obj(vec![
                    ("ok", false.into()),
                    ("error", msg.into()),
                    ("problems", Json::Arr(vec![])),
                ]);
                writeln!(out, "{}", v.render())?;
                out.flush()?;
            }
            return Err(e);
        }
    };
    if a.json {
        let problems = report
            .problems
            .iter()
            .map(|p| {
                Json::Obj(vec![
                    ("page", p.page.into()),
                    ("what", p.what.as_str().into()),
                ])
            })
            .collect();
        let v = Json::Obj(vec![
            ("ok", report.is_ok().into()),
            ("txid", report.txid.into()),
            ("reachable_pages", report.reachable_pages.into()),
            ("unreachable_pages", report.unreachable_pages.into()),
            ("notes", report.notes.clone().into()),
            ("problems", Json::Arr(problems)),
        ]);
        writeln!(out, "{}", v.render())?;
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
            writeln!(
                out,
                "txid {}: {} reachable pages, {} marked free",
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
