//! Process kill: a child process commits in a loop with `Durability::Sync`, printing `ack <n>`
//! after each commit returns; the parent SIGKILLs it at a random moment, reopens the file and
//! requires that `check()` passes, every acknowledged commit survived, and nothing partial did:
//! the contents are exactly the state after commit `n` or `n + 1`, where `n` is the last ack.
//!
//! The `hybrid` and `mmap-async` modes mix durabilities: three commits in four are Async
//! (their pages stored through the writable map: `Storage::write_deferred`), the fourth Sync.
//! An Async commit writes no meta, so a kill may lose the Async commits since the last
//! durable one: the file must hold exactly the state after some commit between the last
//! acknowledged Sync commit and the one in flight. The NoMetaSync modes expect every
//! acknowledged commit: a kill keeps what the process wrote, and a NoMetaSync commit writes
//! its meta before it returns (only a power cut may lose it).
//!
//! The child is this test binary itself, re-executed to run the ignored test
//! `child_commit_loop`, which does nothing unless `LARCH_KILL_CHILD` names a database.
//! The same file is reused across kills, so each child also recovers what the last one left.
//! `LARCH_KILL_ROUNDS` changes the number of kills per write mode (default 10).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use larch::{Db, Durability, Options, Policy, WriteMode};
use larch_testkit::Rng;

type Tree = BTreeMap<Vec<u8>, Vec<u8>>;

const DATA: &str = "data";
const COUNTER: &str = "counter";

fn key(n: u64) -> Vec<u8> {
    format!("key-{n:08}").into_bytes()
}

/// The value commit `n` writes: mostly small, every fifth one 10-40 KiB (an overflow run).
fn value(n: u64) -> Vec<u8> {
    let len = if n % 5 == 3 {
        10 * 1024 + (n as usize * 7919) % (30 * 1024)
    } else {
        20 + (n as usize * 31) % 300
    };
    (0..len)
        .map(|i| (n as usize).wrapping_mul(2654435761).wrapping_add(i * 13) as u8)
        .collect()
}

/// What commit `n` changes besides inserting `n`: it deletes one older key now and then.
fn deleted_by(n: u64) -> Option<u64> {
    (n % 3 == 0 && n > 4).then_some(n / 2)
}

/// The data tree after commits 1..=n.
fn state(n: u64) -> Tree {
    let mut t = Tree::new();
    for i in 1..=n {
        t.insert(key(i), value(i));
        if let Some(d) = deleted_by(i) {
            t.remove(&key(d));
        }
    }
    t
}

fn mode_from(s: &str) -> WriteMode {
    match s {
        "mmap" | "mmap-async" => WriteMode::Mmap,
        "pwrite"
        | "compact"
        | "saving"
        | "compact-saving"
        | "nometasync-saving"
        | "compact-nometasync"
        | "compact-nometasync-saving" => WriteMode::Pwrite,
        "hybrid" | "hybrid-saving" | "compact-async" | "compact-async-saving" => WriteMode::Hybrid,
        other => {
            panic!(
                "LARCH_KILL_MODE={other}: expected pwrite, mmap, mmap-async, hybrid, compact, \
                 saving, compact-saving, nometasync-saving, hybrid-saving, compact-async, \
                 compact-async-saving, compact-nometasync or compact-nometasync-saving"
            )
        }
    }
}

/// The durability commit `n` asks for in `mode`: Sync, or in the mixed modes three Async
/// commits (through the map) then a Sync one, or in the NoMetaSync modes NoMetaSync.
fn durability_of(mode: &str, n: u64) -> Durability {
    match mode {
        "hybrid" | "mmap-async" | "hybrid-saving" | "compact-async" | "compact-async-saving"
            if n % 4 != 0 =>
        {
            Durability::Async
        }
        "nometasync-saving" | "compact-nometasync" | "compact-nometasync-saving" => {
            Durability::NoMetaSync
        }
        _ => Durability::Sync,
    }
}

/// Whether a commit of durability `d` survives a SIGKILL once it is acknowledged: a kill
/// keeps what the process wrote (it is in the page cache), so every commit whose meta is
/// written before `commit` returns does, NoMetaSync ones included; an Async one writes none.
fn survives_a_kill(d: Durability) -> bool {
    d != Durability::Async
}

/// How the child opens the file. `compact`: the Null policy piles up dead pages so that a
/// background compaction (copy, catch-up, rename over the file) runs nearly all the time, and
/// kills land in the middle of them. `saving` and `compact-saving`: the same with at most 8
/// free-map bits carried past a commit (65,536 by default, which leaves every meta of these
/// small files behind), so that a commit saves the free map every few commits and kills land
/// on both kinds (docs/format.md, "A free map behind its meta"); `nometasync-saving`,
/// `hybrid-saving`, `compact-async-saving` and `compact-nometasync-saving` do so under the
/// other durabilities, and `compact-async` and `compact-nometasync` compact under them at the
/// default cap.
fn child_options(mode: &str) -> Options {
    let opts = Options::default()
        .durability(Durability::Sync)
        .write_mode(mode_from(mode));
    let opts = if mode.ends_with("saving") {
        opts.carried_max_bits(8)
    } else {
        opts
    };
    match mode {
        _ if mode.starts_with("compact") => opts
            .policy(Policy::Null)
            .compaction_threshold(Some(0.2))
            .compaction_min_bytes(0),
        _ => opts,
    }
}

/// The last commit the file holds (0 for a new file).
fn last_commit(db: &Db) -> u64 {
    let rx = db.begin_read().unwrap();
    let t = match rx.open_tree(COUNTER) {
        Ok(t) => t,
        Err(larch::Error::TreeNotFound(_)) => return 0,
        Err(e) => panic!("{e}"),
    };
    t.get(b"last")
        .unwrap()
        .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()))
}

/// The child: commit forever (until killed), acknowledging each commit on stdout.
#[test]
#[ignore = "run by the kill tests as a child process"]
fn child_commit_loop() {
    let Ok(path) = std::env::var("LARCH_KILL_CHILD") else {
        return;
    };
    let mode = std::env::var("LARCH_KILL_MODE").unwrap_or_default();
    let db = Db::open(&path, child_options(&mode)).unwrap();
    let start = last_commit(&db);
    let stdout = std::io::stdout();
    for n in start + 1..start + 100_000 {
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(durability_of(&mode, n));
        {
            let mut t = tx.open_tree(DATA).unwrap();
            t.insert(&key(n), &value(n)).unwrap();
            if let Some(d) = deleted_by(n) {
                t.remove(&key(d)).unwrap();
            }
        }
        tx.open_tree(COUNTER)
            .unwrap()
            .insert(b"last", &n.to_le_bytes())
            .unwrap();
        tx.commit().unwrap();
        let mut out = stdout.lock();
        let done = db.compactions();
        if done > 0 && writeln!(out, "compactions {done}").is_err() {
            return;
        }
        if writeln!(out, "ack {n}").and_then(|_| out.flush()).is_err() {
            return; // the parent is gone
        }
    }
}

/// The number in an `ack <n>` line (libtest may print its own text on the same line).
fn ack_of(line: &str) -> Option<u64> {
    let (_, rest) = line.rsplit_once("ack ")?;
    rest.trim().parse().ok()
}

/// Start a child on `path`, let it acknowledge `acks` commits, wait `delay`, SIGKILL it.
/// Returns the last commit it acknowledged and the last of those that survive a kill (0 if
/// none did: then the commits the file held before are the durable ones).
fn commit_and_kill(path: &Path, mode: &str, acks: u64, delay: Duration, ctx: &str) -> (u64, u64) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_commit_loop",
            "--nocapture",
            "--include-ignored",
        ])
        .env("LARCH_KILL_CHILD", path)
        .env("LARCH_KILL_MODE", mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut last = None;
    let mut durable = 0;
    let mut seen = 0;
    while seen < acks {
        let line = match lines.next() {
            Some(l) => l.unwrap(),
            None => {
                let status = child.wait().unwrap();
                panic!("{ctx}: the child exited ({status}) after {seen} acks, before the kill");
            }
        };
        note_compactions(&line);
        if let Some(n) = ack_of(&line) {
            assert!(
                last.is_none_or(|l| n == l + 1),
                "{ctx}: ack {n} after {last:?}"
            );
            last = Some(n);
            if survives_a_kill(durability_of(mode, n)) {
                durable = n;
            }
            seen += 1;
        }
    }
    std::thread::sleep(delay);
    let rc = sigkill(child.id());
    assert_eq!(rc, 0, "{ctx}: kill failed");
    // Acks printed before the kill landed count too.
    for line in lines {
        let Ok(line) = line else { break };
        if let Some(n) = ack_of(&line) {
            last = Some(n);
            if survives_a_kill(durability_of(mode, n)) {
                durable = n;
            }
        }
    }
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "{ctx}: the child was not killed by SIGKILL: {status}"
    );
    (last.unwrap(), durable)
}

/// Whether the newest valid meta in the file at `path` leaves its free map behind.
fn newest_meta_is_behind(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap();
    let page = Options::default().get_page_size();
    [0, page]
        .iter()
        .filter_map(|&at| bytes.get(at..at + 128))
        .filter_map(|m| larch::raw::Meta::decode(m).ok())
        .max_by_key(|m| m.txid)
        .expect("no valid meta in the file")
        .freemap_behind
}

/// Background compactions the children of the running `kill_repeatedly` reported finishing
/// (the most any one child saw); the tests take turns (`SPAWN`), each starting it at zero.
static COMPACTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn note_compactions(line: &str) {
    if let Some(n) = line
        .strip_prefix("compactions ")
        .and_then(|r| r.trim().parse().ok())
    {
        COMPACTIONS.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `kill(pid, SIGKILL)`.
fn sigkill(pid: u32) -> i32 {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; the pid is our own
    // child's, not yet waited for, so it cannot have been reused.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }
}

/// Reopen after a kill: check, and require the state after a commit from `durable` (the
/// last acknowledged commit that survives a kill, or what the file held before the child:
/// nothing newer can be lost) to `acked + 1` (the one in flight), whole. Without Async commits
/// `durable` is `acked`.
fn verify(path: &Path, mode: WriteMode, durable: u64, acked: u64, ctx: &str) -> u64 {
    let db = Db::open(path, Options::default().create(false).write_mode(mode))
        .unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
    if let Err(e) = db.check() {
        panic!("{ctx}: check failed after the kill: {e}");
    }
    let last = last_commit(&db);
    assert!(
        (durable..=acked + 1).contains(&last),
        "{ctx}: the file holds commit {last}, but {durable} was the last acknowledged durable \
         and {acked} the last acknowledged"
    );
    let rx = db.begin_read().unwrap();
    let got: Tree = match rx.open_tree(DATA) {
        Ok(t) => t
            .iter()
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{ctx}: scan failed: {e}")),
        // The first child killed before its first commit that survives a kill (Async ones
        // before it): the file holds no commit, so no tree.
        Err(larch::Error::TreeNotFound(_)) if last == 0 => Tree::new(),
        Err(e) => panic!("{ctx}: the data tree: {e}"),
    };
    let want = state(last);
    if got != want {
        let missing = want.keys().filter(|k| !got.contains_key(*k)).count();
        let extra = got.keys().filter(|k| !want.contains_key(*k)).count();
        let wrong = want
            .iter()
            .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
            .count();
        panic!(
            "{ctx}: contents are not the state after commit {last}: {missing} keys missing, \
             {extra} extra, {wrong} with the wrong value"
        );
    }
    if let Ok(t) = rx.open_tree(DATA) {
        assert_eq!(t.len().unwrap(), want.len() as u64, "{ctx}: len() is wrong");
    }
    last
}

/// SIGKILL children committing in `mode` again and again, checking the file after each
/// kill; returns the most compactions a child reported finishing. The tests take turns.
fn kill_repeatedly(mode: &str) -> u64 {
    let _one_at_a_time = SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    let rounds: u64 = std::env::var("LARCH_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    // `LARCH_KILL_SEED` repeats a run's choices of acks and delays (not its timing).
    let seed = std::env::var("LARCH_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
        | 1;
    eprintln!("kill test ({mode}): seed {seed}");
    COMPACTIONS.store(0, std::sync::atomic::Ordering::Relaxed);
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kill.larch");
    let mut total = 0;
    let mut in_flight = 0;
    // Kills that found Async commits acknowledged after the last durable one.
    let mut after_async = 0;
    // Kills after which the file's newest meta had saved the free map, and had left it behind.
    let mut newest_saved = [0u64; 2];
    // A saving mode must see both kinds of newest meta (below); where a kill lands is chance,
    // so such a mode kills on, up to four times as often, until it has.
    let both = !mode.starts_with("compact");
    let covered = |s: &[u64; 2]| !mode.ends_with("saving") || (s[0] > 0 && (s[1] > 0 || !both));
    let mut round = 0;
    while round < rounds || (round < 4 * rounds && !covered(&newest_saved)) {
        let acks = 1 + rng.below(40);
        let delay = Duration::from_micros(rng.below(3000));
        let ctx = format!("{mode} round {round} (seed {seed}, {acks} acks, {delay:?})");
        let (acked, durable) = commit_and_kill(&path, mode, acks, delay, &ctx);
        assert!(acked > total, "{ctx}: no commit acknowledged");
        newest_saved[usize::from(newest_meta_is_behind(&path))] += 1;
        after_async += u64::from(acked > durable);
        total = verify(&path, mode_from(mode), durable.max(total), acked, &ctx);
        in_flight += u64::from(total == acked + 1);
        round += 1;
    }
    eprintln!(
        "kill test ({mode}): {round} kills, {total} commits survived; {in_flight} kills \
         landed after a commit's meta write but before its ack; {after_async} after Async \
         commits newer than the last durable one"
    );
    if mode.ends_with("saving") && rounds >= 10 {
        // The cap makes a commit save the free map every few commits: kills must find
        // both kinds of newest meta, or the mode tested one of them only. Under the Null
        // policy of the compaction modes nearly every commit changes more bits than the cap
        // and saves, so there a saved one is what the cap must show (their modes without
        // it leave every meta behind).
        assert!(
            covered(&newest_saved),
            "{mode}: newest meta saved the free map after {} kills, behind after {}",
            newest_saved[0],
            newest_saved[1]
        );
    }
    if durability_of(mode, 1) == Durability::Async && rounds >= 5 {
        // Most kills land after an Async ack (three commits in four): none means the children
        // made no Async commits, and the map path went untested.
        assert!(
            after_async > 0,
            "{mode}: no kill landed after an Async commit"
        );
    }
    COMPACTIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Until a spawned child execs it holds copies of every descriptor, flock locks included: the
/// tests run one at a time (`kill_repeatedly`) so one's spawn never makes another's file look
/// locked.
static SPAWN: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn sigkill_during_pwrite_sync_commits_keeps_every_acknowledged_commit_and_no_partial_one() {
    kill_repeatedly("pwrite");
}

#[test]
fn sigkill_during_mmap_sync_commits_keeps_every_acknowledged_commit_and_no_partial_one() {
    kill_repeatedly("mmap");
}

#[test]
fn sigkill_during_hybrid_async_commits_through_the_map_keeps_every_durable_commit() {
    kill_repeatedly("hybrid");
}

#[test]
fn sigkill_during_mmap_async_commits_keeps_every_durable_commit() {
    kill_repeatedly("mmap-async");
}

#[test]
fn sigkill_during_background_compaction_keeps_every_acknowledged_commit() {
    // Whatever the kill interrupts (the copy, a catch-up, the rename, the directory sync), the
    // file at the path is the old one or the new one, whole, with every acknowledged commit.
    kill_compactions_repeatedly("compact");
}

/// [`kill_repeatedly`] in a compaction mode; some child must have finished a compaction.
fn kill_compactions_repeatedly(mode: &str) {
    let done = kill_repeatedly(mode);
    assert!(
        done > 0,
        "{mode}: no child finished a background compaction: the kills tested nothing"
    );
}

#[test]
fn sigkill_during_sync_commits_that_save_the_free_map_every_few_keeps_every_acknowledged_commit() {
    kill_repeatedly("saving");
}

#[test]
fn sigkill_during_background_compaction_with_free_map_saves_keeps_every_acknowledged_commit() {
    kill_compactions_repeatedly("compact-saving");
}

#[test]
fn sigkill_during_nometasync_commits_that_save_the_free_map_every_few_keeps_every_acknowledged_commit(
) {
    kill_repeatedly("nometasync-saving");
}

#[test]
fn sigkill_during_async_commits_that_save_the_free_map_every_few_keeps_every_durable_commit() {
    kill_repeatedly("hybrid-saving");
}

#[test]
fn sigkill_during_background_compaction_of_async_commits_with_free_map_saves_keeps_every_durable_commit(
) {
    kill_compactions_repeatedly("compact-async-saving");
}

#[test]
fn sigkill_during_background_compaction_of_nometasync_commits_with_free_map_saves_keeps_every_acknowledged_commit(
) {
    kill_compactions_repeatedly("compact-nometasync-saving");
}

#[test]
fn sigkill_during_background_compaction_of_async_commits_keeps_every_durable_commit() {
    kill_compactions_repeatedly("compact-async");
}

#[test]
fn sigkill_during_background_compaction_of_nometasync_commits_keeps_every_acknowledged_commit() {
    kill_compactions_repeatedly("compact-nometasync");
}
