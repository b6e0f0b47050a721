//! `larch readers FILE [--clear-stale] [--json]`: the reader slots of the database's lock
//! file, in every process that has it open (like `mdb_stat -r`).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use larch_engine::ReaderSlot;
use serde::Serialize;

use crate::error::{engine, CliError, CliResult};
use crate::pagefile::PageFile;

/// Arguments of `larch readers`.
#[derive(Args, Debug)]
pub struct ReadersArgs {
    /// Database file (its lock file is `FILE-lock`).
    pub file: PathBuf,
    /// First free the slots of processes that died holding them, and say how many.
    #[arg(long)]
    pub clear_stale: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The `--json` object; the keys, their order and their types are a contract.
#[derive(Serialize)]
struct ReadersJson {
    /// Slots freed by --clear-stale; null without it.
    cleared: Option<usize>,
    readers: Vec<SlotJson>,
}

/// One of `readers`.
#[derive(Serialize)]
struct SlotJson {
    slot: u32,
    pid: u32,
    txid: Option<u64>,
    age: Option<u64>,
    alive: bool,
}

fn dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// The table: one row per slot, or a line saying there is none.
fn table(out: &mut impl Write, slots: &[ReaderSlot]) -> std::io::Result<()> {
    if slots.is_empty() {
        return writeln!(out, "no reader slots in use");
    }
    writeln!(
        out,
        "{:>6}  {:>10}  {:>12}  {:>8}  alive",
        "slot", "pid", "txid", "age"
    )?;
    for r in slots {
        writeln!(
            out,
            "{:>6}  {:>10}  {:>12}  {:>8}  {}",
            r.slot,
            r.pid,
            r.txid.map_or_else(|| "idle".to_string(), |t| t.to_string()),
            dash(r.age),
            if r.alive { "yes" } else { "no (stale)" }
        )?;
    }
    Ok(())
}

/// Run `larch readers`.
pub fn run(a: ReadersArgs) -> CliResult {
    // The engine attaches to (and if need be creates) FILE-lock; do that only beside a file
    // that is a larch database.
    let meta = std::fs::metadata(&a.file)
        .map_err(|e| CliError::failed(format!("{}: {e}", a.file.display())))?;
    if !meta.is_file() {
        return Err(CliError::failed(format!(
            "{}: not a regular file",
            a.file.display()
        )));
    }
    let pf = PageFile::open(&a.file)?;
    if pf.metas.iter().all(Result::is_err) {
        return Err(CliError::failed(format!(
            "{}: not a larch database (no valid meta page)",
            a.file.display()
        )));
    }
    let cleared = if a.clear_stale {
        Some(larch_engine::clear_stale_readers(&a.file).map_err(|e| engine(&a.file, e))?)
    } else {
        None
    };
    let slots = larch_engine::readers(&a.file).map_err(|e| engine(&a.file, e))?;
    let mut out = super::stdout();
    if a.json {
        let v = ReadersJson {
            cleared,
            readers: slots
                .iter()
                .map(|r| SlotJson {
                    slot: r.slot,
                    pid: r.pid,
                    txid: r.txid,
                    age: r.age,
                    alive: r.alive,
                })
                .collect(),
        };
        crate::json::write_line(&mut out, &v)?;
    } else {
        if let Some(n) = cleared {
            writeln!(out, "cleared {n} stale reader slot(s)")?;
        }
        table(&mut out, &slots)?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::table;
    use larch_engine::ReaderSlot;

    #[test]
    fn table_rows() {
        let mut out = Vec::new();
        table(&mut out, &[]).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "no reader slots in use\n");
        let slots = [
            ReaderSlot {
                slot: 0,
                pid: 42,
                txid: Some(7),
                age: Some(2),
                alive: true,
            },
            ReaderSlot {
                slot: 3,
                pid: 43,
                txid: None,
                age: None,
                alive: false,
            },
        ];
        let mut out = Vec::new();
        table(&mut out, &slots).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0], ["slot", "pid", "txid", "age", "alive"]);
        assert_eq!(rows[1], ["0", "42", "7", "2", "yes"]);
        assert_eq!(rows[2], ["3", "43", "idle", "-", "no", "(stale)"]);
    }
}
