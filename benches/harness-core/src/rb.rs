//! redb's write shapes (the write phases of redb's comparison benchmark,
//! crates/redb-bench/src/lib.rs in cberner/redb), run on an empty database of their own:
//!
//! - `rb.load`: `--rb-load` new random keys in one transaction, committed durably (redb's
//!   "bulk load").
//! - `rb.ins1`: `--rb-ins1` new random keys, one durable commit each ("individual writes").
//! - `rb.insb`: `--rb-batches` durable commits of `--rb-batch` new random keys each ("batch
//!   writes").
//! - `rb.insa`: `--rb-insa` new random keys, one non-durable commit each ("nosync writes");
//!   the runner syncs after the step, untimed.
//! - `rb.sorted`: `--rb-sorted` keys of `--rb-key-size` 0xFF bytes then a big-endian u64
//!   counter from 0, so ascending and past every random key, in one durable transaction
//!   through [`crate::engine::Writer::write_sorted`] ("sorted inserts").
//!
//! Every key is new: the random keys are [`KeyGen`] keys of counters that go on from one
//! step to the next (distinct, in no key order), as redb's come from one random stream. The
//! keys and values of a step are made before its clock starts; ops are keys/s (for `rb.ins1`
//! and `rb.insa`, one key a commit, also commits/s); latency is per commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::engine::BoxError;
use crate::keys::{thread_seed, KeyGen, Rng, Values, MAX_KEY};
use crate::run::{nanos, new_hist, Ctx, Outcome};
use crate::steps::{Kind, Step};

type Result<T> = std::result::Result<T, BoxError>;

/// What the rb steps share in one child: the next key counter and the logical bytes stored.
#[derive(Debug)]
pub struct RbState {
    /// The counter of the next new random key (1 before `rb.load`).
    pub next: AtomicU64,
    /// Keys x (key + value) bytes inserted so far (space-amp divides by it).
    pub logical: AtomicU64,
}

impl Default for RbState {
    fn default() -> RbState {
        RbState {
            next: AtomicU64::new(1),
            logical: AtomicU64::new(0),
        }
    }
}

/// Run one `rb.*` step.
pub(crate) fn run(ctx: &Ctx<'_>, step: Step) -> Result<Outcome> {
    let rb = ctx.cfg.rb;
    let (commits, per_commit) = match step.kind {
        Kind::RbLoad => (1, rb.load),
        Kind::RbIns1 => (rb.ins1, 1),
        Kind::RbInsBatch => (rb.batches, rb.batch as u64),
        Kind::RbInsAsync => (rb.insa, 1),
        Kind::RbSorted => (1, rb.sorted),
        _ => return Err(format!("{} is not one of redb's write shapes", step.name()).into()),
    };
    let n = commits * per_commit;
    let values = Values::new(rb.value_size, ctx.seed ^ 0x4eb);
    let mut rng = Rng::new(thread_seed(ctx.seed, step.index(), 0));
    let sorted = step.kind == Kind::RbSorted;
    let klen = if sorted { rb.key_size + 8 } else { rb.key_size };
    let keys = keys(ctx, step, n, rb.key_size)?;
    let pairs: Vec<(&[u8], &[u8])> = keys
        .chunks_exact(klen)
        .map(|k| (k, values.pick(&mut rng)))
        .collect();
    let mut hist = new_hist();
    let mut w = ctx.engine.writer()?;
    let t0 = Instant::now();
    let mut t = t0;
    for batch in pairs.chunks(per_commit as usize) {
        if sorted {
            w.write_sorted(batch)?;
        } else {
            w.write(batch)?;
        }
        let now = Instant::now();
        hist.saturating_record(nanos(now - t));
        t = now;
    }
    let secs = (t - t0).as_secs_f64();
    drop(w);
    ctx.rb
        .logical
        .fetch_add(n * (klen + rb.value_size) as u64, Ordering::Relaxed);
    Ok(Outcome {
        ops: n,
        secs,
        hist,
        writer_writes: None,
        tenths: None,
    })
}

/// The `n` keys of `step`, each `key_size` bytes (`rb.sorted`: 8 more) end to end: new random
/// keys from the shared counter, or the sorted ones.
fn keys(ctx: &Ctx<'_>, step: Step, n: u64, key_size: usize) -> Result<Vec<u8>> {
    let n = usize::try_from(n)?;
    if step.kind == Kind::RbSorted {
        let mut out = Vec::with_capacity(n * (key_size + 8));
        for i in 0..n as u64 {
            out.extend(std::iter::repeat_n(0xFFu8, key_size));
            out.extend_from_slice(&i.to_be_bytes());
        }
        return Ok(out);
    }
    let gen = KeyGen::new(key_size)?;
    let first = ctx.rb.next.fetch_add(n as u64, Ordering::Relaxed);
    let mut out = Vec::with_capacity(n * key_size);
    let mut buf = [0u8; MAX_KEY];
    for i in first..first + n as u64 {
        out.extend_from_slice(gen.key(i, &mut buf));
    }
    Ok(out)
}

/// Logical bytes after the rb steps so far (at least one byte, for the division).
pub(crate) fn logical_bytes(ctx: &Ctx<'_>) -> u64 {
    ctx.rb.logical.load(Ordering::Relaxed).max(1)
}
