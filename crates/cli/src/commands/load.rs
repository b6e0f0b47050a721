//! `larch load FILE`: `HEXKEY<TAB>HEXVALUE` lines from stdin into a tree, committed in
//! batches, each commit reported on stdout as `committed <txid> <records-so-far>`.

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use larch_engine::{Db, Durability, Options, Policy, WriteMode, WriteTx};

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
    /// durable reach this many bytes; 0 never does [default: half the live data, 4 to 64 MiB].
    #[arg(long, value_name = "BYTES")]
    pub max_unsynced_bytes: Option<u64>,
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

fn load(db: &Db, a: &LoadArgs, input: &mut impl BufRead) -> CliResult {
    let path: &Path = &a.file;
    let progress = Progress::counter("load: records");
    let mut out = io::stdout().lock();
    let mut line = Vec::new();
    let (mut lineno, mut committed, mut in_batch, mut commits) = (0u64, 0u64, 0u64, 0u64);
    let mut tx: Option<WriteTx<'_>> = None;
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| CliError::failed(format!("reading stdin: {e}")))?;
        if n == 0 {
            break;
        }
        lineno += 1;
        while line.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
            line.pop();
        }
        if line.is_empty() {
            continue;
        }
        // Any error below drops `tx`, which aborts the current batch; earlier commits stay.
        let bad = |why: String| {
            CliError::failed(format!(
                "stdin line {lineno}: {why}; stopped, keeping the {committed} records committed before this batch"
            ))
        };
        let (key, value) = parse_record(&line).map_err(bad)?;
        let t = match &mut tx {
            Some(t) => t,
            None => tx.insert(db.begin_write().map_err(|e| engine(path, e))?),
        };
        t.open_tree(&a.tree.tree)
            .map_err(|e| engine(path, e))?
            .insert(&key, &value)
            .map_err(|e| bad(e.to_string()))?;
        in_batch += 1;
        progress.inc(1);
        if in_batch == a.batch {
            if let Some(t) = tx.take() {
                committed += in_batch;
                in_batch = 0;
                commits += 1;
                commit(t, committed, path, &mut out)?;
            }
        }
    }
    // End of input: commit the rest. With no records at all, still commit once so the file
    // and an empty tree exist (`dump | load` of an empty tree reproduces it).
    if in_batch > 0 || commits == 0 {
        let t = match tx.take() {
            Some(t) => t,
            None => {
                let t = db.begin_write().map_err(|e| engine(path, e))?;
                t.open_tree(&a.tree.tree).map_err(|e| engine(path, e))?;
                t
            }
        };
        commit(t, committed + in_batch, path, &mut out)?;
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
