//! `--readers processes` (or `both`): the n readers of `pq.n` and `rq.n` as n processes instead of n
//! threads of the engine's process.
//!
//! The engine's child (which has the database open read-write) starts each reader as a
//! re-execution of the same binary with `--internal-reader ENGINE SETUP STEP INDEX`. A reader
//! opens the database with [`EngineFactory::open_reader`] (larch: read-only, attached to the
//! same lock file), takes its [`crate::engine::Reader`], and says `ready` on stdout. When every
//! reader is ready the child writes `go` to each one's stdin and starts the clock; the readers
//! run the threads' loop (the same seed per index, so the same keys in the same order) until a
//! line (`stop`) or the end of stdin, then report on stdout:
//!
//! ```text
//! done OPS END_NS      operations, and CLOCK_MONOTONIC at the end of the last one
//! h VALUE COUNT        the latency histogram, one line per recorded bucket
//! end
//! ```
//!
//! The step's time runs from `go` to the latest `END_NS`, as the threads' runs from the barrier
//! to the latest thread's end. The child waits for every reader before the step's counters
//! close, so their CPU time, context switches and faults are in the row (getrusage counts
//! waited-for children, and /proc/self/io adds a reaped child's I/O to its parent's); their
//! RSS is not (rss is the engine process's own).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{ChildRole, Config, ReaderRole};
use crate::engine::{BoxError, EngineFactory};
use crate::ib::IbState;
use crate::keys::{KeyGen, Values};
use crate::run::{dir_name, engine_config, new_hist, work, Ctx, Handle, Outcome};
use crate::steps::Step;

type Result<T> = std::result::Result<T, BoxError>;

/// CLOCK_MONOTONIC in nanoseconds: the clock of [`Instant`] on Linux, and the same in every
/// process of the machine.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the pointer it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC nanoseconds of an [`Instant`] in the past.
fn instant_ns(t: Instant) -> u64 {
    mono_ns().saturating_sub(crate::run::nanos(t.elapsed()))
}

/// How a child runs `step`, in order: `false` with threads (or no readers), `true` with
/// reader processes. Only `pq.n` and `rq.n` of an engine have reader processes (`--readers`),
/// not the limits.
pub fn runs(cfg: &Config, step: Step, limit: bool) -> &'static [bool] {
    if step.reader_processes_apply() && !limit {
        cfg.readers.runs()
    } else {
        &[false]
    }
}

// ---- the reader process -----------------------------------------------------------------

/// A reader process's whole life (`--internal-reader`): the exit code.
pub fn reader_main(cfg: &Config, role: &ReaderRole, factories: &[&dyn EngineFactory]) -> i32 {
    crate::memlimit::die_with_parent();
    let Some(factory) = factories.iter().find(|f| f.name() == role.engine) else {
        eprintln!("error: no engine {:?}", role.engine);
        return 2;
    };
    let Some(root) = &cfg.dir else {
        eprintln!("error: a reader process needs --dir");
        return 2;
    };
    let dir = root.join(dir_name(&role.engine, &role.setup));
    match reader_run(cfg, role, *factory, &dir) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "error: reader process {} of {}: {e}",
                role.index,
                role.step.name()
            );
            1
        }
    }
}

fn reader_run(
    cfg: &Config,
    role: &ReaderRole,
    factory: &dyn EngineFactory,
    dir: &Path,
) -> Result<()> {
    let engine = factory.open_reader(dir, &role.setup, &engine_config(cfg))?;
    let seed = cfg.seed.unwrap_or(0);
    let values = Values::new(cfg.value_size, seed ^ 0x5eed);
    let ib = IbState::default();
    let rb = crate::rb::RbState::default();
    let child_role = ChildRole {
        engine: role.engine.clone(),
        setup: role.setup.clone(),
        results: PathBuf::new(),
        cgroup: None,
    };
    let ctx = Ctx {
        cfg,
        engine: &*engine,
        keys: KeyGen::new(cfg.key_size)?,
        values: &values,
        seed,
        dir,
        device: None,
        role: &child_role,
        limit: false,
        ib: &ib,
        rb: &rb,
    };
    let handle = engine.reader()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if line.trim() != "go" {
        return Err(format!("expected go on stdin, got {line:?}").into());
    }
    // Stop at the next line or at the end of stdin (the child died). The thread is left
    // blocked in its read if the loop fails first: the process exits.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut l = String::new();
            let _ = std::io::stdin().lock().read_line(&mut l);
            stop.store(true, Ordering::Relaxed);
        });
    }
    let done = work(&ctx, role.step, role.index, Handle::R(handle), &stop)?;
    writeln!(out, "done {} {}", done.ops, instant_ns(done.end))?;
    for v in done.hist.iter_recorded() {
        writeln!(out, "h {} {}", v.value_iterated_to(), v.count_at_value())?;
    }
    writeln!(out, "end")?;
    out.flush()?;
    Ok(())
}

// ---- the engine's child -----------------------------------------------------------------

/// The reader processes of one step; killed and reaped if the step ends early.
struct Readers {
    procs: Vec<Proc>,
}

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Readers {
    fn drop(&mut self) {
        for p in &mut self.procs {
            // Ours, started by this step: kill those still running, reap all.
            if matches!(p.child.try_wait(), Ok(None)) {
                let _ = p.child.kill();
            }
            let _ = p.child.wait();
        }
    }
}

impl Proc {
    /// The next line of the reader's stdout, or why there is none.
    fn line(&mut self, i: usize) -> Result<String> {
        let mut l = String::new();
        if self.stdout.read_line(&mut l)? == 0 {
            let status = self.child.wait()?;
            return Err(format!("reader process {i} ended ({status}) without reporting").into());
        }
        Ok(l.trim_end().to_string())
    }

    fn say(&mut self, what: &str) {
        if let Some(w) = &mut self.stdin {
            // A reader that died has closed the pipe: its exit is reported when it is read.
            let _ = writeln!(w, "{what}").and_then(|()| w.flush());
        }
    }
}

/// Run `step`'s readers as `step.threads(n)` processes reading the child's database for the
/// step's seconds.
pub(crate) fn run(ctx: &Ctx<'_>, step: Step) -> Result<Outcome> {
    let n = step.threads(ctx.cfg.threads);
    let exe = std::env::current_exe()?;
    let root = ctx
        .dir
        .parent()
        .ok_or("the engine's directory has no parent")?;
    let mut readers = Readers { procs: Vec::new() };
    for t in 0..n {
        let args = ctx
            .cfg
            .reader_args(&ctx.role.engine, &ctx.role.setup, ctx.seed, root, step, t);
        let mut child = Command::new(&exe)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start reader process {t}: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        readers.procs.push(Proc {
            child,
            stdin,
            stdout,
        });
    }
    for (i, p) in readers.procs.iter_mut().enumerate() {
        let l = p.line(i)?;
        if l != "ready" {
            return Err(format!("reader process {i} said {l:?}, not ready").into());
        }
    }
    for p in &mut readers.procs {
        p.say("go");
    }
    let start = mono_ns();
    let t0 = Instant::now();
    let dur = Duration::from_secs_f64(ctx.cfg.secs);
    // As the threads' step: stop at the time, or early when a reader has ended (failed).
    'wait: loop {
        let left = dur.saturating_sub(t0.elapsed());
        if left.is_zero() {
            break;
        }
        for p in &mut readers.procs {
            if !matches!(p.child.try_wait(), Ok(None)) {
                break 'wait;
            }
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
    for p in &mut readers.procs {
        p.say("stop");
        p.stdin = None;
    }
    let mut hist = new_hist();
    let mut ops = 0;
    let mut end = start;
    for (i, p) in readers.procs.iter_mut().enumerate() {
        let l = p.line(i)?;
        let parse = |s: Option<&str>| -> Result<u64> {
            s.and_then(|x| x.parse().ok())
                .ok_or_else(|| format!("reader process {i}: bad report {l:?}").into())
        };
        let mut w = l.split(' ');
        if w.next() != Some("done") {
            return Err(format!("reader process {i}: bad report {l:?}").into());
        }
        ops += parse(w.next())?;
        end = end.max(parse(w.next())?);
        loop {
            let l = p.line(i)?;
            if l == "end" {
                break;
            }
            let mut w = l.split(' ');
            let (Some("h"), Some(v), Some(c)) = (w.next(), w.next(), w.next()) else {
                return Err(format!("reader process {i}: bad histogram line {l:?}").into());
            };
            let (v, c): (u64, u64) = match (v.parse(), c.parse()) {
                (Ok(v), Ok(c)) => (v, c),
                _ => return Err(format!("reader process {i}: bad histogram line {l:?}").into()),
            };
            hist.record_n(v, c)
                .map_err(|e| format!("reader process {i}: histogram: {e}"))?;
        }
        let status = p.child.wait()?;
        if !status.success() {
            return Err(format!("reader process {i} ended with {status}").into());
        }
    }
    drop(readers);
    Ok(Outcome {
        ops,
        secs: (end - start) as f64 / 1e9,
        hist,
        writer_writes: None,
        tenths: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monotonic_clock_is_the_instant_clock() {
        let a = mono_ns();
        let t = Instant::now();
        let b = instant_ns(t);
        let c = mono_ns();
        assert!(a <= b + 1_000_000 && b <= c + 1_000_000, "{a} {b} {c}");
    }
}
