//! Random operation sequences checked against a plain-set model of a database's pages.
//!
//! The model tracks every page below the end of the file as exactly one of: in use, pending
//! (freed by some txid), or free. Operations pick their pages from the model so that the
//! engine's preconditions (only in-use pages are freed or inserted) always hold.
//!
//! Every sequence runs under each policy in `PolicyKind::ALL`; `allocate` must pick exactly the
//! run that policy's rule names (restated here from its spec), `allocate_lowest` the lowest run.

use std::collections::BTreeSet;

use larch_freelist::{AppendPreferringPolicy, FreeSpace, PageId, PolicyKind, TxId};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

#[derive(Debug, Clone)]
enum Op {
    Allocate(u64),
    /// The lowest run, whatever the policy prefers (in-place compaction).
    AllocateLowest(u64),
    /// Straight into the reusable set, as when loading the persisted free map.
    Insert {
        pick: usize,
        n: u64,
    },
    Remove {
        pick: usize,
        n: u64,
        from_free: bool,
    },
    Free {
        txid: TxId,
        pick: usize,
        n: u64,
    },
    /// Abort: undo one pending free.
    Unfree {
        pick: usize,
    },
    Release(TxId),
    /// Truncate away some of the free tail.
    Truncate {
        pick: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (1u64..8).prop_map(Op::Allocate),
        2 => (1u64..10).prop_map(Op::AllocateLowest),
        1 => (any::<usize>(), 1u64..8).prop_map(|(pick, n)| Op::Insert { pick, n }),
        2 => (any::<usize>(), 1u64..8, any::<bool>())
            .prop_map(|(pick, n, from_free)| Op::Remove { pick, n, from_free }),
        5 => (0u64..12, any::<usize>(), 1u64..8)
            .prop_map(|(txid, pick, n)| Op::Free { txid, pick, n }),
        1 => any::<usize>().prop_map(|pick| Op::Unfree { pick }),
        3 => (0u64..14).prop_map(Op::Release),
        1 => any::<u64>().prop_map(|pick| Op::Truncate { pick }),
    ]
}

#[derive(Debug, Default)]
struct Model {
    eof: PageId,
    in_use: BTreeSet<PageId>,
    free: BTreeSet<PageId>,
    pending: Vec<(TxId, PageId, u64)>,
    /// Where append-run continues its current run (its spec, restated).
    cursor: Option<PageId>,
}

impl Model {
    fn pending_pages(&self) -> BTreeSet<PageId> {
        self.pending
            .iter()
            .flat_map(|&(_, s, n)| s..s + n)
            .collect()
    }

    fn free_extents(&self) -> Vec<(PageId, u64)> {
        let mut out: Vec<(PageId, u64)> = Vec::new();
        for &p in &self.free {
            match out.last_mut() {
                Some((s, l)) if *s + *l == p => *l += 1,
                _ => out.push((p, 1)),
            }
        }
        out
    }

    fn lowest_run(&self, n: u64) -> Option<PageId> {
        self.free_extents()
            .into_iter()
            .find(|&(_, l)| l >= n)
            .map(|(s, _)| s)
    }

    /// The shortest run of at least `n` free pages; among equal ones, the lowest.
    fn best_run(&self, n: u64) -> Option<PageId> {
        self.free_extents()
            .into_iter()
            .filter(|&(_, l)| l >= n)
            .min_by_key(|&(s, l)| (l, s))
            .map(|(s, _)| s)
    }

    /// Append-run: continue at the cursor if a free extent of at least `n` pages starts
    /// there, else start the lowest extent of at least max(min_run, n) pages, else append.
    fn append_run(&mut self, n: u64) -> Option<PageId> {
        let cursor = self.cursor.take();
        let at_cursor = self
            .free_extents()
            .into_iter()
            .any(|(s, l)| Some(s) == cursor && l >= n);
        let start = if at_cursor {
            cursor
        } else {
            self.lowest_run(n.max(AppendPreferringPolicy::DEFAULT_MIN_RUN))
        };
        self.cursor = start.map(|s| s + n);
        start
    }

    /// Hand out free pages start..start+n, checking nothing else could hold them.
    fn take_free(&mut self, start: PageId, n: u64) -> Result<(), TestCaseError> {
        let pending = self.pending_pages();
        for p in start..start + n {
            prop_assert!(!self.in_use.contains(&p), "page {} handed out twice", p);
            prop_assert!(!pending.contains(&p), "pending page {} handed out", p);
            prop_assert!(self.free.remove(&p), "page {} was never freed", p);
            self.in_use.insert(p);
        }
        Ok(())
    }

    fn tail_run(&self) -> u64 {
        (0..self.eof)
            .rev()
            .take_while(|p| self.free.contains(p))
            .count() as u64
    }

    /// Up to `n` contiguous in-use pages starting at a pseudo-randomly chosen in-use page.
    fn in_use_run(&self, pick: usize, n: u64) -> Option<(PageId, u64)> {
        if self.in_use.is_empty() {
            return None;
        }
        let start = *self.in_use.iter().nth(pick % self.in_use.len())?;
        let len = (start..start + n)
            .take_while(|p| self.in_use.contains(p))
            .count() as u64;
        Some((start, len))
    }

    fn take_in_use(&mut self, start: PageId, n: u64) {
        for p in start..start + n {
            assert!(self.in_use.remove(&p));
        }
    }
}

fn apply(
    fs: &mut FreeSpace,
    m: &mut Model,
    kind: PolicyKind,
    op: &Op,
) -> Result<(), TestCaseError> {
    match *op {
        Op::Allocate(n) => {
            let fits = m.lowest_run(n).is_some();
            let expected = match kind {
                PolicyKind::Null => None,
                PolicyKind::FirstFit => m.lowest_run(n),
                PolicyKind::BestFit => m.best_run(n),
                PolicyKind::AppendPreferring => m.append_run(n),
            };
            let got = fs.policy.allocate(n);
            prop_assert_eq!(got, expected, "allocate({}) picked the wrong run", n);
            if matches!(kind, PolicyKind::FirstFit | PolicyKind::BestFit) {
                prop_assert_eq!(got.is_some(), fits, "a contiguous run of {} exists", n);
            }
            match got {
                Some(s) => m.take_free(s, n)?,
                None => {
                    m.in_use.extend(m.eof..m.eof + n);
                    m.eof += n;
                }
            }
        }
        Op::AllocateLowest(n) => {
            let expected = m.lowest_run(n);
            let got = fs.policy.allocate_lowest(n);
            prop_assert_eq!(got, expected, "allocate_lowest({}) picked the wrong run", n);
            if let Some(s) = got {
                m.take_free(s, n)?;
            }
        }
        Op::Insert { pick, n } => {
            if let Some((s, n)) = m.in_use_run(pick, n) {
                fs.policy.insert(s, n);
                m.take_in_use(s, n);
                m.free.extend(s..s + n);
            }
        }
        Op::Remove { pick, n, from_free } => {
            let start = match (from_free, m.free.len()) {
                (true, len) if len > 0 => *m.free.iter().nth(pick % len).unwrap_or(&0),
                _ => (pick as u64) % (m.eof + 4),
            };
            let expected = (start..start + n).all(|p| m.free.contains(&p));
            prop_assert_eq!(fs.policy.remove(start, n), expected);
            if expected {
                for p in start..start + n {
                    m.free.remove(&p);
                    m.in_use.insert(p);
                }
            }
        }
        Op::Free { txid, pick, n } => {
            if let Some((s, n)) = m.in_use_run(pick, n) {
                fs.free(txid, s, n);
                m.take_in_use(s, n);
                m.pending.push((txid, s, n));
            }
        }
        Op::Unfree { pick } => {
            if m.pending.is_empty() {
                prop_assert!(!fs.pending.remove(TxId::MAX, 0, 1));
            } else {
                let (txid, s, n) = m.pending.remove(pick % m.pending.len());
                prop_assert!(fs.pending.remove(txid, s, n));
                m.in_use.extend(s..s + n);
            }
        }
        Op::Release(safe) => {
            let (released, kept): (Vec<_>, Vec<_>) =
                m.pending.iter().partition(|&&(tx, _, _)| tx <= safe);
            m.pending = kept;
            let moved: u64 = released.iter().map(|&(_, _, n)| n).sum();
            for (_, s, n) in released {
                m.free.extend(s..s + n);
            }
            prop_assert_eq!(fs.release(safe), moved);
        }
        Op::Truncate { pick } => {
            let tail = m.tail_run();
            let end = m.eof - pick % (tail + 1);
            fs.policy.truncate(end);
            m.free.retain(|&p| p < end);
            m.eof = end;
        }
    }
    Ok(())
}

fn check(fs: &FreeSpace, m: &Model) -> Result<(), TestCaseError> {
    let pending = m.pending_pages();
    // The model itself: every page below eof is in exactly one state.
    prop_assert_eq!(
        m.in_use.len() + m.free.len() + pending.len(),
        m.eof as usize
    );

    prop_assert_eq!(fs.free_pages(), m.free.len() as u64);
    prop_assert_eq!(fs.policy.is_empty(), m.free.is_empty());
    let extents = fs.policy.extents();
    for w in extents.windows(2) {
        prop_assert!(
            w[0].0 + w[0].1 < w[1].0,
            "not sorted and coalesced: {:?}",
            extents
        );
    }
    prop_assert!(
        extents.iter().all(|&(_, l)| l > 0),
        "empty extent: {:?}",
        extents
    );
    prop_assert_eq!(&extents, &m.free_extents());
    prop_assert_eq!(fs.policy.tail_run(m.eof), m.tail_run());

    prop_assert_eq!(fs.pending_pages(), pending.len() as u64);
    prop_assert_eq!(fs.pending.is_empty(), pending.is_empty());
    prop_assert_eq!(
        fs.pending.oldest(),
        m.pending.iter().map(|&(tx, _, _)| tx).min()
    );
    for p in 0..m.eof + 2 {
        prop_assert_eq!(
            fs.policy.contains(p),
            m.free.contains(&p),
            "contains({})",
            p
        );
        prop_assert_eq!(
            fs.pending.contains(p),
            pending.contains(&p),
            "pending contains({})",
            p
        );
    }
    Ok(())
}

fn run(kind: PolicyKind, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut fs = FreeSpace::new(kind);
    let mut m = Model::default();
    for op in ops {
        apply(&mut fs, &mut m, kind, op)?;
        check(&fs, &m)?;
    }
    // Once every transaction is safe, everything ever freed is reusable and nothing is pending.
    apply(&mut fs, &mut m, kind, &Op::Release(TxId::MAX))?;
    check(&fs, &m)?;
    prop_assert!(fs.pending.is_empty());
    prop_assert_eq!(fs.free_pages() + m.in_use.len() as u64, m.eof);
    Ok(())
}

proptest! {
    /// The same operations, checked under every policy there is.
    #[test]
    fn every_policy_matches_model(ops in prop::collection::vec(op(), 1..120)) {
        for kind in PolicyKind::ALL {
            run(kind, &ops)
                .map_err(|e| TestCaseError::fail(format!("policy {}: {}", kind.name(), e)))?;
        }
    }
}
