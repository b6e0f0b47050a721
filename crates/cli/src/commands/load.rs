//! `larch load FILE`: `HEXKEY<TAB>HEXVALUE` lines from stdin into a tree, committed in
//! batches, each commit reported on stdout as `committed <txid> <records-so-far>`. With
//! `--sorted`, records are appended at the end of the tree (`WriteTree::append`).

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use larch_engine::{Db, Durability, Error, Options, Policy, WriteMode, WriteTx};

use crate::error::{engine, CliError, CliResult};
use crate::progress::Progress;
use crate::TreeArg;

/// Arguments of `larch load`.
#[derive(Args, Debug)]
pub struct LoadArgs {
    /// Database file (created if missing).
    pub file: PathBuf,
    #[command(flatten)]
    pub tree: TreeArg,
    /// Commit after this many records (and at the end of input).
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// When each commit becomes durable [default: sync].
    #[arg(long, value_name = "MODE", value_parser = crate::durability_parser())]
    pub durability: Option<Durability>,
    /// Free-space policy [default: first-fit].
    #[arg(long, value_name = "POLICY", value_parser = crate::policy_parser())]
    pub policy: Option<Policy>,
    /// Page size of a new file (an existing file keeps its own) [default: 4096].
    #[arg(long, value_name = "BYTES", value_parser = crate::parse_page_size)]
    pub page_size: Option<usize>,
    /// How dirty pages reach the file [default: pwrite].
    #[arg(long, value_name = "MODE", value_parser = crate::write_mode_parser())]
    pub write_mode: Option<WriteMode>,
    /// Make an async or nometasync commit durable once the pages replaced by commits not yet
    /// durable reach this many bytes; 0 never does [default: an eighth of the live data, 2 to 16 MiB].
    #[arg(long, value_name = "BYTES")]
    pub max_unsynced_bytes: Option<u64>,
    /// The input is in strictly ascending key order, above every key already in the tree:
    /// add each record at the end of the tree (`WriteTree::append`) instead of searching for
    /// its place. An out-of-order key stops the load, naming its line.
    #[arg(long)]
    pub sorted: bool,
}

/// Split and decode one input line (without its line ending).
fn parse_record(line: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    let tab = line
        .iter()
        .position(|&b| b == b'\t')
        .ok_or("expected HEXKEY<TAB>HEXVALUE, found no tab")?;
    let key = crate::hex::decode(&line[..tab]).map_err(|e| format!("key: {e}"))?;
    let value = crate::hex::decode(&line[tab + 1..]).map_err(|e| format!("value: {e}"))?;
    if key.is_empty() {
        return Err("the key is empty (keys must be at least one byte)".into());
    }
    Ok((key, value))
}

/// Run `larch load`.
pub fn run(a: LoadArgs) -> CliResult {
    let mut opts = Options::default();
    if let Some(d) = a.durability {
        opts = opts.durability(d);
    }
    if let Some(p) = a.policy {
        opts = opts.policy(p);
    }
    if let Some(ps) = a.page_size {
        opts = opts.page_size(ps);
    }
    if let Some(m) = a.write_mode {
        opts = opts.write_mode(m);
    }
    if let Some(b) = a.max_unsynced_bytes {
        opts = opts.max_unsynced_bytes((b > 0).then_some(b));
    }
    let db = crate::open::writable(&a.file, opts)?;
    if let Some(ps) = a.page_size.filter(|&ps| ps != db.page_size()) {
        eprintln!(
            "larch: note: {} already has page size {}; --page-size {ps} applies only to new files",
            a.file.display(),
            db.page_size()
        );
    }
    let result = load(&db, &a, &mut io::stdin().lock());
    // Async and NoMetaSync commits become durable here; report a failure rather than let
    // the close swallow it. After a malformed line, this keeps the earlier commits.
    let synced = db.sync().map_err(|e| engine(&a.file, e));
    result.and(synced)
}

/// The next record of the input, or None at its end; blank lines are skipped. `lineno`
/// counts the lines read.
fn next_record(
    input: &mut impl BufRead,
    line: &mut Vec<u8>,
    lineno: &mut u64,
    committed: u64,
) -> CliResult<Option<(Vec<u8>, Vec<u8>)>> {
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', line)
            .map_err(|e| CliError::failed(format!("reading stdin: {e}")))?;
        if n == 0 {
            return Ok(None);
        }
        *lineno += 1;
        while line.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
            line.pop();
        }
        if !line.is_empty() {
            return parse_record(line)
                .map(Some)
                .map_err(|why| bad_line(*lineno, committed, why));
        }
    }
}

/// An input line that stops the load. The error drops the open transaction, which aborts the
/// current batch; earlier commits stay.
fn bad_line(lineno: u64, committed: u64, why: String) -> CliError {
    CliError::failed(format!(
        "stdin line {lineno}: {why}; stopped, keeping the {committed} records committed before this batch"
    ))
}

/// Why a record could not be added, in the terms of the input.
fn refused(e: Error) -> String {
    match e {
        Error::KeyNotGreater { key, last } => format!(
            "--sorted: key {} is not greater than the last key {} (the input must be in strictly ascending key order, and above every key already in the tree)",
            crate::hex::encode(&key),
            crate::hex::encode(&last)
        ),
        e => e.to_string(),
    }
}

fn load(db: &Db, a: &LoadArgs, input: &mut impl BufRead) -> CliResult {
    let path: &Path = &a.file;
    let progress = Progress::counter("load: records");
    let mut out = io::stdout().lock();
    let mut line = Vec::new();
    let (mut lineno, mut committed, mut commits) = (0u64, 0u64, 0u64);
    // Read before the transaction begins, so the writer lock is not held while stdin waits.
    let mut pending = next_record(input, &mut line, &mut lineno, committed)?;
    // With no records at all, still commit once so the file and an empty tree exist
    // (`dump | load` of an empty tree reproduces it).
    while pending.is_some() || commits == 0 {
        let tx = db.begin_write().map_err(|e| engine(path, e))?;
        let mut in_batch = 0u64;
        {
            // One handle per batch: `append` keeps the tree's rightmost path in it.
            let mut t = tx.open_tree(&a.tree.tree).map_err(|e| engine(path, e))?;
            while let Some((key, value)) = pending.take() {
                if a.sorted {
                    t.append(&key, &value)
                } else {
                    t.insert(&key, &value)
                }
                .map_err(|e| bad_line(lineno, committed, refused(e)))?;
                in_batch += 1;
                progress.inc(1);
                if in_batch == a.batch {
                    break;
                }
                pending = next_record(input, &mut line, &mut lineno, committed)?;
            }
        }
        committed += in_batch;
        commits += 1;
        commit(tx, committed, path, &mut out)?;
        if in_batch == a.batch {
            pending = next_record(input, &mut line, &mut lineno, committed)?;
        }
    }
    progress.finish();
    Ok(())
}

fn commit(tx: WriteTx<'_>, so_far: u64, path: &Path, out: &mut impl Write) -> CliResult {
    let txid = tx.txid();
    tx.commit().map_err(|e| engine(path, e))?;
    // Flushed at once: a script following the load sees each commit as it lands.
    writeln!(out, "committed {txid} {so_far}")?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_record;

    #[test]
    fn parses_and_rejects() {
        assert_eq!(parse_record(b"6B\t").unwrap(), (vec![0x6b], vec![]));
        assert_eq!(parse_record(b"00\tff01").unwrap(), (vec![0], vec![0xff, 1]));
        assert!(parse_record(b"00").unwrap_err().contains("no tab"));
        assert!(parse_record(b"\t00").unwrap_err().contains("empty"));
        assert!(parse_record(b"0g\t00").unwrap_err().starts_with("key:"));
        assert!(parse_record(b"00\t00\t00")
            .unwrap_err()
            .starts_with("value:"));
    }
}
