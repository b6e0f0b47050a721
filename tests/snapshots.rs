//! Snapshot isolation and concurrency: readers on many threads see exactly one commit each,
//! old snapshots survive any amount of rewriting, and writers take turns.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use larch::{Db, Durability, Options, Policy, ReadTx, WriteMode};
use larch_testkit::Rng;

const ACCOUNTS: u64 = 8;
const START_BALANCE: u64 = 1_000;
const TOTAL: u64 = ACCOUNTS * START_BALANCE;
const TRANSFERS: usize = 3_000;

fn acct(i: u64) -> [u8; 6] {
    let mut k = *b"acct_0";
    k[5] = b'0' + i as u8;
    k
}

fn balance(v: &[u8]) -> u64 {
    u64::from_le_bytes(v.try_into().expect("balances are 8 bytes"))
}

/// Balances as a reader sees them in one snapshot, by a full scan and by point gets.
fn read_balances(rx: &ReadTx) -> Vec<u64> {
    let t = rx.open_tree("bank").unwrap();
    let scanned: Vec<u64> = t
        .iter()
        .unwrap()
        .map(|e| {
            let (_, v) = e.unwrap();
            balance(v)
        })
        .collect();
    let got: Vec<u64> = (0..ACCOUNTS)
        .map(|i| balance(t.get(&acct(i)).unwrap().unwrap()))
        .collect();
    assert_eq!(
        scanned,
        got,
        "scan and gets disagree inside one snapshot (txid {})",
        rx.txid()
    );
    assert_eq!(t.len().unwrap(), ACCOUNTS);
    got
}

fn bank_transfers_keep_total_constant_for_every_reader(mode: WriteMode) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("bank.larch"),
        Options::default().policy(Policy::FirstFit).write_mode(mode),
    )
    .unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("bank").unwrap();
        for i in 0..ACCOUNTS {
            t.insert(&acct(i), &START_BALANCE.to_le_bytes()).unwrap();
        }
    }
    tx.commit().unwrap();

    // The writer's record of every commit: txid -> balances.
    let history: Mutex<HashMap<u64, Vec<u64>>> = Mutex::new(HashMap::new());
    history.lock().unwrap().insert(
        db.begin_read().unwrap().txid(),
        vec![START_BALANCE; ACCOUNTS as usize],
    );
    let done = AtomicBool::new(false);
    let last_txid = AtomicU64::new(0);

    let samples: Vec<Vec<(u64, Vec<u64>)>> = std::thread::scope(|s| {
        let readers: Vec<_> = (0..3)
            .map(|r| {
                let (db, done) = (&db, &done);
                s.spawn(move || {
                    let mut seen = Vec::new();
                    let mut prev_txid = 0;
                    let mut reads = 0u64;
                    // The previous snapshot stays open one more round, then must read the same.
                    let mut held: Option<(ReadTx, Vec<u64>)> = None;
                    // Keep reading until the writer is done, and at least a few times.
                    while !done.load(Ordering::Acquire) || reads < 10 {
                        let rx = db.begin_read().unwrap();
                        let b = read_balances(&rx);
                        let sum: u64 = b.iter().sum();
                        assert_eq!(
                            sum,
                            TOTAL,
                            "reader {r} saw a total of {sum} at txid {}: {b:?}",
                            rx.txid()
                        );
                        assert!(rx.txid() >= prev_txid, "reader {r} went back in time");
                        prev_txid = rx.txid();
                        if let Some((old, old_b)) = held.take() {
                            assert_eq!(
                                read_balances(&old),
                                old_b,
                                "snapshot {} changed while held",
                                old.txid()
                            );
                        }
                        if reads % 16 == 0 {
                            seen.push((rx.txid(), b.clone()));
                        }
                        held = Some((rx, b));
                        reads += 1;
                    }
                    seen
                })
            })
            .collect();

        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut balances = vec![START_BALANCE; ACCOUNTS as usize];
        for n in 0..TRANSFERS {
            let from = rng.below(ACCOUNTS);
            let to = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
            let amount = rng.below(balances[from as usize] + 1);
            let mut tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("bank").unwrap();
                let a = balance(t.get(&acct(from)).unwrap().unwrap());
                let b = balance(t.get(&acct(to)).unwrap().unwrap());
                assert_eq!((a, b), (balances[from as usize], balances[to as usize]));
                t.insert(&acct(from), &(a - amount).to_le_bytes()).unwrap();
                t.insert(&acct(to), &(b + amount).to_le_bytes()).unwrap();
            }
            balances[from as usize] -= amount;
            balances[to as usize] += amount;
            if n % 500 != 499 {
                tx.set_durability(Durability::Async);
            }
            let txid = tx.txid();
            history.lock().unwrap().insert(txid, balances.clone());
            tx.commit().unwrap();
            last_txid.store(txid, Ordering::Release);
        }
        done.store(true, Ordering::Release);
        readers.into_iter().map(|h| h.join().unwrap()).collect()
    });

    // Every sampled snapshot is exactly the state the writer committed under that txid.
    let history = history.into_inner().unwrap();
    let mut checked = 0;
    for (txid, b) in samples.iter().flatten() {
        assert_eq!(
            history.get(txid),
            Some(b),
            "snapshot {txid} is not the state committed as {txid}"
        );
        checked += 1;
    }
    assert!(checked >= 3);
    db.sync().unwrap();
    let st = db.stats().unwrap();
    assert_eq!(st.txid, last_txid.load(Ordering::Acquire));
    assert_eq!(st.durable_txid, st.txid);
    assert_eq!(st.readers, 0);
    db.check().unwrap();
}

#[test]
fn bank_transfers_keep_total_constant_for_every_reader_pwrite() {
    bank_transfers_keep_total_constant_for_every_reader(WriteMode::Pwrite);
}

#[test]
fn bank_transfers_keep_total_constant_for_every_reader_mmap() {
    bank_transfers_keep_total_constant_for_every_reader(WriteMode::Mmap);
}

fn value_for(key: u32, round: u32) -> Vec<u8> {
    // Every tenth key has a value large enough for an overflow run.
    let len = if key % 10 == 0 {
        9_000 + (round as usize % 7) * 100
    } else {
        20 + (key as usize + round as usize) % 200
    };
    (0..len)
        .map(|i| (key as usize * 31 + round as usize * 7 + i) as u8)
        .collect()
}

fn old_snapshot_keeps_exact_view_while_writer_rewrites_everything(mode: WriteMode) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("snap.larch"),
        Options::default()
            .policy(Policy::FirstFit)
            .write_mode(mode)
            .durability(Durability::Sync),
    )
    .unwrap();
    const KEYS: u32 = 2_000;
    let key = |k: u32| format!("key{k:06}").into_bytes();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for k in 0..KEYS {
            t.insert(&key(k), &value_for(k, 0)).unwrap();
        }
        tx.open_tree("other").unwrap().insert(b"x", b"old").unwrap();
    }
    tx.commit().unwrap();

    let rx = db.begin_read().unwrap();
    let old_txid = rx.txid();
    let t = rx.open_tree("t").unwrap();
    // Zero-copy slices taken before the rewrites, and owned copies to compare them with.
    let slices: Vec<(&[u8], &[u8])> = t.iter().unwrap().map(|e| e.unwrap()).collect();
    let saved: Vec<(Vec<u8>, Vec<u8>)> = slices
        .iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    assert_eq!(saved.len(), KEYS as usize);

    // Rewrite every key many times, delete everything, delete and recreate trees. With no
    // other reader, each commit would love to reuse the old snapshot's pages.
    for round in 1..=31u32 {
        let mut tx = db.begin_write().unwrap();
        if round % 10 == 5 {
            assert!(tx.delete_tree("t").unwrap());
            assert_eq!(tx.delete_tree("other").unwrap(), round == 5);
        } else {
            let mut w = tx.open_tree("t").unwrap();
            for k in 0..KEYS {
                if round % 3 == 0 {
                    w.remove(&key(k)).unwrap();
                } else {
                    w.insert(&key(k), &value_for(k, round)).unwrap();
                }
            }
        }
        if round % 4 != 0 {
            tx.set_durability(Durability::Async);
        }
        tx.commit().unwrap();
    }
    db.sync().unwrap();

    let st = db.stats().unwrap();
    assert_eq!(st.oldest_reader, Some(old_txid));
    assert!(
        st.pending_pages > 0,
        "the old snapshot pins no pages: {st:?}"
    );

    assert_eq!(rx.txid(), old_txid);
    assert_eq!(
        rx.tree_names().unwrap(),
        vec!["other".to_string(), "t".to_string()]
    );
    assert_eq!(
        rx.open_tree("other").unwrap().get(b"x").unwrap(),
        Some(&b"old"[..])
    );
    for (i, ((k, v), (sk, sv))) in slices.iter().zip(&saved).enumerate() {
        assert_eq!(k, sk, "slice of key {i} changed under the snapshot");
        assert!(
            v == sv,
            "slice of the value of key {i} changed under the snapshot"
        );
    }
    let again: Vec<(Vec<u8>, Vec<u8>)> = t
        .iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect();
    assert!(
        again == saved,
        "a fresh scan of the old snapshot differs from the saved copy"
    );
    let back: Vec<Vec<u8>> = t
        .iter()
        .unwrap()
        .rev()
        .map(|e| e.unwrap().0.to_vec())
        .collect();
    assert!(back.iter().rev().eq(saved.iter().map(|(k, _)| k)));
    for k in (0..KEYS).step_by(7) {
        assert_eq!(t.get(&key(k)).unwrap(), Some(&value_for(k, 0)[..]));
    }
    assert_eq!(t.len().unwrap(), KEYS as u64);

    // The newest state is the last round's.
    let now = db.begin_read().unwrap();
    let nt = now.open_tree("t").unwrap();
    assert_eq!(nt.len().unwrap(), KEYS as u64);
    assert_eq!(nt.get(&key(3)).unwrap(), Some(&value_for(3, 31)[..]));
    assert!(now.open_tree("other").is_err());
    drop(now);

    // Once the old snapshot ends, its pages become reusable.
    drop(slices);
    drop(rx);
    for round in 32..=34u32 {
        let tx = db.begin_write().unwrap();
        tx.open_tree("t")
            .unwrap()
            .insert(&key(1), &value_for(1, round))
            .unwrap();
        tx.commit().unwrap();
    }
    let after = db.stats().unwrap();
    assert_eq!(after.oldest_reader, None);
    assert!(
        after.pending_pages < st.pending_pages,
        "pages pinned by the ended snapshot are still pending: before {} now {}",
        st.pending_pages,
        after.pending_pages
    );
    db.check().unwrap();
}

#[test]
fn old_snapshot_keeps_exact_view_while_writer_rewrites_everything_pwrite() {
    old_snapshot_keeps_exact_view_while_writer_rewrites_everything(WriteMode::Pwrite);
}

#[test]
fn old_snapshot_keeps_exact_view_while_writer_rewrites_everything_mmap() {
    old_snapshot_keeps_exact_view_while_writer_rewrites_everything(WriteMode::Mmap);
}

#[test]
fn db_is_send_sync_and_read_tx_moves_to_another_thread() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Db>();
    send::<ReadTx>();

    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("threads.larch"), Options::default()).unwrap();
    let tx = db.begin_write().unwrap();
    for t in 0..4 {
        let mut w = tx.open_tree(&format!("tree{t}")).unwrap();
        for k in 0..500u32 {
            w.insert(
                format!("k{k:04}").as_bytes(),
                format!("v{t}-{k}").as_bytes(),
            )
            .unwrap();
        }
    }
    tx.commit().unwrap();

    // A snapshot taken here, then changed under it, then read on another thread.
    let rx = db.begin_read().unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_tree("tree0")
        .unwrap()
        .insert(b"k0000", b"changed")
        .unwrap();
    tx.commit().unwrap();
    let moved = std::thread::spawn(move || {
        let t = rx.open_tree("tree0").unwrap();
        (
            t.get(b"k0000").unwrap().map(|v| v.to_vec()),
            t.len().unwrap(),
            rx.txid(),
        )
    })
    .join()
    .unwrap();
    assert_eq!(moved.0.as_deref(), Some(&b"v0-0"[..]));
    assert_eq!(moved.1, 500);

    // A cloned `Db` on several threads, each reading its own tree; the moved snapshot ended.
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                let rx = db.begin_read().unwrap();
                let tree = rx.open_tree(&format!("tree{t}")).unwrap();
                let mut n = 0u32;
                for e in tree.iter().unwrap() {
                    let (k, v) = e.unwrap();
                    let want = if t == 0 && n == 0 {
                        "changed".to_string()
                    } else {
                        format!("v{t}-{n}")
                    };
                    assert_eq!(k, format!("k{n:04}").as_bytes());
                    assert_eq!(v, want.as_bytes());
                    n += 1;
                }
                n
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 500);
    }
    let st = db.stats().unwrap();
    assert_eq!(
        st.readers, 0,
        "snapshots moved to other threads were not released"
    );
    assert!(st.txid > moved.2);
}

#[test]
fn reader_on_another_thread_is_not_blocked_by_an_open_write_tx() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("rw.larch"), Options::default()).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_tree("t")
        .unwrap()
        .insert(b"k", b"committed")
        .unwrap();
    tx.commit().unwrap();

    let tx = db.begin_write().unwrap();
    tx.open_tree("t")
        .unwrap()
        .insert(b"k", b"uncommitted")
        .unwrap();
    let (send, recv) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let rx = db.begin_read().unwrap();
            let v = rx
                .open_tree("t")
                .unwrap()
                .get(b"k")
                .unwrap()
                .map(|v| v.to_vec());
            send.send(v).unwrap();
        });
        // The reader finishes while the write transaction is still open (a generous timeout
        // turns a deadlock into a failure instead of a hang).
        let got = recv
            .recv_timeout(Duration::from_secs(60))
            .expect("reader blocked by the open writer");
        assert_eq!(got.as_deref(), Some(&b"committed"[..]));
    });
    assert_eq!(
        tx.open_tree("t").unwrap().get(b"k").unwrap(),
        Some(&b"uncommitted"[..])
    );
    tx.commit().unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(
        rx.open_tree("t").unwrap().get(b"k").unwrap(),
        Some(&b"uncommitted"[..])
    );
}

#[test]
fn second_begin_write_waits_until_the_first_commits() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("w.larch"), Options::default()).unwrap();
    let first = db.begin_write().unwrap();
    first.open_tree("t").unwrap().insert(b"n", b"1").unwrap();
    let first_txid = first.txid();

    let started = AtomicBool::new(false);
    let acquired = AtomicBool::new(false);
    let (seen_n, second_txid) = std::thread::scope(|s| {
        let second = s.spawn(|| {
            started.store(true, Ordering::SeqCst);
            let tx = db.begin_write().unwrap();
            acquired.store(true, Ordering::SeqCst);
            // It must see the first writer's commit: it began after it.
            let n = tx
                .open_tree("t")
                .unwrap()
                .get(b"n")
                .unwrap()
                .map(|v| v.to_vec());
            tx.open_tree("t").unwrap().insert(b"n", b"2").unwrap();
            let txid = tx.txid();
            tx.commit().unwrap();
            (n, txid)
        });
        while !started.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // Give the second thread a chance to run into begin_write.
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !acquired.load(Ordering::SeqCst),
            "a second write transaction began while the first was open"
        );
        first
            .open_tree("t")
            .unwrap()
            .insert(b"m", b"first")
            .unwrap();
        first.commit().unwrap();
        second.join().unwrap()
    });
    assert!(acquired.load(Ordering::SeqCst));
    assert_eq!(seen_n.as_deref(), Some(&b"1"[..]));
    assert_eq!(second_txid, first_txid + 1);
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    assert_eq!(t.get(b"n").unwrap(), Some(&b"2"[..]));
    assert_eq!(t.get(b"m").unwrap(), Some(&b"first"[..]));
}

#[test]
fn second_begin_write_after_abort_sees_only_committed_state() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("wa.larch"), Options::default()).unwrap();
    let first = db.begin_write().unwrap();
    first
        .open_tree("t")
        .unwrap()
        .insert(b"n", b"aborted")
        .unwrap();
    let acquired = AtomicBool::new(false);
    let seen = std::thread::scope(|s| {
        let second = s.spawn(|| {
            let tx = db.begin_write().unwrap();
            acquired.store(true, Ordering::SeqCst);
            let names = tx.tree_names().unwrap();
            let n = tx
                .open_tree("t")
                .unwrap()
                .get(b"n")
                .unwrap()
                .map(|v| v.to_vec());
            (names, n)
        });
        std::thread::sleep(Duration::from_millis(20));
        assert!(!acquired.load(Ordering::SeqCst));
        first.abort();
        second.join().unwrap()
    });
    assert_eq!(seen, (Vec::<String>::new(), None));
    assert!(db.begin_read().unwrap().tree_names().unwrap().is_empty());
    db.check().unwrap();
}
