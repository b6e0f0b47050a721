//! Point and range reads of larch or LMDB on a database loaded once, for cachegrind, callgrind
//! and a quick wall clock:
//!
//! ```text
//! read_costs ENGINE DIR load DOCS              # load as the harness's load step does
//! read_costs ENGINE DIR pq|rq N DOCS [warm]    # N pq.1 gets (rq.1 scans of 20), random docs
//! read_costs lmdb DIR stat                     # LMDB's depth and pages (larch: `larch stat`)
//! ```
//!
//! ENGINE is `larch` or `lmdb`, with the harness's keys (16 bytes), values (256 bytes) and
//! batches (1,000 documents a commit). larch is opened and read through the harness's adapter
//! (`Reader::get`, `Reader::scan`); LMDB is read the way its adapter reads (a read transaction
//! per read, `MDB_NORDAHEAD`) but on a map just larger than the file, since the adapter's map
//! (64 GiB or more) is more address space than valgrind gives a process; the map's size does
//! not change a read. With `warm`, N untimed reads come first, so the timed ones find the
//! page tables filled, as the harness's steps do after the load.
//!
//! Loading natively and reading under valgrind keeps the slow part out of the simulator. Run
//! the reads at two N and divide the difference of the totals by the difference of the N: the
//! open and the cold start cancel out, leaving instructions and simulated cache misses per
//! read (docs/performance.md, "Read path").

use std::path::Path;
use std::time::Instant;

use larch_bench::LarchFactory;
use larch_bench_core::keys::MAX_KEY;
use larch_bench_core::run::write_documents;
use larch_bench_core::{Durability, EngineConfig, EngineFactory, KeyGen, Rng, Values};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Bytes<'e> = heed::Database<'e, heed::types::Bytes, heed::types::Bytes>;

const KEY: usize = 16;
const VALUE: usize = 256;
const BATCH: u64 = 1000;
const USAGE: &str = "usage: read_costs larch|lmdb DIR load DOCS | read_costs larch|lmdb DIR pq|rq N DOCS [warm] | read_costs lmdb DIR stat";

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [engine, dir, op, rest @ ..] = args.as_slice() else {
        return Err(USAGE.into());
    };
    let dir = Path::new(dir);
    let num = |s: &String| s.parse::<u64>();
    match (engine.as_str(), op.as_str(), rest) {
        ("larch" | "lmdb", "load", [docs]) => load(engine, dir, num(docs)?),
        ("lmdb", "stat", []) => lmdb_stat(dir),
        (_, "pq" | "rq", [n, docs, warm @ ..]) if warm.is_empty() || warm == ["warm"] => {
            let reads = Reads {
                range: op == "rq",
                n: num(n)?,
                docs: num(docs)?,
                warm: !warm.is_empty(),
            };
            match engine.as_str() {
                "larch" => larch_reads(dir, &reads),
                "lmdb" => lmdb_reads(dir, &reads),
                _ => Err(USAGE.into()),
            }
        }
        _ => Err(USAGE.into()),
    }
}

fn config(docs: u64) -> EngineConfig {
    EngineConfig {
        docs,
        key_size: KEY,
        value_size: VALUE,
        threads: 1,
        mem_limit: None,
    }
}

fn factory(engine: &str) -> (&'static dyn EngineFactory, String) {
    if engine == "lmdb" {
        (&larch_bench::LmdbFactory, "default".into())
    } else {
        (
            &LarchFactory,
            larch_bench_core::config::default_larch_setup(),
        )
    }
}

/// The harness's load step: documents 1..=DOCS in counter order (random key order), 1,000 a
/// commit, async, then one sync.
fn load(engine: &str, dir: &Path, docs: u64) -> Result<(), Error> {
    let (factory, setup) = factory(engine);
    std::fs::create_dir_all(dir)?;
    let db = factory.open(dir, &setup, &config(docs))?;
    let keys = KeyGen::new(KEY)?;
    let values = Values::new(VALUE, 7);
    let mut rng = Rng::new(7);
    db.set_durability(Durability::Async)?;
    let mut w = db.writer()?;
    write_documents(
        &mut *w,
        &keys,
        KEY,
        &values,
        &mut rng,
        docs,
        BATCH as usize,
        |_| {},
    )?;
    drop(w);
    db.sync()?;
    db.close()
}

/// What to read.
struct Reads {
    range: bool,
    n: u64,
    docs: u64,
    warm: bool,
}

impl Reads {
    /// Run the reads (after as many untimed ones with `warm`); `read(key, range)` returns the
    /// entries found and their bytes.
    fn run(
        &self,
        mut read: impl FnMut(&[u8], bool) -> Result<(u64, u64), Error>,
    ) -> Result<(), Error> {
        let keys = KeyGen::new(KEY)?;
        let mut buf = [0u8; MAX_KEY];
        let mut rng = Rng::new(0x1ead_c057);
        let mut pass = |n: u64| -> Result<(u64, u64), Error> {
            let (mut found, mut bytes) = (0, 0);
            for _ in 0..n {
                let (f, b) = read(keys.key(rng.doc(self.docs), &mut buf), self.range)?;
                found += f;
                bytes += b;
            }
            Ok((found, bytes))
        };
        if self.warm {
            pass(self.n)?;
        }
        let (faults, cpu) = usage();
        let t0 = Instant::now();
        let (found, bytes) = pass(self.n)?;
        let ns = t0.elapsed().as_nanos() as f64 / self.n.max(1) as f64;
        let (faults_after, cpu_after) = usage();
        let per = |x: f64| x / self.n.max(1) as f64;
        let op = if self.range { "rq" } else { "pq" };
        println!(
            "{op}: {} reads, {found} found, {bytes} bytes, {ns:.0} ns/read, {:.0} cpu ns/read, {:.4} minor faults/read",
            self.n,
            per(cpu_after - cpu),
            per((faults_after - faults) as f64),
        );
        Ok(())
    }
}

/// Minor faults and CPU time (user + system, ns) of this process so far.
fn usage() -> (i64, f64) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole rusage into the pointer it is given, which is ours.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let ns = |t: libc::timeval| t.tv_sec as f64 * 1e9 + t.tv_usec as f64 * 1e3;
    (ru.ru_minflt, ns(ru.ru_utime) + ns(ru.ru_stime))
}

fn larch_reads(dir: &Path, reads: &Reads) -> Result<(), Error> {
    let (factory, setup) = factory("larch");
    let db = factory.open(dir, &setup, &config(reads.docs))?;
    let mut r = db.reader()?;
    reads.run(|k, range| {
        if range {
            let mut bytes = 0;
            Ok((r.scan(k, 20, &mut bytes)? as u64, bytes))
        } else {
            Ok((u64::from(r.get(k)?.is_some()), 0))
        }
    })?;
    drop(r);
    db.close()
}

/// LMDB's adapter's reads (`LmdbReader::get` and `scan`) on a map just larger than the file.
fn lmdb_reads(dir: &Path, reads: &Reads) -> Result<(), Error> {
    let file = std::fs::metadata(dir.join("data.mdb"))?.len();
    let env = open_lmdb(dir, ((file >> 30) + 1) << 30)?;
    let db = unnamed(&env)?;
    reads.run(|k, range| {
        let r = env.read_txn()?;
        if !range {
            return Ok((u64::from(db.get(&r, k)?.is_some()), 0));
        }
        let (mut found, mut bytes) = (0, 0);
        let bounds = (std::ops::Bound::Included(k), std::ops::Bound::Unbounded);
        for e in db.range(&r, &bounds)?.take(20) {
            let (k, v) = e?;
            bytes += (k.len() + v.len()) as u64;
            found += 1;
        }
        Ok((found, bytes))
    })
}

fn open_lmdb(dir: &Path, map: u64) -> heed::Result<heed::Env> {
    // SAFETY (heed's contract): no other process has this environment open with other flags.
    unsafe {
        heed::EnvOpenOptions::new()
            .map_size(map as usize)
            .max_dbs(8)
            .max_readers(256)
            .flags(heed::EnvFlags::NO_READ_AHEAD)
            .open(dir)
    }
}

fn unnamed(env: &heed::Env) -> Result<Bytes<'_>, Error> {
    Ok(env
        .open_databases_and_commit(env.read_txn()?, |o, r| {
            o.open_database(r, None)
                .map(heed::CommitOrAbort::<_, ()>::Commit)
        })?
        .unwrap_commit()
        .ok_or("no unnamed database")?)
}

/// What `mdb_stat` prints of the unnamed database: depth, branch and leaf pages.
fn lmdb_stat(dir: &Path) -> Result<(), Error> {
    let env = open_lmdb(dir, 64 << 30)?;
    let db = unnamed(&env)?;
    let r = env.read_txn()?;
    let s = db.stat(&r)?;
    println!(
        "page size {}, depth {}, branch pages {}, leaf pages {}, overflow pages {}, entries {}",
        s.page_size, s.depth, s.branch_pages, s.leaf_pages, s.overflow_pages, s.entries
    );
    Ok(())
}
