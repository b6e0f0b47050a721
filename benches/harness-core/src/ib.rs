//! The insert benchmark (Mark Callaghan's iibench, as the seeds ran it): one table of rows keyed
//! by an auto-increment id, with three secondary indexes whose keys are a field value followed
//! by the id.
//!
//! - `ib.l.i0`: rows 1..=N in id order, no index, `--ib-batch` rows a commit, then a sync
//!   (counted).
//! - `ib.l.x`: the engine builds the three indexes from the rows (SQLite: `CREATE INDEX`; the
//!   key-value engines read the rows and insert the entries), then a sync (counted).
//! - `ib.l.i1` (`.tN` with N writers): M more rows, each commit inserting `--ib-batch` rows with
//!   their index entries and deleting as many of the oldest rows with theirs, so the table
//!   keeps N rows. The insert rate of each tenth of the M rows is kept (`Row::tenths`).
//! - `ib.qr100` / `ib.qp100`: one query thread (range: 10 entries of a random index from a
//!   random field value, then the 10 rows they name; point: one row by a random live id)
//!   for `--secs`, beside one writer inserting (and deleting) 100 rows a second, one a commit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::engine::{BoxError, IbRow, IbWriter};
use crate::keys::{mix64, thread_seed, Rng, Values};
use crate::rate::RateLimiter;
use crate::run::{nanos, new_hist, Ctx, Outcome};
use crate::steps::{Kind, Step};

type Result<T> = std::result::Result<T, BoxError>;

/// Bytes of the three indexed fields at the start of a row.
pub const FIELDS_BYTES: usize = 24;
/// Bytes of an index key: field value then id, both big-endian.
pub const INDEX_KEY: usize = 16;
/// Names of the tables (larch trees, LMDB databases, redb tables, fjall keyspaces, SQLite
/// index names): the rows, then the three indexes.
pub const TABLES: [&str; 4] = ["rows", "ix1", "ix2", "ix3"];
/// How many distinct values each field takes (a price, a customer, a cash register, say).
pub const CARDINALITY: [u64; 3] = [100_000, 1_000_000, 10_000];
/// Entries a range query reads from an index (then as many rows).
pub const QUERY_LEN: usize = 10;
/// Rows a second of the writer beside the queries.
pub const QUERY_WRITER_ROWS_PER_SEC: f64 = 100.0;
/// Rows per commit of the key-value engines' index build.
pub const BUILD_CHUNK: usize = 1_000;

/// Field `k` (0..3) of row `id`: a hash of the id, below `CARDINALITY[k]`, so index inserts
/// land at random places while the rows go in id order.
pub fn field(id: u64, k: usize) -> u64 {
    mix64(id.wrapping_mul(4).wrapping_add(k as u64 + 1)) % CARDINALITY[k]
}

/// The primary key of a KV engine: the id, 8 bytes big-endian.
pub fn row_key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

/// The id of a primary key (`row_key`).
pub fn id_of(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[8 - n..].copy_from_slice(&key[key.len() - n..]);
    u64::from_be_bytes(b)
}

/// Field `k` as stored in a row value.
pub fn field_of(value: &[u8], k: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&value[8 * k..8 * k + 8]);
    u64::from_be_bytes(b)
}

/// The key of row `id` in index `k`, given the row's value: field value then id.
pub fn index_key(value: &[u8], k: usize, id: u64) -> [u8; INDEX_KEY] {
    let mut key = [0u8; INDEX_KEY];
    key[..8].copy_from_slice(&value[8 * k..8 * k + 8]);
    key[8..].copy_from_slice(&id.to_be_bytes());
    key
}

/// The first key of index `k` at or after field value `from`.
pub fn index_start(from: u64) -> [u8; INDEX_KEY] {
    let mut key = [0u8; INDEX_KEY];
    key[..8].copy_from_slice(&from.to_be_bytes());
    key
}

/// Fill `buf` (a multiple of `row_size` long) with the rows `first..first + n`.
fn fill_rows(buf: &mut [u8], row_size: usize, first: u64, pad: &Values, rng: &mut Rng) {
    for (j, row) in buf.chunks_exact_mut(row_size).enumerate() {
        let id = first + j as u64;
        for k in 0..3 {
            row[8 * k..8 * k + 8].copy_from_slice(&field(id, k).to_be_bytes());
        }
        if row_size > FIELDS_BYTES {
            row[FIELDS_BYTES..].copy_from_slice(pad.pick(rng));
        }
    }
}

/// The padding after the fields, for `Values`.
pub fn pad_size(row_size: usize) -> usize {
    row_size.saturating_sub(FIELDS_BYTES).max(1)
}

/// Rows as [`IbRow`]s over `buf`.
fn rows_of(buf: &[u8], row_size: usize, first: u64) -> Vec<IbRow<'_>> {
    buf.chunks_exact(row_size)
        .enumerate()
        .map(|(j, value)| IbRow {
            id: first + j as u64,
            value,
        })
        .collect()
}

/// What the insert benchmark steps share in one child: the next id to insert.
#[derive(Debug)]
pub struct IbState {
    /// The id the next inserted row gets (1 before `ib.l.i0`).
    pub next_id: AtomicU64,
}

impl Default for IbState {
    fn default() -> IbState {
        IbState {
            next_id: AtomicU64::new(1),
        }
    }
}

/// Run one `ib.*` step.
pub(crate) fn run(ctx: &Ctx<'_>, step: Step) -> Result<Outcome> {
    match step.kind {
        Kind::IbLoad => load(ctx, step),
        Kind::IbIndex => build(ctx),
        Kind::IbInsert => insert(ctx, step),
        Kind::IbQr | Kind::IbQp => queries(ctx, step),
        _ => Err(format!("{} is not an insert benchmark step", step.name()).into()),
    }
}

fn pad_values(ctx: &Ctx<'_>) -> Values {
    Values::new(pad_size(ctx.cfg.ib_row_size), ctx.seed ^ 0x1b_1b)
}

/// `ib.l.i0`: rows 1..=N in id order, no index.
fn load(ctx: &Ctx<'_>, step: Step) -> Result<Outcome> {
    let cfg = ctx.cfg;
    let (n, b, size) = (cfg.ib_rows, cfg.ib_batch, cfg.ib_row_size);
    let pad = pad_values(ctx);
    let mut rng = Rng::new(thread_seed(ctx.seed, step.index(), 0));
    let mut buf = vec![0u8; b * size];
    let mut hist = new_hist();
    let mut w = ctx.engine.ib_writer()?;
    let first = ctx.ib.next_id.load(Ordering::Relaxed);
    let end = first + n;
    let t0 = Instant::now();
    let mut id = first;
    while id < end {
        let cnt = (end - id).min(b as u64) as usize;
        let buf = &mut buf[..cnt * size];
        fill_rows(buf, size, id, &pad, &mut rng);
        let rows = rows_of(buf, size, id);
        let s = Instant::now();
        w.insert(&rows, false, 0)?;
        hist.saturating_record(nanos(s.elapsed()));
        id += cnt as u64;
    }
    drop(w);
    let s = Instant::now();
    ctx.engine.sync()?;
    hist.saturating_record(nanos(s.elapsed()));
    ctx.ib.next_id.store(end, Ordering::Relaxed);
    Ok(Outcome {
        ops: n,
        secs: t0.elapsed().as_secs_f64(),
        hist,
        writer_writes: None,
        tenths: None,
    })
}

/// `ib.l.x`: the engine builds the indexes; latency per commit (chunk), then the sync.
fn build(ctx: &Ctx<'_>) -> Result<Outcome> {
    let mut hist = new_hist();
    let t0 = Instant::now();
    let mut last = Instant::now();
    let rows = ctx.engine.ib_build_indexes(BUILD_CHUNK, &mut |_| {
        let now = Instant::now();
        hist.saturating_record(nanos(now - last));
        last = now;
    })?;
    let s = Instant::now();
    ctx.engine.sync()?;
    hist.saturating_record(nanos(s.elapsed()));
    Ok(Outcome {
        ops: rows,
        secs: t0.elapsed().as_secs_f64(),
        hist,
        writer_writes: None,
        tenths: None,
    })
}

/// The per-tenth clock of `ib.l.i1`: when each tenth of the rows had been committed.
struct Tenths {
    total: u64,
    done: AtomicU64,
    at: Mutex<[Option<Instant>; 10]>,
}

impl Tenths {
    fn new(total: u64) -> Tenths {
        Tenths {
            total,
            done: AtomicU64::new(0),
            at: Mutex::new([None; 10]),
        }
    }

    /// `n` more rows are committed.
    fn add(&self, n: u64) {
        let before = self.done.fetch_add(n, Ordering::Relaxed);
        let after = before + n;
        let now = Instant::now();
        for k in 1..=10u64 {
            let mark = self.total * k / 10;
            if before < mark && mark <= after {
                if let Ok(mut at) = self.at.lock() {
                    at[k as usize - 1].get_or_insert(now);
                }
            }
        }
    }

    /// Rows per second of each tenth, from `start`.
    fn rates(&self, start: Instant) -> Vec<f64> {
        let at = self.at.lock().map(|a| *a).unwrap_or([None; 10]);
        let mut prev = (0u64, start);
        let mut out = Vec::with_capacity(10);
        for (k, t) in at.iter().enumerate() {
            let mark = self.total * (k as u64 + 1) / 10;
            match t {
                Some(t) => {
                    let secs = t.duration_since(prev.1).as_secs_f64().max(1e-9);
                    out.push((mark - prev.0) as f64 / secs);
                    prev = (mark, *t);
                }
                None => out.push(f64::NAN),
            }
        }
        out
    }
}

/// `ib.l.i1`: M rows by `step.threads` writers, indexes maintained, as many oldest deleted.
fn insert(ctx: &Ctx<'_>, step: Step) -> Result<Outcome> {
    let cfg = ctx.cfg;
    let threads = step.threads(cfg.threads);
    let m = cfg.ib_inserts;
    let first = ctx.ib.next_id.load(Ordering::Relaxed);
    let end = first + m;
    let next = AtomicU64::new(first);
    let tenths = Tenths::new(m);
    let barrier = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    let pad = pad_values(ctx);
    let (start, results) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (next, tenths, barrier, stop, pad) = (&next, &tenths, &barrier, &stop, &pad);
                s.spawn(
                    move || -> Result<(u64, hdrhistogram::Histogram<u64>, Instant)> {
                        let w = ctx.engine.ib_writer();
                        barrier.wait();
                        let res = (|| {
                            let mut w = w?;
                            let (b, size) = (cfg.ib_batch, cfg.ib_row_size);
                            let mut rng = Rng::new(thread_seed(ctx.seed, step.index(), t));
                            let mut buf = vec![0u8; b * size];
                            let mut hist = new_hist();
                            let mut rows_done = 0u64;
                            let mut last = Instant::now();
                            while !stop.load(Ordering::Relaxed) {
                                let id = next.fetch_add(b as u64, Ordering::Relaxed);
                                if id >= end {
                                    break;
                                }
                                let cnt = (end - id).min(b as u64) as usize;
                                let buf = &mut buf[..cnt * size];
                                fill_rows(buf, size, id, pad, &mut rng);
                                let rows = rows_of(buf, size, id);
                                let s = Instant::now();
                                let deleted = w.insert(&rows, true, cnt)?;
                                if deleted != cnt {
                                    return Err(format!(
                                        "deleted {deleted} of the {cnt} oldest rows asked for"
                                    )
                                    .into());
                                }
                                last = Instant::now();
                                hist.saturating_record(nanos(last - s));
                                tenths.add(cnt as u64);
                                rows_done += cnt as u64;
                            }
                            Ok((rows_done, hist, last))
                        })();
                        if res.is_err() {
                            stop.store(true, Ordering::Relaxed);
                        }
                        res
                    },
                )
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        (
            start,
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a writer panicked".into())))
                .collect::<Vec<_>>(),
        )
    });
    let mut hist = new_hist();
    let mut ops = 0;
    let mut end_t = start;
    for r in results {
        let (n, h, e) = r?;
        ops += n;
        hist.add(&h).map_err(|e| format!("histogram: {e}"))?;
        end_t = end_t.max(e);
    }
    ctx.ib.next_id.store(end, Ordering::Relaxed);
    Ok(Outcome {
        ops,
        secs: end_t.duration_since(start).as_secs_f64(),
        hist,
        writer_writes: None,
        tenths: Some(tenths.rates(start)),
    })
}

/// The writer beside the queries: one row a commit (indexed, the oldest deleted), 100 a second.
fn query_writer(
    ctx: &Ctx<'_>,
    step: Step,
    w: Result<Box<dyn IbWriter + '_>>,
    barrier: &Barrier,
    stop: &AtomicBool,
) -> Result<u64> {
    barrier.wait();
    let res = (|| {
        let mut w = w?;
        let size = ctx.cfg.ib_row_size;
        let pad = pad_values(ctx);
        let mut rng = Rng::new(thread_seed(ctx.seed, step.index(), 1000));
        let mut rate = RateLimiter::new(QUERY_WRITER_ROWS_PER_SEC, Instant::now());
        let mut buf = vec![0u8; size];
        let mut writes = 0;
        loop {
            rate.wait();
            if stop.load(Ordering::Relaxed) {
                return Ok(writes);
            }
            let id = ctx.ib.next_id.fetch_add(1, Ordering::Relaxed);
            fill_rows(&mut buf, size, id, &pad, &mut rng);
            w.insert(&rows_of(&buf, size, id), true, 1)?;
            writes += 1;
        }
    })();
    if res.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    res
}

/// `ib.qr100` / `ib.qp100`: one query thread for `--secs` beside the 100 rows/s writer.
fn queries(ctx: &Ctx<'_>, step: Step) -> Result<Outcome> {
    let barrier = Barrier::new(3);
    let stop = AtomicBool::new(false);
    let dur = Duration::from_secs_f64(ctx.cfg.secs);
    let live = ctx.cfg.ib_rows;
    let ranges = step.kind == Kind::IbQr;
    std::thread::scope(|s| {
        let (b, st) = (&barrier, &stop);
        let reader = s.spawn(
            move || -> Result<(u64, u64, hdrhistogram::Histogram<u64>, Instant)> {
                let r = ctx.engine.ib_reader();
                b.wait();
                let res = (|| {
                    let mut r = r?;
                    let mut rng = Rng::new(thread_seed(ctx.seed, step.index(), 0));
                    let mut hist = new_hist();
                    let (mut ops, mut found) = (0u64, 0u64);
                    let mut t0 = Instant::now();
                    while !st.load(Ordering::Relaxed) {
                        if ranges {
                            let k = rng.below(3) as usize;
                            let from = rng.below(CARDINALITY[k]);
                            let (_, rows) = r.index_range(k, from, QUERY_LEN)?;
                            found += rows as u64;
                        } else {
                            // A live id: the table holds the `live` newest rows.
                            let next = ctx.ib.next_id.load(Ordering::Relaxed);
                            let id = next.saturating_sub(live) + rng.below(live);
                            found += u64::from(r.row(id)?);
                        }
                        let t1 = Instant::now();
                        hist.saturating_record(nanos(t1 - t0));
                        t0 = t1;
                        ops += 1;
                    }
                    Ok((ops, found, hist, t0))
                })();
                if res.is_err() {
                    st.store(true, Ordering::Relaxed);
                }
                res
            },
        );
        let writer = s.spawn(move || query_writer(ctx, step, ctx.engine.ib_writer(), b, st));
        barrier.wait();
        let start = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let left = dur.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
        stop.store(true, Ordering::Relaxed);
        let r = reader
            .join()
            .unwrap_or_else(|_| Err("the query thread panicked".into()));
        let w = writer
            .join()
            .unwrap_or_else(|_| Err("the writer thread panicked".into()));
        let (ops, found, hist, end) = r?;
        let writes = w?;
        if ops > 0 && found == 0 {
            return Err(format!("{} found no row in {ops} queries", step.name()).into());
        }
        Ok(Outcome {
            ops,
            secs: end.duration_since(start).as_secs_f64(),
            hist,
            writer_writes: Some(writes),
            tenths: None,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_fields() {
        assert_eq!(id_of(&row_key(0x0102_0304)), 0x0102_0304);
        let mut buf = vec![0u8; 2 * 40];
        let pad = Values::new(pad_size(40), 1);
        fill_rows(&mut buf, 40, 7, &pad, &mut Rng::new(1));
        let rows = rows_of(&buf, 40, 7);
        assert_eq!(rows[1].id, 8);
        for (k, card) in CARDINALITY.iter().enumerate() {
            assert_eq!(field_of(rows[1].value, k), field(8, k));
            assert!(field(8, k) < *card);
            let key = index_key(rows[1].value, k, 8);
            assert_eq!(id_of(&key), 8);
            assert!(index_start(field(8, k)) <= key);
            assert!(index_start(field(8, k) + 1) > key);
        }
    }

    #[test]
    fn tenths_are_rates() {
        let t = Tenths::new(100);
        let start = Instant::now();
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(2));
            t.add(10);
        }
        let r = t.rates(start);
        assert_eq!(r.len(), 10);
        assert!(r.iter().all(|x| x.is_finite() && *x > 0.0), "{r:?}");
        assert!(Tenths::new(100).rates(start)[0].is_nan());
    }
}
