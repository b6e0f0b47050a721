//! Pages freed after the last durable commit that were also *written* after it.
//!
//! Invariant 1 (docs/format.md) lets a page freed by T be reused once no reader is older than
//! T and T is durable, because the crash fallback (the last durable meta D) might reach it.
//! A page whose header says it was written by a transaction newer than every meta open could
//! pick after a crash (the last durable one, and a NoMetaSync meta written but not yet synced)
//! cannot be in any of their trees, so only readers pin it. The check is made when the page is
//! released, not when it is freed: those metas only get newer, and a page written by W stops
//! qualifying once one of them is >= W; it goes to the ordinary pending queue instead. Without this, a run of Async commits could reuse nothing
//! until the next sync and the file would grow by every page each commit copies.

use std::collections::BTreeMap;

use larch_freelist::FreeSpace;

use crate::{PageId, TxId};

/// Runs freed by a transaction, each with the txid that wrote it.
#[derive(Debug, Default)]
pub(crate) struct ReaderPinned {
    by_txid: BTreeMap<TxId, Vec<(PageId, u64, TxId)>>,
    pages: u64,
    /// Pages in the pending queue only because a durable point in the background pins them
    /// (written after the newest meta on disk, not after the point's commit), by the txid
    /// that freed them: without the point they would be here. For the compaction trigger
    /// (autocompact.rs), which counts them as these.
    point_pinned: BTreeMap<TxId, u64>,
    /// Emptied lists, for the next transactions' frees and releases: a commit's few frees
    /// would otherwise allocate a list each (scratch.rs).
    spare: Vec<Vec<(PageId, u64, TxId)>>,
    reusable: Vec<(PageId, u64)>,
}

/// The most emptied lists [`ReaderPinned`] keeps, and the longest.
const SPARE_LISTS: usize = 8;
const SPARE_LIST_LEN: usize = 64;

impl ReaderPinned {
    /// Pages `p..p+n`, written by `written`, stopped being reachable in `freed_by`.
    pub fn add(&mut self, freed_by: TxId, p: PageId, n: u64, written: TxId) {
        let spare = &mut self.spare;
        self.by_txid
            .entry(freed_by)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push((p, n, written));
        self.pages += n;
    }

    /// Undo an `add` (abort).
    pub fn remove(&mut self, freed_by: TxId, p: PageId, n: u64) -> bool {
        let Some(runs) = self.by_txid.get_mut(&freed_by) else {
            return false;
        };
        let Some(i) = runs.iter().rposition(|&(q, m, _)| q == p && m == n) else {
            return false;
        };
        runs.remove(i);
        if runs.is_empty() {
            if let Some(empty) = self.by_txid.remove(&freed_by) {
                self.recycle(empty);
            }
        }
        self.pages -= n;
        true
    }

    fn recycle(&mut self, mut list: Vec<(PageId, u64, TxId)>) {
        if self.spare.len() < SPARE_LISTS && (1..=SPARE_LIST_LEN).contains(&list.capacity()) {
            list.clear();
            self.spare.push(list);
        }
    }

    /// Everything freed by a transaction no reader is older than: reusable now if written
    /// after `on_disk` (the newest meta written to the file), otherwise handed to the ordinary
    /// pending queue. Returns pages reusable.
    pub fn release(
        &mut self,
        readers_safe: TxId,
        on_disk: TxId,
        meta_on_disk: TxId,
        durable: TxId,
        free: &mut FreeSpace,
    ) -> u64 {
        // Settled: the pending queue releases them like any other.
        while let Some(e) = self.point_pinned.first_entry() {
            if *e.key() > durable {
                break;
            }
            e.remove();
        }
        let mut reusable = std::mem::take(&mut self.reusable);
        while let Some((&freed_by, _)) = self.by_txid.first_key_value() {
            if freed_by > readers_safe {
                break;
            }
            let mut runs = self.by_txid.remove(&freed_by).unwrap_or_default();
            for (p, n, written) in runs.drain(..) {
                self.pages -= n;
                if written > on_disk {
                    reusable.push((p, n));
                } else {
                    free.free(freed_by, p, n);
                    if written > meta_on_disk {
                        self.note_point_pinned(freed_by, n);
                    }
                }
            }
            self.recycle(runs);
        }
        free.policy.insert_runs(&mut reusable);
        let n = reusable.iter().map(|&(_, n)| n).sum();
        if reusable.capacity() <= SPARE_LIST_LEN {
            reusable.clear();
            self.reusable = reusable;
        }
        n
    }

    /// Pages freed by a transaction <= `txid`: one step per transaction at or below it, so
    /// cheap for the limit the next [`ReaderPinned::release`] takes.
    pub fn freed_through(&self, txid: TxId) -> u64 {
        Self::sum(self.by_txid.range(..=txid))
    }

    /// Pages freed by a transaction > `txid`: one step per transaction above it, so cheap for
    /// the newest one or two.
    pub fn freed_after(&self, txid: TxId) -> u64 {
        match txid.checked_add(1) {
            Some(from) => Self::sum(self.by_txid.range(from..)),
            None => 0,
        }
    }

    fn sum<'a>(runs: impl Iterator<Item = (&'a TxId, &'a Vec<(PageId, u64, TxId)>)>) -> u64 {
        runs.map(|(_, r)| r.iter().map(|&(_, n, _)| n).sum::<u64>())
            .sum()
    }

    /// `n` pages freed by `freed_by` went to the pending queue only because a durable point
    /// pins them.
    pub fn note_point_pinned(&mut self, freed_by: TxId, n: u64) {
        *self.point_pinned.entry(freed_by).or_default() += n;
    }

    /// Undo a [`ReaderPinned::note_point_pinned`] (abort).
    pub fn unnote_point_pinned(&mut self, freed_by: TxId, n: u64) {
        if let Some(c) = self.point_pinned.get_mut(&freed_by) {
            *c = c.saturating_sub(n);
        }
    }

    /// Pages a durable point pins that were freed by a transaction > `txid`.
    pub fn point_pinned_after(&self, txid: TxId) -> u64 {
        match txid.checked_add(1) {
            Some(from) => self.point_pinned.range(from..).map(|(_, n)| n).sum(),
            None => 0,
        }
    }

    /// Pages waiting.
    pub fn len(&self) -> u64 {
        self.pages
    }

    /// Every waiting run: (freed by, first page, pages).
    pub fn iter(&self) -> impl Iterator<Item = (TxId, PageId, u64)> + '_ {
        self.by_txid
            .iter()
            .flat_map(|(&t, runs)| runs.iter().map(move |&(p, n, _)| (t, p, n)))
    }
}

#[cfg(test)]
mod recycle_tests {
    use super::*;
    use larch_freelist::PolicyKind;

    /// The set before its lists were recycled (5d5ec1a^), for the equivalence test below.
    #[derive(Default)]
    struct Old {
        by_txid: BTreeMap<TxId, Vec<(PageId, u64, TxId)>>,
        pages: u64,
        point_pinned: BTreeMap<TxId, u64>,
    }

    impl Old {
        fn add(&mut self, freed_by: TxId, p: PageId, n: u64, written: TxId) {
            self.by_txid
                .entry(freed_by)
                .or_default()
                .push((p, n, written));
            self.pages += n;
        }
        fn remove(&mut self, freed_by: TxId, p: PageId, n: u64) -> bool {
            let Some(runs) = self.by_txid.get_mut(&freed_by) else {
                return false;
            };
            let Some(i) = runs.iter().rposition(|&(q, m, _)| q == p && m == n) else {
                return false;
            };
            runs.remove(i);
            if runs.is_empty() {
                self.by_txid.remove(&freed_by);
            }
            self.pages -= n;
            true
        }
        fn release(
            &mut self,
            readers_safe: TxId,
            on_disk: TxId,
            meta_on_disk: TxId,
            durable: TxId,
            free: &mut FreeSpace,
        ) -> u64 {
            self.point_pinned = self.point_pinned.split_off(&(durable + 1));
            let mut reusable = Vec::new();
            while let Some((&freed_by, _)) = self.by_txid.first_key_value() {
                if freed_by > readers_safe {
                    break;
                }
                let runs = self.by_txid.remove(&freed_by).unwrap_or_default();
                for (p, n, written) in runs {
                    self.pages -= n;
                    if written > on_disk {
                        reusable.push((p, n));
                    } else {
                        free.free(freed_by, p, n);
                        if written > meta_on_disk {
                            *self.point_pinned.entry(freed_by).or_default() += n;
                        }
                    }
                }
            }
            free.policy.insert_runs(&mut reusable);
            reusable.iter().map(|&(_, n)| n).sum()
        }
    }

    /// Recycled lists and the `first_entry` loop that replaced `split_off` change nothing a
    /// caller sees: random frees (some transactions with more runs than a kept list holds),
    /// undos (abort) from the back, point-pinned notes and their undo, and releases with
    /// growing marks, against the old set, each with its own free space.
    #[test]
    fn recycling_lists_matches_the_set_without_it() {
        let mut next = crate::test_rng(0x1319_8a2e_0370_7344);
        for _case in 0..150 {
            let (mut new, mut old) = (ReaderPinned::default(), Old::default());
            let mut fa = FreeSpace::new(PolicyKind::FirstFit);
            let mut fb = FreeSpace::new(PolicyKind::FirstFit);
            let mut txid: TxId = 1;
            let mut page: PageId = 2;
            let (mut durable, mut on_disk, mut meta_on_disk) = (0, 0, 0);
            let mut added: Vec<(TxId, PageId, u64)> = Vec::new();
            for _ in 0..300 {
                match next(8) {
                    0..=3 => {
                        let k = if next(6) == 0 { 70 } else { next(5) };
                        for _ in 0..k {
                            let n = 1 + next(3);
                            let written = txid.saturating_sub(next(4));
                            new.add(txid, page, n, written);
                            old.add(txid, page, n, written);
                            added.push((txid, page, n));
                            if next(3) == 0 {
                                let m = next(3);
                                new.note_point_pinned(txid, m);
                                *old.point_pinned.entry(txid).or_default() += m;
                            }
                            page += n;
                        }
                        if next(4) == 0 {
                            while let Some(&(t, p, n)) = added.last().filter(|a| a.0 == txid) {
                                added.pop();
                                assert_eq!(new.remove(t, p, n), old.remove(t, p, n));
                            }
                            new.unnote_point_pinned(txid, 1);
                            if let Some(c) = old.point_pinned.get_mut(&txid) {
                                *c = c.saturating_sub(1);
                            }
                        } else {
                            txid += 1;
                        }
                    }
                    4..=6 => {
                        durable = durable.max(txid.saturating_sub(1 + next(4)));
                        meta_on_disk = meta_on_disk.max(durable).max(txid.saturating_sub(next(3)));
                        on_disk = on_disk.max(meta_on_disk).max(txid.saturating_sub(next(2)));
                        let safe = txid.saturating_sub(next(5));
                        let a = new.release(safe, on_disk, meta_on_disk, durable, &mut fa);
                        let b = old.release(safe, on_disk, meta_on_disk, durable, &mut fb);
                        assert_eq!(a, b, "pages made reusable");
                        added.retain(|x| x.0 > safe);
                    }
                    _ => {
                        let s = txid.saturating_sub(next(4));
                        fa.release(s);
                        fb.release(s);
                    }
                }
                assert_eq!(new.len(), old.pages);
                let flat: Vec<_> = old
                    .by_txid
                    .iter()
                    .flat_map(|(&t, r)| r.iter().map(move |&(p, n, _)| (t, p, n)))
                    .collect();
                assert_eq!(new.iter().collect::<Vec<_>>(), flat);
                assert_eq!(new.point_pinned, old.point_pinned);
                for t in 0..txid + 1 {
                    assert_eq!(new.freed_through(t), Old::sum_through(&old, t));
                }
                assert!(new.spare.iter().all(|l| l.is_empty()) && new.reusable.is_empty());
                assert_eq!(
                    fa.pending.iter().collect::<Vec<_>>(),
                    fb.pending.iter().collect::<Vec<_>>()
                );
                assert_eq!(fa.pending.len(), fb.pending.len());
                assert_eq!(fa.free_pages(), fb.free_pages());
                for p in 2..page {
                    assert_eq!(fa.policy.contains(p), fb.policy.contains(p), "page {p}");
                }
            }
        }
    }

    impl Old {
        fn sum_through(&self, txid: TxId) -> u64 {
            self.by_txid
                .range(..=txid)
                .map(|(_, r)| r.iter().map(|&(_, n, _)| n).sum::<u64>())
                .sum()
        }
    }
}
