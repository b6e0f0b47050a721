//! A rough simulation of a copy-on-write B+tree under random inserts, to compare free-space
//! policies on file size and on write runs (seeks) per commit before the engine's benchmark.
//!
//! `cargo run --release -p larch-freelist --example policy_sim [COMMITS] [KEYS_PER_COMMIT]`
//!
//! Model: leaves hold up to 64 keys and split in half; a branch covers 100 leaves; a commit
//! inserts KEYS_PER_COMMIT keys into uniformly random leaves, rewrites every touched leaf, its
//! branch and the root (copy-on-write: old pages pending under the commit's txid), allocating one
//! page at a time in key order (leaves, then their branch, then the root), as the engine does.
//! Before each commit, pages freed by the previous commit are released (the durable fallback
//! meta is the only pin, as with sync commits and no readers). A free tail of 64+ pages is
//! truncated. Not modelled: the meta page, the free-space metadata's own pages, overflow
//! values, readers.

use larch_freelist::{
    AppendPreferringPolicy, ExtentSet, FreeSpace, FreeSpacePolicy, PageId, PolicyKind,
};

const LEAF_CAP: u32 = 64;
const FANOUT: usize = 100;
const TRUNCATE_AT: u64 = 64;

struct Rng(u64);

impl Rng {
    fn below(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % m
    }
}

/// Append-preferring with another rule for where to start a new run (for comparison only).
#[derive(Debug)]
struct Variant {
    set: ExtentSet,
    min_run: u64,
    cursor: Option<PageId>,
    largest: bool,
}

impl FreeSpacePolicy for Variant {
    fn kind(&self) -> PolicyKind {
        PolicyKind::AppendPreferring
    }
    fn allocate(&mut self, n: u64) -> Option<PageId> {
        let start = match self.cursor.take() {
            Some(c) if self.set.extent_at(c).is_some_and(|l| l >= n) => c,
            _ => {
                let want = n.max(self.min_run);
                if self.largest {
                    self.set.largest().filter(|&(_, l)| l >= want)?.0
                } else {
                    self.set.best_fit(want)?.0
                }
            }
        };
        assert!(self.set.remove(start, n));
        self.cursor = Some(start + n);
        Some(start)
    }
    fn insert(&mut self, start: PageId, n: u64) {
        self.set.insert(start, n)
    }
    fn remove(&mut self, start: PageId, n: u64) -> bool {
        self.set.remove(start, n)
    }
    fn contains(&self, page: PageId) -> bool {
        self.set.contains(page)
    }
    fn len(&self) -> u64 {
        self.set.len()
    }
    fn truncate(&mut self, end: PageId) {
        self.set.truncate(end)
    }
    fn tail_run(&self, end: PageId) -> u64 {
        self.set.tail_run(end)
    }
    fn extents(&self) -> Vec<(PageId, u64)> {
        self.set.extents()
    }
}

/// Makes a fresh policy for one simulated run.
type Build = Box<dyn Fn() -> Box<dyn FreeSpacePolicy>>;

struct Tree {
    /// (page, keys) per leaf, in key order.
    leaves: Vec<(PageId, u32)>,
    /// Page of branch j, covering leaves j*FANOUT..(j+1)*FANOUT.
    branches: Vec<PageId>,
    root: PageId,
}

struct Outcome {
    runs_per_commit: f64,
    final_pages: u64,
    peak_pages: u64,
    live_pages: u64,
    extents: usize,
}

fn simulate(
    policy: Box<dyn FreeSpacePolicy>,
    commits: u64,
    keys_per_commit: u64,
    seed: u64,
) -> Outcome {
    let mut rng = Rng(seed);
    let mut fs = FreeSpace::new(PolicyKind::Null);
    fs.policy = policy;
    // Bulk-loaded start: 2,000 leaves 3/4 full, then their branches, then the root.
    let mut hwm: PageId = 2;
    let fresh = |hwm: &mut PageId| {
        *hwm += 1;
        *hwm - 1
    };
    let leaves: Vec<_> = (0..2000).map(|_| (fresh(&mut hwm), 48)).collect();
    let branches: Vec<_> = (0..leaves.len().div_ceil(FANOUT))
        .map(|_| fresh(&mut hwm))
        .collect();
    let root = fresh(&mut hwm);
    let mut t = Tree {
        leaves,
        branches,
        root,
    };
    let (mut runs, mut peak) = (0u64, hwm);
    for txid in 1..=commits {
        fs.release(txid - 1);
        // Insert keys; remember which leaves are dirty (by index after splits).
        let mut dirty = vec![false; t.leaves.len()];
        for _ in 0..keys_per_commit {
            let i = rng.below(t.leaves.len() as u64) as usize;
            t.leaves[i].1 += 1;
            dirty[i] = true;
            if t.leaves[i].1 > LEAF_CAP {
                t.leaves[i].1 = LEAF_CAP / 2;
                t.leaves.insert(i + 1, (PageId::MAX, LEAF_CAP / 2 + 1));
                dirty.insert(i + 1, true);
            }
        }
        // Write every dirty leaf, then its branch, in key order; then the root.
        let mut written: Vec<PageId> = Vec::new();
        let mut alloc = |fs: &mut FreeSpace, hwm: &mut PageId, old: PageId| {
            if old != PageId::MAX {
                fs.free(txid, old, 1);
            }
            let p = fs.policy.allocate(1).unwrap_or_else(|| fresh(hwm));
            written.push(p);
            p
        };
        let nbranches = t.leaves.len().div_ceil(FANOUT);
        t.branches.resize(nbranches, PageId::MAX);
        for j in 0..nbranches {
            let range = j * FANOUT..((j + 1) * FANOUT).min(t.leaves.len());
            let mut any = false;
            for i in range {
                if dirty[i] {
                    t.leaves[i].0 = alloc(&mut fs, &mut hwm, t.leaves[i].0);
                    any = true;
                }
            }
            if any {
                t.branches[j] = alloc(&mut fs, &mut hwm, t.branches[j]);
            }
        }
        t.root = alloc(&mut fs, &mut hwm, t.root);
        written.sort_unstable();
        runs += 1 + written.windows(2).filter(|w| w[1] != w[0] + 1).count() as u64;
        peak = peak.max(hwm);
        let tail = fs.policy.tail_run(hwm);
        if tail >= TRUNCATE_AT {
            hwm -= tail;
            fs.policy.truncate(hwm);
        }
    }
    fs.release(commits);
    Outcome {
        runs_per_commit: runs as f64 / commits as f64,
        final_pages: hwm,
        peak_pages: peak,
        live_pages: 2 + t.leaves.len() as u64 + t.branches.len() as u64 + 1,
        extents: fs.policy.extents().len(),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let commits = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let keys = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    println!("{commits} commits of {keys} random inserts, one page per allocate");
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "policy", "runs/cmt", "file pg", "peak pg", "live pg", "file/live", "extents"
    );
    let mut cases: Vec<(String, Build)> = PolicyKind::ALL
        .into_iter()
        .map(|k| (k.name().to_string(), Box::new(move || k.build()) as Build))
        .collect();
    for n in [4, 16, 32] {
        cases.push((
            format!("append-run N={n}"),
            Box::new(move || Box::new(AppendPreferringPolicy::with_min_run(n))),
        ));
    }
    for (name, largest) in [("append-run/best", false), ("append-run/largest", true)] {
        cases.push((
            name.to_string(),
            Box::new(move || {
                Box::new(Variant {
                    set: ExtentSet::with_length_index(),
                    min_run: 8,
                    cursor: None,
                    largest,
                })
            }),
        ));
    }
    for (name, build) in &cases {
        let o = simulate(build(), commits, keys, 0x9e37_79b9_7f4a_7c15);
        println!(
            "{:<22} {:>10.1} {:>10} {:>10} {:>10} {:>8.2}x {:>8}",
            name,
            o.runs_per_commit,
            o.final_pages,
            o.peak_pages,
            o.live_pages,
            o.final_pages as f64 / o.live_pages as f64,
            o.extents
        );
    }
}
