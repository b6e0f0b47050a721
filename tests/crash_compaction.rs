//! Power cuts during compaction by copy: `Db::compact_to` and the background compaction that
//! `Options::compaction_threshold` starts (copy, catch-up commits, rename over the old file).
//!
//! Compaction involves several files and directory operations, so the recording here is of a
//! whole directory (larch-testkit's `directory`): every page write, sync and resize of every
//! file (the database, the compacted copy) and every link, rename, removal and directory sync,
//! in the order they happened. For a cut after operation k we build what a disk could hold:
//! each file to its last sync plus any subset of its later blocks, some torn; the directory to
//! its last sync plus a prefix of the later operations.
//!
//! The database's path must then name a complete database (old or new file, never neither)
//! holding a committed state no older than the last commit acknowledged as durable, and the
//! destination of `compact_to`, when it exists, must hold exactly the snapshot it copied.
//! `LARCH_CRASH_CASES` raises the number of random cuts per background run (default 300).

mod support;
use larch_testkit::directory::{self, Log, Op, RecordingFs};
use support::images::{takes_a_commit, Image};
use support::recording::open_rw;
use support::{scratch_dir, Rng};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use larch::{Db, Durability, Options, Policy};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const DB: &str = "db.larch";
const DST: &str = "copy.larch";
const ALIAS: &str = "alias.larch";

/// Everything a run recorded.
struct Trace {
    ops: Vec<Op>,
    initial: Vec<Vec<u8>>,
    /// Committed states in commit order.
    states: Vec<Model>,
    /// (ops done when the commit returned, index into `states`) for Sync commits.
    durable_acks: Vec<(usize, usize)>,
    /// (ops done when compact_to returned, ops done when it began, the state it copied).
    copy: Option<(usize, usize, usize)>,
    opts: Options,
}

fn key(i: u64) -> Vec<u8> {
    format!("key{:06}", (i * 7919) % 1_000_003).into_bytes()
}

/// What the workload does between commits.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Commits, then `compact_to(DST)` halfway, then more commits.
    CompactTo,
    /// Commits under a compaction threshold; each commit waits for a compaction it started
    /// (so copies run without concurrent commits and every switch is at a known point).
    BackgroundQuiet,
    /// Commits keep going while the background copy runs (catch-up rounds, the last one under
    /// the writer lock); interleaving differs from run to run and every run is checked.
    BackgroundBusy,
}

fn run(mode: Mode, commits: u64, seed: u64) -> Trace {
    run_via(mode, commits, seed, false)
}

/// [`run`], opening the database through a symlink `ALIAS -> DB` when `via_link` is set: the
/// switch must then rename over `DB`, the file the link names, never over the link.
fn run_via(mode: Mode, commits: u64, seed: u64, via_link: bool) -> Trace {
    let dir = scratch_dir();
    let path = dir.path().join(DB);
    let background = !matches!(mode, Mode::CompactTo);
    let opts = Options::default()
        .policy(Policy::Null)
        .compaction_threshold(background.then_some(0.3))
        .compaction_min_bytes(0);
    drop(Db::open(&path, opts).unwrap());
    let log = Log::of_file(&path);
    let storage = Box::new(directory::recording(open_rw(&path), 0, &log));
    let fs = Arc::new(RecordingFs { log: log.clone() });
    let open_path = if via_link {
        let alias = dir.path().join(ALIAS);
        std::os::unix::fs::symlink(DB, &alias).unwrap();
        alias
    } else {
        path.clone()
    };
    let db = Db::open_with_storage_and_fs(&open_path, storage, opts, fs).unwrap();
    let ops_now = || log.ops.lock().unwrap().len();
    let mut model = Model::new();
    let mut states = vec![Model::new()];
    let mut durable_acks = Vec::new();
    let mut copy = None;
    let mut x = seed | 1;
    for c in 0..commits {
        let mut tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for _ in 0..12 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = key(x % 150);
                if x % 11 == 0 {
                    t.remove(&k).unwrap();
                    model.remove(&k);
                } else {
                    let v = vec![(c % 251) as u8; 60 + (x % 150) as usize];
                    t.insert(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
        }
        // Mostly durable commits; some Async ones (durable at the next Sync commit).
        let d = if c % 4 == 3 {
            Durability::Async
        } else {
            Durability::Sync
        };
        tx.set_durability(d);
        tx.commit().unwrap();
        states.push(model.clone());
        if matches!(d, Durability::Sync) {
            durable_acks.push((ops_now(), states.len() - 1));
        }
        if matches!(mode, Mode::BackgroundQuiet) {
            db.wait_for_compaction().unwrap();
        }
        if matches!(mode, Mode::CompactTo) && c == commits / 2 {
            let began = ops_now();
            db.compact_to(dir.path().join(DST)).unwrap();
            copy = Some((ops_now(), began, states.len() - 1));
        }
    }
    if background {
        db.wait_for_compaction().unwrap();
        assert!(db.compactions() >= 1, "{mode:?}: no compaction ran");
    }
    let files = log.files.lock().unwrap();
    let trace = Trace {
        ops: log.ops.lock().unwrap().clone(),
        initial: files.initial.clone(),
        states,
        durable_acks,
        copy,
        opts,
    };
    drop(files);
    // Leave the close-time sync out of the trace.
    std::mem::forget(db);
    trace
}

/// The directory (names to files) and each file's contents a cut after `k` ops may leave.
fn build_image(trace: &Trace, k: usize, how: Image) -> (BTreeMap<String, usize>, Vec<Vec<u8>>) {
    directory::image_at(
        &trace.initial,
        &trace.ops,
        k,
        how,
        trace.opts.get_page_size(),
        DB,
    )
}

fn contents(db: &Db) -> Model {
    let rx = db.begin_read().unwrap();
    let Ok(t) = rx.open_tree("t") else {
        return Model::new();
    };
    t.iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Open `img` as a database; its contents (after a full check).
fn open_image(img: &[u8], dir: &Path, opts: Options, ctx: &dyn Fn() -> String) -> Model {
    let path: PathBuf = dir.join("cut.larch");
    std::fs::write(&path, img).unwrap();
    let opts = opts.compaction_threshold(None);
    let db = Db::open(&path, opts).unwrap_or_else(|e| panic!("{}: open failed: {e}", ctx()));
    if let Err(e) = db.check() {
        panic!("{}: check failed: {e}", ctx());
    }
    let got = contents(&db);
    // The recovered file must take new commits.
    takes_a_commit(&db).unwrap_or_else(|e| panic!("{}: {e}", ctx()));
    drop(db);
    std::fs::remove_file(&path).unwrap();
    got
}

fn verify_cut(trace: &Trace, k: usize, how: Image, dir: &Path, label: &str) {
    let (names, files) = build_image(trace, k, how);
    let ctx = || {
        format!(
            "{label}: cut after {k} of {} ops, image {how:?}, directory {names:?}",
            trace.ops.len()
        )
    };
    let Some(&id) = names.get(DB) else {
        panic!("{}: the database's name is gone", ctx());
    };
    let got = open_image(&files[id], dir, trace.opts, &ctx);
    let min = trace
        .durable_acks
        .iter()
        .take_while(|(done, _)| *done <= k)
        .map(|&(_, s)| s)
        .last()
        .unwrap_or(0);
    assert!(
        trace.states[min..].contains(&got),
        "{}: file {id} holds no committed state from #{min} on ({} entries)",
        ctx(),
        got.len()
    );
    if let Some((done, began, state)) = trace.copy {
        match names.get(DST) {
            Some(&c) => {
                assert!(k > began, "{}: the copy exists before compact_to", ctx());
                let copied = open_image(&files[c], dir, trace.opts, &ctx);
                assert!(
                    copied == trace.states[state],
                    "{}: the compacted copy differs from the snapshot it copied",
                    ctx()
                );
            }
            None => assert!(
                k < done,
                "{}: compact_to returned but its file is gone",
                ctx()
            ),
        }
    }
}

fn cases() -> usize {
    std::env::var("LARCH_CRASH_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// Every cut, three images each.
fn exhaustive(trace: &Trace, label: &str) -> usize {
    let dir = scratch_dir();
    let mut cuts = 0;
    for k in 0..=trace.ops.len() {
        for how in [
            Image::DurableOnly,
            Image::Everything,
            Image::Random(k as u64 * 7919 + 1),
        ] {
            verify_cut(trace, k, how, dir.path(), label);
            cuts += 1;
        }
    }
    cuts
}

fn dir_ops(trace: &Trace) -> usize {
    trace.ops.iter().filter(|o| o.file().is_none()).count()
}

#[test]
fn every_cut_of_compact_to_leaves_the_source_whole_and_the_copy_absent_or_complete() {
    let trace = run(Mode::CompactTo, 24, 0x9e37_79b9);
    assert!(trace.copy.is_some());
    let cuts = exhaustive(&trace, "compact_to");
    eprintln!(
        "compact_to: {cuts} cuts over {} ops ({} directory ops)",
        trace.ops.len(),
        dir_ops(&trace)
    );
}

#[test]
fn every_cut_of_background_compaction_leaves_the_old_or_the_new_file_whole() {
    let trace = run(Mode::BackgroundQuiet, 60, 0x51ed_270b);
    assert!(
        trace
            .ops
            .iter()
            .any(|o| matches!(o, Op::Rename { to, .. } if to == DB)),
        "no switch happened"
    );
    let cuts = exhaustive(&trace, "background, quiet");
    eprintln!(
        "background (quiet): {cuts} cuts over {} ops ({} directory ops)",
        trace.ops.len(),
        dir_ops(&trace)
    );
}

#[test]
fn every_cut_of_background_compaction_opened_through_a_symlink_switches_the_file_it_names() {
    let trace = run_via(Mode::BackgroundQuiet, 60, 0x7f4a_7c15, true);
    let renamed_to = |name: &str| {
        trace
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Rename { to, .. } if to == name))
            .count()
    };
    assert!(renamed_to(DB) >= 1, "no switch happened");
    assert_eq!(renamed_to(ALIAS), 0, "the switch renamed over the symlink");
    let cuts = exhaustive(&trace, "background through a symlink");
    eprintln!(
        "background through a symlink: {cuts} cuts over {} ops",
        trace.ops.len()
    );
}

#[test]
fn random_cuts_of_background_compaction_racing_commits_keep_every_durable_commit() {
    let mut total = 0;
    let mut switches = 0;
    for seed in 1..=3u64 {
        let trace = run(Mode::BackgroundBusy, 80, seed * 0x2545_f491);
        switches += trace
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Rename { to, .. } if to == DB))
            .count();
        let dir = scratch_dir();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        // Cuts around each directory operation are the interesting ones; the rest at random.
        let mut ks: Vec<usize> = trace
            .ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.file().is_none())
            .flat_map(|(i, _)| [i, i + 1])
            .collect();
        for _ in 0..cases() {
            ks.push(rng.below(trace.ops.len() as u64 + 1) as usize);
        }
        for k in ks {
            for how in [
                Image::DurableOnly,
                Image::Everything,
                Image::Random(rng.next()),
            ] {
                verify_cut(
                    &trace,
                    k,
                    how,
                    dir.path(),
                    &format!("background, busy {seed}"),
                );
                total += 1;
            }
        }
    }
    assert!(switches >= 1, "no switch happened in any run");
    eprintln!("background (busy): {total} cuts over 3 runs, {switches} switches");
}
