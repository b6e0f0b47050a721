//! Pages freed by committed transactions that are not yet safe to reuse.

use std::collections::BTreeMap;

use crate::{PageId, TxId};

/// Pages freed by committed transactions that some reader or the crash-fallback meta may still reach.
///
/// Runs are kept exactly as added (not coalesced) so an aborted transaction can undo each of
/// its frees with [`Pending::remove`].
#[derive(Debug, Default, Clone)]
pub struct Pending {
    by_tx: BTreeMap<TxId, Vec<(PageId, u64)>>,
    pages: u64,
    /// Pages freed by a txid <= `mark` (see [`Pending::freed_up_to`]).
    held: u64,
    mark: TxId,
    /// Emptied lists of runs, for the next transactions' frees ([`Pending::recycle`]): a
    /// commit's few frees would otherwise allocate a list each.
    spare: Vec<Vec<(PageId, u64)>>,
}

/// The most emptied lists [`Pending`] keeps, and the longest.
const SPARE_LISTS: usize = 8;
const SPARE_LIST_LEN: usize = 64;

impl Pending {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Pages start..start+n stopped being reachable in transaction `txid`.
    pub fn add(&mut self, txid: TxId, start: PageId, n: u64) {
        if n == 0 {
            return;
        }
        let spare = &mut self.spare;
        self.by_tx
            .entry(txid)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push((start, n));
        self.pages += n;
        if txid <= self.mark {
            self.held += n;
        }
    }

    /// Undo an `add` of exactly this run for this txid (abort); returns false if not found.
    pub fn remove(&mut self, txid: TxId, start: PageId, n: u64) -> bool {
        let Some(runs) = self.by_tx.get_mut(&txid) else {
            return false;
        };
        // Aborts undo the most recent adds, so search from the back.
        let Some(i) = runs.iter().rposition(|&r| r == (start, n)) else {
            return false;
        };
        runs.remove(i);
        if runs.is_empty() {
            if let Some(empty) = self.by_tx.remove(&txid) {
                self.recycle(empty);
            }
        }
        self.pages -= n;
        if txid <= self.mark {
            self.held -= n;
        }
        true
    }

    /// Keep a list [`Pending::release`] returned, emptied, for later frees.
    pub fn recycle(&mut self, mut list: Vec<(PageId, u64)>) {
        if self.spare.len() < SPARE_LISTS && (1..=SPARE_LIST_LEN).contains(&list.capacity()) {
            list.clear();
            self.spare.push(list);
        }
    }

    /// Remove and return every run freed by a transaction <= `safe`, in txid order.
    pub fn release(&mut self, safe: TxId) -> Vec<(PageId, u64)> {
        // Transaction by transaction from the oldest: most calls release one or none, and
        // splitting the map would build a new one each time.
        let mut runs: Vec<(PageId, u64)> = Vec::new();
        while let Some(entry) = self.by_tx.first_entry() {
            if *entry.key() > safe {
                break;
            }
            let tx = *entry.key();
            let mut freed = entry.remove();
            let n: u64 = freed.iter().map(|&(_, n)| n).sum();
            self.pages -= n;
            if tx <= self.mark {
                self.held -= n;
            }
            if runs.is_empty() {
                self.recycle(std::mem::replace(&mut runs, freed));
            } else {
                runs.append(&mut freed);
                self.recycle(freed);
            }
        }
        runs
    }

    /// Pages freed by a transaction <= `txid`, for any `txid`: one step per transaction at or
    /// below it still pending, so cheap for the limit the next [`Pending::release`] takes
    /// (what it would hand back), not for a txid far above the oldest pending.
    pub fn freed_through(&self, txid: TxId) -> u64 {
        self.by_tx
            .range(..=txid)
            .map(|(_, runs)| runs.iter().map(|&(_, n)| n).sum::<u64>())
            .sum()
    }

    /// Pages freed by a transaction <= `txid`, for a `txid` that only grows between calls
    /// (the durable txid: what is still pending from then on waits only for readers).
    /// Amortized O(1): each transaction's frees are counted once, when the mark passes it.
    pub fn freed_up_to(&mut self, txid: TxId) -> u64 {
        if txid > self.mark {
            let from = self.mark.saturating_add(1);
            for runs in self.by_tx.range(from..=txid).map(|(_, r)| r) {
                self.held += runs.iter().map(|&(_, n)| n).sum::<u64>();
            }
            self.mark = txid;
        }
        self.held
    }

    /// Number of pages pending.
    pub fn len(&self) -> u64 {
        self.pages
    }

    /// Is nothing pending?
    pub fn is_empty(&self) -> bool {
        self.pages == 0
    }

    /// Smallest txid with pending pages.
    pub fn oldest(&self) -> Option<TxId> {
        self.by_tx.keys().next().copied()
    }

    /// Is this page pending? A linear scan: only consistency checks ask.
    pub fn contains(&self, page: PageId) -> bool {
        self.iter()
            .any(|(_, start, n)| page >= start && page - start < n)
    }

    /// Every pending run as `(txid, start, len)`, in txid order.
    pub fn iter(&self) -> impl Iterator<Item = (TxId, PageId, u64)> + '_ {
        self.by_tx
            .iter()
            .flat_map(|(&tx, runs)| runs.iter().map(move |&(start, n)| (tx, start, n)))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn freed_through_counts_any_prefix_and_leaves_the_mark_alone() {
        let mut p = Pending::new();
        p.add(1, 10, 2);
        p.add(2, 20, 3);
        p.add(2, 25, 1);
        p.add(5, 30, 4);
        assert_eq!(p.freed_through(0), 0);
        assert_eq!(p.freed_through(1), 2);
        assert_eq!(p.freed_through(2), 6);
        assert_eq!(p.freed_through(4), 6);
        assert_eq!(p.freed_through(u64::MAX), 10);
        assert_eq!(p.freed_up_to(5), 10);
        // A smaller txid after the mark passed it still counts only its prefix.
        assert_eq!(p.freed_through(1), 2);
        p.release(2);
        assert_eq!(p.freed_through(5), 4);
        assert_eq!(p.freed_through(2), 0);
    }

    #[test]
    fn freed_up_to_counts_what_a_growing_mark_has_passed() {
        let mut p = Pending::new();
        p.add(1, 10, 2);
        p.add(2, 20, 3);
        p.add(3, 30, 4);
        assert_eq!(p.freed_up_to(0), 0);
        assert_eq!(p.freed_up_to(2), 5);
        // Adds at or below the mark count at once; removals and releases uncount.
        p.add(2, 40, 1);
        assert_eq!(p.freed_up_to(2), 6);
        assert!(p.remove(2, 40, 1));
        assert_eq!(p.freed_up_to(2), 5);
        p.release(1);
        assert_eq!(p.freed_up_to(2), 3);
        assert_eq!(p.freed_up_to(3), 7);
        p.add(5, 50, 8);
        assert_eq!(p.freed_up_to(4), 7, "txid 5 is past the mark");
        p.release(10);
        assert_eq!(p.freed_up_to(4), 0);
        assert_eq!(p.len(), 0);
    }

    use super::*;

    #[test]
    fn release_returns_runs_up_to_safe_in_txid_order() {
        let mut p = Pending::new();
        p.add(7, 70, 1);
        p.add(5, 50, 2);
        p.add(6, 60, 3);
        p.add(5, 55, 1);
        assert_eq!(p.len(), 7);
        assert_eq!(p.oldest(), Some(5));
        assert_eq!(p.release(4), vec![]);
        assert_eq!(p.release(6), vec![(50, 2), (55, 1), (60, 3)]);
        assert_eq!(p.len(), 1);
        assert_eq!(p.oldest(), Some(7));
        assert_eq!(p.release(u64::MAX), vec![(70, 1)]);
        assert!(p.is_empty());
        assert_eq!(p.oldest(), None);
    }

    #[test]
    fn remove_undoes_exactly_one_add() {
        let mut p = Pending::new();
        p.add(3, 10, 2);
        p.add(3, 20, 1);
        assert!(!p.remove(3, 10, 1), "length must match");
        assert!(!p.remove(4, 10, 2), "txid must match");
        assert!(p.remove(3, 10, 2));
        assert!(!p.remove(3, 10, 2), "already undone");
        assert_eq!(p.len(), 1);
        assert!(p.remove(3, 20, 1));
        assert!(p.is_empty());
        assert_eq!(p.oldest(), None);
    }

    #[test]
    fn contains_and_iter_see_every_run() {
        let mut p = Pending::new();
        p.add(2, 10, 3);
        p.add(1, 20, 1);
        p.add(1, 30, 0);
        assert!(p.contains(10) && p.contains(12) && p.contains(20));
        assert!(!p.contains(13) && !p.contains(9) && !p.contains(30));
        assert_eq!(p.iter().collect::<Vec<_>>(), vec![(1, 20, 1), (2, 10, 3)]);
    }

    /// The queue before its lists were recycled (5d5ec1a^), for the equivalence test below.
    #[derive(Default)]
    struct Old {
        by_tx: std::collections::BTreeMap<u64, Vec<(u64, u64)>>,
        pages: u64,
        held: u64,
        mark: u64,
    }

    impl Old {
        fn add(&mut self, txid: u64, start: u64, n: u64) {
            if n == 0 {
                return;
            }
            self.by_tx.entry(txid).or_default().push((start, n));
            self.pages += n;
            if txid <= self.mark {
                self.held += n;
            }
        }
        fn remove(&mut self, txid: u64, start: u64, n: u64) -> bool {
            let Some(runs) = self.by_tx.get_mut(&txid) else {
                return false;
            };
            let Some(i) = runs.iter().rposition(|&r| r == (start, n)) else {
                return false;
            };
            runs.remove(i);
            if runs.is_empty() {
                self.by_tx.remove(&txid);
            }
            self.pages -= n;
            if txid <= self.mark {
                self.held -= n;
            }
            true
        }
        fn release(&mut self, safe: u64) -> Vec<(u64, u64)> {
            let mut runs: Vec<(u64, u64)> = Vec::new();
            while let Some(entry) = self.by_tx.first_entry() {
                if *entry.key() > safe {
                    break;
                }
                let tx = *entry.key();
                let mut freed = entry.remove();
                let n: u64 = freed.iter().map(|&(_, n)| n).sum();
                self.pages -= n;
                if tx <= self.mark {
                    self.held -= n;
                }
                if runs.is_empty() {
                    runs = freed;
                } else {
                    runs.append(&mut freed);
                }
            }
            runs
        }
        fn freed_up_to(&mut self, txid: u64) -> u64 {
            if txid > self.mark {
                let from = self.mark.saturating_add(1);
                for runs in self.by_tx.range(from..=txid).map(|(_, r)| r) {
                    self.held += runs.iter().map(|&(_, n)| n).sum::<u64>();
                }
                self.mark = txid;
            }
            self.held
        }
    }

    /// Recycled lists change nothing a caller sees: random adds (several per txid, some
    /// lists past the spare length), undos from the back and out of order, releases whose
    /// lists go back (`FreeSpace::release`), and a growing mark, against the old queue.
    #[test]
    fn recycling_lists_matches_the_queue_without_it() {
        let mut seed = 0x243f_6a88_85a3_08d3u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _case in 0..200 {
            let (mut new, mut old) = (Pending::new(), Old::default());
            let mut txid = 1u64;
            let mut added: Vec<(u64, u64, u64)> = Vec::new();
            let mut mark = 0u64;
            for _ in 0..400 {
                match next(10) {
                    0..=3 => {
                        // A transaction's frees: 0 to 80 runs (past SPARE_LIST_LEN sometimes).
                        let k = if next(8) == 0 { 80 } else { next(6) };
                        for _ in 0..k {
                            let (p, n) = (next(10_000), next(4));
                            new.add(txid, p, n);
                            old.add(txid, p, n);
                            if n > 0 {
                                added.push((txid, p, n));
                            }
                        }
                        if next(4) == 0 {
                            // Aborted: undo from the back, like `undo_to`.
                            while let Some(&(t, p, n)) = added.last().filter(|a| a.0 == txid) {
                                added.pop();
                                assert_eq!(new.remove(t, p, n), old.remove(t, p, n));
                            }
                        } else {
                            txid += 1;
                        }
                    }
                    4 => {
                        if !added.is_empty() {
                            let (t, p, n) = added.swap_remove(next(added.len() as u64) as usize);
                            assert_eq!(new.remove(t, p, n), old.remove(t, p, n));
                        }
                    }
                    5..=7 => {
                        let safe = txid.saturating_sub(next(4));
                        let mut a = new.release(safe);
                        let b = old.release(safe);
                        assert_eq!(a, b);
                        added.retain(|x| x.0 > safe);
                        a.sort_unstable();
                        new.recycle(a);
                    }
                    _ => {
                        mark = mark.max(txid.saturating_sub(next(3)));
                        assert_eq!(new.freed_up_to(mark), old.freed_up_to(mark));
                    }
                }
                assert_eq!(new.len(), old.pages);
                assert_eq!(new.held, old.held);
                let flat: Vec<_> = old
                    .by_tx
                    .iter()
                    .flat_map(|(&t, r)| r.iter().map(move |&(p, n)| (t, p, n)))
                    .collect();
                assert_eq!(new.iter().collect::<Vec<_>>(), flat);
                assert!(new.spare.iter().all(|l| l.is_empty()));
                assert!(new.spare.len() <= SPARE_LISTS);
                assert_eq!(
                    new.freed_through(txid),
                    old.by_tx.values().flatten().map(|r| r.1).sum()
                );
            }
        }
    }
}
