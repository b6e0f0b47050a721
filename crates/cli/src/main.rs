//! `larch`: inspect, check, dump and load, edit, compact and benchmark a larch database file.
//!
//! This file holds the command line (clap) and the dispatch; each subcommand lives in
//! `commands/`. Exit codes are a contract (see `error.rs`): 0 success, 1 failure or a problem
//! found, 2 usage error.

#![forbid(unsafe_code)]

mod commands;
mod error;
mod hex;
mod json;
mod layout;
mod open;
mod pagefile;
mod progress;

use std::process::ExitCode;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use larch_engine::{Durability, Policy, WriteMode};

use crate::error::CliError;

const ABOUT: &str = "Inspect, check, dump/load, edit, compact and benchmark larch database files";

const LONG_ABOUT: &str = "\
Inspect, check, dump/load, edit, compact and benchmark larch database files.

Exit codes: 0 success; 1 the operation failed or found a problem (corrupt file, key or tree
not found, check found damage); 2 usage error. Keys and values on the command line are UTF-8
text unless --hex is given. The default tree is `main`. Read-only commands (get, dump, trees,
info, stat, check, pages, page, copy, readers, and compact SRC DST for SRC) never modify the
database file, and work on a live database, one another process has open and is writing: each
reads one snapshot (the newest commit when it starts) while commits go on. Every command that
opens the database attaches to its lock file, `FILE-lock`, creating it if missing.";

const MAIN_EXAMPLES: &str = "\
Examples:
  larch demo                          # build a database, time it, check it
  larch put db.larch alice 1          # write a record (creates db.larch)
  larch get db.larch alice            # prints 1
  larch dump db.larch > backup.tsv    # every record as HEXKEY<TAB>HEXVALUE
  larch load copy.larch < backup.tsv  # and back
  larch check db.larch                # prints ok, or each problem (exit 1)
  larch compact db.larch small.larch  # a copy without free pages
  larch copy db.larch backup.larch    # hot backup of a live database, compacted
  larch readers db.larch              # who reads which snapshot, in every process
  larch bench --count 10000           # write and read benchmark in a temporary file";

#[derive(Parser, Debug)]
#[command(name = "larch", version, about = ABOUT, long_about = LONG_ABOUT, after_help = MAIN_EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The tree a record command works on.
#[derive(Args, Debug, Clone)]
pub struct TreeArg {
    /// Tree to use.
    #[arg(long, value_name = "NAME", default_value = "main")]
    pub tree: String,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Build a database, time loading, reading, scanning and deleting, and check it.
    #[command(after_help = "\
Creates a fresh database (in a temporary directory unless --path is given), loads COUNT keys in
commits of 10,000 (async, then one sync), reads every key back, scans them in order, deletes
half, runs the full integrity check and prints what it did, how fast, and the file's shape.

Examples:
  larch demo
  larch demo --count 1000000 --path /tmp/demo.larch   # keep the file afterwards")]
    Demo(commands::demo::DemoArgs),

    /// Load HEXKEY<TAB>HEXVALUE lines from stdin into a tree.
    #[command(after_help = "\
Each line is HEXKEY<TAB>HEXVALUE (either case; the value may be empty); blank lines are
skipped. Records are inserted or overwritten, committed every --batch records and at the end
of input; after each commit `committed <txid> <records-so-far>` is printed. A malformed line
stops the load with exit 1 naming the line; earlier commits stay, the current batch does not.
FILE is created if missing.

Examples:
  larch dump old.larch | larch load new.larch
  printf '616c696365\\t31\\n' | larch load db.larch --tree users --durability async")]
    Load(commands::load::LoadArgs),

    /// Print every record of a tree as HEXKEY<TAB>HEXVALUE lines, in key order.
    #[command(after_help = "\
Output is lowercase hex, one record per line; `larch load` reads it back, so
`larch dump a.larch | larch load b.larch` copies a tree exactly.

Examples:
  larch dump db.larch > main.tsv
  larch dump db.larch --tree users | head")]
    Dump(commands::dump::DumpArgs),

    /// Print the value of a key (exit 1 if absent).
    #[command(after_help = "\
Examples:
  larch get db.larch alice
  larch get db.larch 616c696365 --hex      # key given and value printed as hex")]
    Get(commands::kv::GetArgs),

    /// Insert or overwrite one record (creates FILE and the tree if missing).
    #[command(after_help = "\
Examples:
  larch put db.larch alice 1
  larch put db.larch 00ff 0102 --hex --tree bin")]
    Put(commands::kv::PutArgs),

    /// Delete a key (exit 1 if it was absent).
    #[command(after_help = "\
Examples:
  larch del db.larch alice
  larch del db.larch 00ff --hex --tree bin")]
    Del(commands::kv::DelArgs),

    /// List the trees, one name per line.
    #[command(after_help = "\
Example:
  larch trees db.larch")]
    Trees(commands::trees::TreesArgs),

    /// Show the file's metas, size and space accounting.
    #[command(after_help = "\
Shows the page size, the txid of the newest valid meta and of the other slot, whether the
newest is durable, file bytes, high-water mark, live/free/pending pages, dead ratio, trees and
any meta fallback. A read-only open does not load the free-space state, so free and pending
are as the engine reports them then; dead_pages is the exact unreachable count. On a live
database (another process writing) the numbers are one snapshot's, and durable is what the
writer recorded in the lock file (a NoMetaSync commit is not durable until its sync).

Examples:
  larch info db.larch
  larch info db.larch --json | jq .dead_ratio")]
    Info(commands::info::InfoArgs),

    /// Show the shape of each tree: depth, pages, entries, fill (like mdb_stat).
    #[command(after_help = "\
Examples:
  larch stat db.larch
  larch stat db.larch --tree users --json")]
    Stat(commands::stat::StatArgs),

    /// Run the full integrity check (prints `ok` and exits 0, or lists problems and exits 1).
    #[command(after_help = "\
Verifies every page's checksum, type and tree, key order, tree depths and entry counts,
overflow runs, and that every page is exactly one of reachable or marked free. On a live
database (another process writing) it checks one snapshot, the newest commit when it starts,
whose pages the writer does not reuse while the check reads them; the last line names its txid.

Examples:
  larch check db.larch && echo fine
  larch check db.larch --json")]
    Check(commands::check::CheckArgs),

    /// List every page of the file: id, type, tree, txid, item count, overflow length.
    #[command(after_help = "\
Types: meta, branch, leaf, overflow (first page of a large value), overflow-cont (the rest of
its run), free (marked unreachable by the free map: free or pending), leaked (neither; damage)
and unknown (reached, but not a valid page). The tree column is data, catalog or freemap; name
is the data tree's name. Exits 1 if the walk found damage (listed on stderr). On a live
database the rows are one snapshot's (the txid in --json), held while the file is read; the
txid column of a free page is whatever its header says at that moment.

Examples:
  larch pages db.larch
  larch pages db.larch --json")]
    Pages(commands::pages::PagesArgs),

    /// Decode one page: header, entries or meta fields; --raw adds a hex dump.
    #[command(after_help = "\
The status line says what the page is in one snapshot, the newest commit when the command
starts. On a live database (another process writing) a page that snapshot reaches is read as
its commit wrote it (the writer does not reuse it while the snapshot is held); a free page, a
page past the snapshot's high-water mark, or the meta slot the writer takes next shows the
bytes there at the moment of the read, which the writer may be rewriting: a torn page, a bad
checksum or a newer txid there is not damage.

Examples:
  larch page db.larch 0          # a meta page
  larch page db.larch 7 --raw")]
    Page(commands::page::PageArgs),

    /// Rewrite a file without its free pages: into a new file, or in place.
    #[command(
        override_usage = "larch compact <SRC> <DST>\n       larch compact --in-place <FILE>",
        after_help = "\
`larch compact SRC DST` opens SRC read-only and writes its newest commit to DST, which must not
exist: trees in key order, leaves adjacent, no free pages. DST appears only when complete and
synced. `larch compact --in-place FILE` moves FILE's live pages toward its head over a few
synced commits and truncates the free tail.
Either way it prints `SRC_BYTES -> DST_BYTES bytes (gain=X.XXx)`, gain being before/after.

Examples:
  larch compact db.larch db.compact.larch
  larch compact --in-place db.larch"
    )]
    Compact(commands::compact::CompactArgs),

    /// Hot backup: copy one snapshot of a database, compacted, to a new file or stdout.
    #[command(after_help = "\
Opens SRC read-only (another process may be writing it) and writes its newest commit, as a
compacted copy (trees in key order, leaves adjacent, no free pages; like `mdb_copy -c`), to
DST, which must not exist and appears only when complete and synced. DST `-` writes the copy
to stdout (through a temporary file under $TMPDIR, removed afterwards; a file named `-` is
`./-`; a terminal is refused, exit 2). Prints `copied txid N: BYTES bytes` (to stderr when DST
is `-`): the copy holds exactly commit N of SRC, the newest when the copy began, whatever a
writer commits meanwhile; the copy itself opens at txid 1. Exits 1 if DST exists or the copy
fails.

Examples:
  larch copy db.larch backup.larch
  larch copy db.larch - | gzip > backup.larch.gz")]
    Copy(commands::copy::CopyArgs),

    /// List the reader slots of a database: pid, snapshot txid, age, alive (like mdb_stat -r).
    #[command(after_help = "\
Reads the lock file FILE-lock, which every process that has the database open attaches to,
and lists each reader slot in use: slot, pid, txid (the snapshot the slot holds, or idle), age
(how many commits behind the newest it is) and alive (no: its process died holding it; the
next write transaction frees it, or --clear-stale). The pages each reader pins are not shown:
no process can tell them from the lock file and the file alone. Slots of this command itself
are not listed. When no process has the database open, every slot is stale and the first
process to attach clears them, so the list is empty.

Examples:
  larch readers db.larch
  larch readers db.larch --clear-stale
  larch readers db.larch --json | jq '.readers[] | select(.age > 1000)'")]
    Readers(commands::readers::ReadersArgs),

    /// Benchmark writes and reads of one database, in the style of `bbolt bench`.
    #[command(after_help = "\
The write phase inserts --count keys in commits of --batch-size, in key order (seq) or a
shuffled one (rnd, seeded with --seed); keys are big-endian counters zero-padded to --key-size
bytes. The read phase gets every key in one read transaction and verifies each value. Each
phase prints ops/s and latency percentiles (p50, p99, p99.9, max): writes per commit, per
commit call and per insert (amortized over its commit); reads per get, amortized over groups
of 64 gets timed together. Writes also show write calls, KiB and syncs per commit, and the run
ends with the file's size and space accounting. The database is created in a temporary
directory (or at --path, which must not exist) and removed afterwards unless --keep.

Examples:
  larch bench
  larch bench --count 1000000 --batch-size 10000 --write-mode rnd --durability async
  larch bench --path /tmp/b.larch --keep && larch info /tmp/b.larch")]
    Bench(commands::bench::BenchArgs),
}

/// `--name` values from a fixed list of the engine's names, so new engine policies show up
/// here (and in --help) without a CLI change.
fn named<T: Copy + Send + Sync + 'static>(
    all: &'static [T],
    name: fn(T) -> &'static str,
) -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(all.iter().map(|&t| name(t))).try_map(move |s: String| {
        all.iter()
            .copied()
            .find(|&t| name(t) == s)
            .ok_or_else(|| format!("unknown value {s:?}"))
    })
}

/// Parses `--durability`.
pub fn durability_parser() -> impl TypedValueParser<Value = Durability> {
    named(&Durability::ALL, Durability::name)
}

/// Parses `--policy`.
pub fn policy_parser() -> impl TypedValueParser<Value = Policy> {
    named(&Policy::ALL, Policy::name)
}

/// Parses `--write-mode`.
pub fn write_mode_parser() -> impl TypedValueParser<Value = WriteMode> {
    named(&WriteMode::ALL, WriteMode::name)
}

/// Parses `--page-size`: the engine accepts powers of two from 4096 to 65536.
pub fn parse_page_size(s: &str) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of bytes"))?;
    if n.is_power_of_two() && (4096..=65536).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{n} is not a power of two between 4096 and 65536"))
    }
}

fn main() -> ExitCode {
    // Clap prints usage errors itself and exits with 2; --help and --version exit 0.
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(a) => commands::demo::run(a),
        Command::Load(a) => commands::load::run(a),
        Command::Dump(a) => commands::dump::run(a),
        Command::Get(a) => commands::kv::get(a),
        Command::Put(a) => commands::kv::put(a),
        Command::Del(a) => commands::kv::del(a),
        Command::Trees(a) => commands::trees::run(a),
        Command::Info(a) => commands::info::run(a),
        Command::Stat(a) => commands::stat::run(a),
        Command::Check(a) => commands::check::run(a),
        Command::Pages(a) => commands::pages::run(a),
        Command::Page(a) => commands::page::run(a),
        Command::Compact(a) => commands::compact::run(a),
        Command::Copy(a) => commands::copy::run(a),
        Command::Readers(a) => commands::readers::run(a),
        Command::Bench(a) => commands::bench::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError { code, message }) => {
            if let Some(m) = message {
                eprintln!("larch: {m}");
            }
            ExitCode::from(code)
        }
    }
}
