//! larch as a measured engine. A setup is `POLICY/WRITEMODE`, optionally followed by
//! `:advice=normal|random|sequential`, `:load-advice=normal|random|sequential` (the advice
//! while loading; the database is reopened with `advice` for the other steps),
//! `:ct=FRACTION|off` (compaction threshold), `:page=BYTES`, `:group=on|off` (group commit) and
//! `:unsynced=BYTES|off` (`Options::max_unsynced_bytes`) and `:folios=large|small`
//! (`Options::cache_folios`).

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use larch_engine::{
    Advice, CacheFolios, Db, Durability as LDurability, Options, Policy, WriteMode,
};

use crate::engine::{
    Durability, Engine, EngineConfig, EngineFactory, IbReader, IbRow, IbWriter, Reader, Result,
    Writer,
};
use crate::ib::{self, TABLES};

/// The tree every larch setup stores documents in.
pub const TREE: &str = "bench";
/// The database file inside the engine's directory.
pub const FILE: &str = "bench.larch";

/// A parsed larch setup.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Setup {
    /// Free-space policy.
    pub policy: Policy,
    /// How dirty pages reach the file.
    pub write_mode: WriteMode,
    /// madvise of the read map.
    pub advice: Advice,
    /// madvise of the read map while loading, if not `advice` (then the database is closed and
    /// reopened with `advice` after the load).
    pub load_advice: Option<Advice>,
    /// Background compaction threshold.
    pub compaction_threshold: Option<f64>,
    /// Page size of the new file.
    pub page_size: usize,
    /// Group commit (`Options::group_commit`).
    pub group_commit: bool,
    /// `Options::max_unsynced_bytes`: None keeps the engine's default (automatic), Some(None)
    /// turns the bound off, Some(Some(b)) sets it to b bytes.
    pub max_unsynced: Option<Option<u64>>,
    /// `Options::cache_folios`.
    pub cache_folios: CacheFolios,
}

fn advice_from_name(s: &str) -> Option<Advice> {
    [Advice::Normal, Advice::Random, Advice::Sequential]
        .into_iter()
        .find(|a| a.name() == s)
}

impl Setup {
    /// Parse `POLICY/WRITEMODE[:key=value...]`.
    pub fn parse(s: &str) -> std::result::Result<Setup, String> {
        let mut parts = s.split(':');
        let head = parts.next().unwrap_or_default();
        let (p, m) = head
            .split_once('/')
            .ok_or_else(|| format!("setup {s:?} is not POLICY/WRITEMODE"))?;
        let policy = Policy::from_name(p).ok_or_else(|| {
            format!(
                "setup {s:?}: unknown policy {p:?} (policies: {})",
                Policy::ALL.map(|p| p.name()).join(", ")
            )
        })?;
        let write_mode = WriteMode::from_name(m).ok_or_else(|| {
            format!(
                "setup {s:?}: unknown write mode {m:?} (modes: {})",
                WriteMode::ALL.map(|m| m.name()).join(", ")
            )
        })?;
        let defaults = Options::default();
        let mut setup = Setup {
            policy,
            write_mode,
            advice: defaults.get_advice(),
            load_advice: None,
            compaction_threshold: None,
            page_size: defaults.get_page_size(),
            group_commit: true,
            max_unsynced: None,
            cache_folios: defaults.get_cache_folios(),
        };
        for part in parts {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("setup {s:?}: {part:?} is not key=value"))?;
            match k {
                "advice" => {
                    setup.advice = advice_from_name(v).ok_or_else(|| {
                        format!("setup {s:?}: advice is normal, random or sequential")
                    })?
                }
                "load-advice" => {
                    setup.load_advice = Some(advice_from_name(v).ok_or_else(|| {
                        format!("setup {s:?}: load-advice is normal, random or sequential")
                    })?)
                }
                "ct" => {
                    setup.compaction_threshold = if v == "off" {
                        None
                    } else {
                        let t: f64 = v
                            .parse()
                            .map_err(|_| format!("setup {s:?}: ct={v} is not a number"))?;
                        if !(t > 0.0 && t < 1.0) {
                            return Err(format!("setup {s:?}: ct must be between 0 and 1"));
                        }
                        Some(t)
                    }
                }
                "folios" => {
                    setup.cache_folios = match v {
                        "large" => CacheFolios::Large,
                        "small" => CacheFolios::Small,
                        _ => return Err(format!("setup {s:?}: folios is large or small")),
                    }
                }
                "group" => {
                    setup.group_commit = match v {
                        "on" => true,
                        "off" => false,
                        _ => return Err(format!("setup {s:?}: group is on or off")),
                    }
                }
                "unsynced" => {
                    setup.max_unsynced = Some(if v == "off" {
                        None
                    } else {
                        Some(v.parse().map_err(|_| {
                            format!("setup {s:?}: unsynced={v} is not a byte count or off")
                        })?)
                    })
                }
                "page" => {
                    setup.page_size = v
                        .parse()
                        .map_err(|_| format!("setup {s:?}: page={v} is not a number"))?
                }
                _ => return Err(format!("setup {s:?}: unknown setting {k:?}")),
            }
        }
        Ok(setup)
    }

    /// The options the setup opens the database with (for the load, `load_advice` if set).
    pub fn options(&self) -> Options {
        let o = Options::default();
        let o = match self.max_unsynced {
            Some(b) => o.max_unsynced_bytes(b),
            None => o,
        };
        o.policy(self.policy)
            .write_mode(self.write_mode)
            .advice(self.load_advice.unwrap_or(self.advice))
            .page_size(self.page_size)
            .compaction_threshold(self.compaction_threshold)
            .group_commit(self.group_commit)
            .cache_folios(self.cache_folios)
            .durability(LDurability::Sync)
    }
}

/// Makes larch engines.
#[derive(Clone, Copy, Debug, Default)]
pub struct LarchFactory;

impl EngineFactory for LarchFactory {
    fn name(&self) -> &'static str {
        "larch"
    }

    fn setups(&self, larch_setups: &[String]) -> Vec<String> {
        larch_setups.to_vec()
    }

    fn check_setup(&self, setup: &str) -> Result<()> {
        Setup::parse(setup).map(|_| ()).map_err(Into::into)
    }

    fn supports_ib(&self) -> bool {
        true
    }

    fn reopen_after_load(&self, setup: &str) -> Option<String> {
        Setup::parse(setup).ok()?.load_advice?;
        Some(
            setup
                .split(':')
                .filter(|part| !part.starts_with("load-advice="))
                .collect::<Vec<_>>()
                .join(":"),
        )
    }

    fn describe(&self, setup: &str, _cfg: &EngineConfig) -> Vec<(String, String)> {
        let s = match Setup::parse(setup) {
            Ok(s) => s,
            Err(e) => return vec![("error".into(), e)],
        };
        let v = |k: &str, v: String| (k.to_string(), v);
        vec![
            v("version", env!("CARGO_PKG_VERSION").to_string()),
            v("file", format!("one file, {FILE}, tree {TREE:?}")),
            v("policy", s.policy.name().to_string()),
            v("write_mode", s.write_mode.name().to_string()),
            v("advice", s.advice.name().to_string()),
            v(
                "load_advice",
                s.load_advice.map_or("the same".to_string(), |a| {
                    format!("{} (then closed and reopened with advice {})", a.name(), s.advice.name())
                }),
            ),
            v("page_size", s.page_size.to_string()),
            v(
                "compaction_threshold",
                s.compaction_threshold
                    .map_or("off".to_string(), |t| t.to_string()),
            ),
            v(
                "group_commit",
                if s.group_commit {
                    "on (the default): a Sync commit made while other writers wait is made durable by the group's one fdatasync"
                } else {
                    "off: every Sync commit syncs before releasing the writer lock"
                }
                .into(),
            ),
            v(
                "max_unsynced_bytes",
                match s.max_unsynced {
                    None => "automatic (the default): an eighth of the live data, 2..16 MiB".to_string(),
                    Some(None) => "off: Async commits never force a durable point".to_string(),
                    Some(Some(b)) => format!("{b} bytes"),
                },
            ),
            v("verify_checksums", "false (the default)".into()),
            v(
                "reader_processes",
                "with --readers processes (or both), each reader of pq.n/rq.n is a process of its own that opens the file with Options::default().advice(A).read_only(true) while the engine's process has it open read-write; each process attaches to the lock file <file>-lock"
                    .into(),
            ),
            v(
                "sync",
                "Durability::Sync with the engine's default commit protocol (docs/format.md): durable when commit returns"
                    .into(),
            ),
            v(
                "async",
                "Durability::Async: no write of the meta and no sync until the next sync".into(),
            ),
            v(
                "sync_all",
                "Db::sync (after load, and after each async step, untimed)".into(),
            ),
            v(
                "reads",
                "one read transaction (begin_read + open_tree) per get or scan; values are slices into the map"
                    .into(),
            ),
            v(
                "writes",
                "one write transaction (begin_write + open_tree + inserts + commit) per batch; concurrent writers wait for the writer lock"
                    .into(),
            ),
            v(
                "sorted_writes",
                "rb.sorted: WriteTree::append per pair (no search; the key must be greater than the last) in one write transaction"
                    .into(),
            ),
            v(
                "insert_benchmark",
                "trees rows (id -> row), ix1, ix2, ix3 (field + id -> empty) in the same file; a commit opens the four side by side in one write transaction, inserts the rows and their index entries, and deletes the oldest rows with WriteTree::pop_first on rows plus a remove of each of their index entries; ib.l.x reads 1,000 rows a transaction with WriteTree::range and inserts their entries; a range query reads an index with ReadTree::range and each row with get, in one read transaction"
                    .into(),
            ),
        ]
    }

    fn open(&self, dir: &Path, setup: &str, _cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        let s = Setup::parse(setup)?;
        let db = Db::open(dir.join(FILE), s.options())?;
        // Create the tree now (if missing), so readers never find it missing.
        let missing = matches!(
            db.begin_read()?.open_tree(TREE),
            Err(larch_engine::Error::TreeNotFound(_))
        );
        if missing {
            let tx = db.begin_write()?;
            tx.open_tree(TREE)?;
            for name in TABLES {
                tx.open_tree(name)?;
            }
            tx.commit()?;
        }
        Ok(Box::new(LarchEngine {
            db,
            sync: AtomicBool::new(true),
        }))
    }

    fn supports_reader_processes(&self) -> bool {
        true
    }

    fn open_reader(&self, dir: &Path, setup: &str, _cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        // The setup's read map and page checks; the policy, write mode and commit settings do
        // not apply to a read-only handle. The file is live (the engine's process has it open),
        // so the open takes the newest meta and publishes nothing.
        let s = Setup::parse(setup)?;
        let opts = Options::default().advice(s.advice).read_only(true);
        let db = Db::open(dir.join(FILE), opts)?;
        Ok(Box::new(LarchEngine {
            db,
            sync: AtomicBool::new(false),
        }))
    }
}

struct LarchEngine {
    db: Db,
    sync: AtomicBool,
}

impl Engine for LarchEngine {
    fn set_durability(&self, d: Durability) -> Result<()> {
        self.sync.store(d == Durability::Sync, Ordering::Relaxed);
        Ok(())
    }

    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(LarchWriter { e: self }))
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(LarchReader { db: &self.db }))
    }

    fn sync(&self) -> Result<()> {
        Ok(self.db.sync()?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.sync()?;
        drop(self);
        Ok(())
    }

    fn ib_writer(&self) -> Result<Box<dyn IbWriter + '_>> {
        Ok(Box::new(LarchWriter { e: self }))
    }

    fn ib_reader(&self) -> Result<Box<dyn IbReader + '_>> {
        Ok(Box::new(LarchReader { db: &self.db }))
    }

    fn ib_build_indexes(&self, chunk: usize, progress: &mut dyn FnMut(u64)) -> Result<u64> {
        let mut done = 0u64;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let mut tx = self.db.begin_write()?;
            tx.set_durability(self.durability());
            let batch: Vec<(Vec<u8>, Vec<u8>)> = {
                let rows = tx.open_tree(TABLES[0])?;
                let from = match &after {
                    Some(k) => Bound::Excluded(k.as_slice()),
                    None => Bound::Unbounded,
                };
                let mut v = Vec::with_capacity(chunk);
                for e in rows.range((from, Bound::Unbounded))?.take(chunk) {
                    let (k, val) = e?;
                    v.push((k.to_vec(), val.to_vec()));
                }
                v
            };
            if batch.is_empty() {
                return Ok(done);
            }
            {
                let mut ix = [
                    tx.open_tree(TABLES[1])?,
                    tx.open_tree(TABLES[2])?,
                    tx.open_tree(TABLES[3])?,
                ];
                for (k, v) in &batch {
                    let id = ib::id_of(k);
                    for (j, t) in ix.iter_mut().enumerate() {
                        t.insert(&ib::index_key(v, j, id), b"")?;
                    }
                }
            }
            tx.commit()?;
            done += batch.len() as u64;
            after = batch.last().map(|(k, _)| k.clone());
            progress(done);
        }
    }
}

impl LarchEngine {
    fn durability(&self) -> LDurability {
        if self.sync.load(Ordering::Relaxed) {
            LDurability::Sync
        } else {
            LDurability::Async
        }
    }
}

impl IbWriter for LarchWriter<'_> {
    fn insert(&mut self, new: &[IbRow<'_>], indexed: bool, trim: usize) -> Result<usize> {
        let mut tx = self.e.db.begin_write()?;
        tx.set_durability(self.e.durability());
        let mut deleted = 0;
        {
            let mut rows = tx.open_tree(TABLES[0])?;
            let mut ix = if indexed {
                Some([
                    tx.open_tree(TABLES[1])?,
                    tx.open_tree(TABLES[2])?,
                    tx.open_tree(TABLES[3])?,
                ])
            } else {
                None
            };
            for r in new {
                rows.insert(&ib::row_key(r.id), r.value)?;
                if let Some(ix) = &mut ix {
                    for (j, t) in ix.iter_mut().enumerate() {
                        t.insert(&ib::index_key(r.value, j, r.id), b"")?;
                    }
                }
            }
            while deleted < trim {
                let Some((k, v)) = rows.pop_first()? else {
                    break;
                };
                if let Some(ix) = &mut ix {
                    let id = ib::id_of(&k);
                    for (j, t) in ix.iter_mut().enumerate() {
                        t.remove(&ib::index_key(&v, j, id))?;
                    }
                }
                deleted += 1;
            }
        }
        tx.commit()?;
        Ok(deleted)
    }
}

impl IbReader for LarchReader<'_> {
    fn row(&mut self, id: u64) -> Result<bool> {
        let rx = self.db.begin_read()?;
        let t = rx.open_tree(TABLES[0])?;
        Ok(t.get(&ib::row_key(id))?.is_some())
    }

    fn index_range(&mut self, index: usize, from: u64, n: usize) -> Result<(usize, usize)> {
        let rx = self.db.begin_read()?;
        let ix = rx.open_tree(TABLES[1 + index])?;
        let rows = rx.open_tree(TABLES[0])?;
        let start = ib::index_start(from);
        let (mut entries, mut found) = (0, 0);
        for e in ix
            .range((Bound::Included(&start[..]), Bound::Unbounded))?
            .take(n)
        {
            let (k, _) = e?;
            entries += 1;
            if let Some(v) = rows.get(&ib::row_key(ib::id_of(k)))? {
                std::hint::black_box(v);
                found += 1;
            }
        }
        Ok((entries, found))
    }
}

struct LarchWriter<'e> {
    e: &'e LarchEngine,
}

impl Writer for LarchWriter<'_> {
    fn write(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut tx = self.e.db.begin_write()?;
        tx.set_durability(self.e.durability());
        {
            let mut t = tx.open_tree(TREE)?;
            for (k, v) in pairs {
                t.insert(k, v)?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn write_sorted(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut tx = self.e.db.begin_write()?;
        tx.set_durability(self.e.durability());
        {
            let mut t = tx.open_tree(TREE)?;
            for (k, v) in pairs {
                t.append(k, v)?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

struct LarchReader<'e> {
    db: &'e Db,
}

impl Reader for LarchReader<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>> {
        let rx = self.db.begin_read()?;
        let t = rx.open_tree(TREE)?;
        Ok(t.get(key)?.map(<[u8]>::len))
    }

    fn scan(&mut self, start: &[u8], n: usize, bytes: &mut u64) -> Result<usize> {
        let rx = self.db.begin_read()?;
        let t = rx.open_tree(TREE)?;
        let mut got = 0;
        for e in t.range((Bound::Included(start), Bound::Unbounded))? {
            let (k, v) = e?;
            *bytes += (k.len() + v.len()) as u64;
            got += 1;
            if got == n {
                break;
            }
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_setups() {
        let s = Setup::parse("first-fit/pwrite").unwrap();
        assert_eq!(s.policy, Policy::FirstFit);
        assert_eq!(s.write_mode, WriteMode::Pwrite);
        assert_eq!(s.advice, Advice::Random);
        assert_eq!(s.compaction_threshold, None);
        let s = Setup::parse("null/mmap:advice=normal:ct=0.25:page=8192").unwrap();
        assert_eq!(s.policy, Policy::Null);
        assert_eq!(s.write_mode, WriteMode::Mmap);
        assert_eq!(s.advice, Advice::Normal);
        assert_eq!(s.compaction_threshold, Some(0.25));
        assert_eq!(s.page_size, 8192);
        assert_eq!(s.load_advice, None);
        assert!(s.group_commit);
        assert!(!Setup::parse("null/pwrite:group=off").unwrap().group_commit);
        assert_eq!(s.cache_folios, CacheFolios::Small);
        assert_eq!(
            Setup::parse("first-fit/pwrite:folios=large")
                .unwrap()
                .cache_folios,
            CacheFolios::Large
        );
        assert!(Setup::parse("first-fit/pwrite:folios=tiny").is_err());
        assert_eq!(s.max_unsynced, None);
        assert_eq!(
            Setup::parse("null/pwrite:unsynced=off")
                .unwrap()
                .max_unsynced,
            Some(None)
        );
        assert_eq!(
            Setup::parse("null/pwrite:unsynced=1048576")
                .unwrap()
                .max_unsynced,
            Some(Some(1 << 20))
        );
        let s = Setup::parse("append-run/pwrite:advice=normal:load-advice=random").unwrap();
        assert_eq!(
            (s.advice, s.load_advice),
            (Advice::Normal, Some(Advice::Random))
        );
        for p in Policy::ALL {
            for m in WriteMode::ALL {
                assert!(Setup::parse(&format!("{}/{}", p.name(), m.name())).is_ok());
            }
        }
        for bad in [
            "first-fit",
            "x/pwrite",
            "null/x",
            "null/pwrite:ct=2",
            "null/pwrite:zz=1",
            "null/pwrite:advice",
            "null/pwrite:load-advice=often",
            "null/pwrite:group=maybe",
            "null/pwrite:unsynced=lots",
        ] {
            assert!(Setup::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn default_setup_opens_with_the_engine_defaults() {
        let s = Setup::parse(&crate::config::default_larch_setup()).unwrap();
        let engine = Options::default();
        assert_eq!(s.policy, engine.get_policy());
        assert_eq!(s.write_mode, engine.get_write_mode());
        assert_eq!(s.page_size, engine.get_page_size());
        assert_eq!(s.compaction_threshold, None);
        assert_eq!(s.advice, engine.get_advice());
        assert_eq!(s.group_commit, engine.get_group_commit());
    }

    #[test]
    fn load_advice_reopens_with_the_read_advice() {
        let f = LarchFactory;
        assert_eq!(f.reopen_after_load("append-run/pwrite:advice=normal"), None);
        assert_eq!(
            f.reopen_after_load("append-run/pwrite:load-advice=random:advice=normal:ct=0.5")
                .as_deref(),
            Some("append-run/pwrite:advice=normal:ct=0.5")
        );
        // The load opens with load-advice, the reopened setup with advice.
        let s = Setup::parse("append-run/pwrite:advice=sequential:load-advice=random").unwrap();
        assert_eq!(s.options().get_advice(), Advice::Random);
    }

    #[test]
    fn writes_reads_and_scans() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = EngineConfig {
            docs: 10,
            key_size: 16,
            value_size: 8,
            threads: 1,
            mem_limit: None,
        };
        let e = LarchFactory
            .open(dir.path(), "first-fit/pwrite", &cfg)
            .unwrap();
        e.set_durability(Durability::Async).unwrap();
        {
            let mut w = e.writer().unwrap();
            w.write(&[
                (b"a".as_slice(), b"1".as_slice()),
                (b"b", b"22"),
                (b"c", b"333"),
            ])
            .unwrap();
        }
        e.sync().unwrap();
        let mut r = e.reader().unwrap();
        assert_eq!(r.get(b"b").unwrap(), Some(2));
        assert_eq!(r.get(b"z").unwrap(), None);
        let mut bytes = 0;
        assert_eq!(r.scan(b"b", 20, &mut bytes).unwrap(), 2);
        assert_eq!(bytes, 2 + 3 + 2);
        drop(r);
        // Sorted writes append past the last key; a key not past it fails the transaction.
        {
            let mut w = e.writer().unwrap();
            w.write_sorted(&[(b"d".as_slice(), b"4".as_slice()), (b"e", b"55")])
                .unwrap();
            assert!(w
                .write_sorted(&[(b"f".as_slice(), b"6".as_slice()), (b"a", b"x")])
                .is_err());
        }
        e.sync().unwrap();
        let mut r = e.reader().unwrap();
        assert_eq!(r.get(b"e").unwrap(), Some(2));
        assert_eq!(r.get(b"f").unwrap(), None);
        assert_eq!(r.get(b"a").unwrap(), Some(1));
        drop(r);
        e.close().unwrap();
    }

    #[test]
    fn runs_the_insert_benchmark_tables() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = EngineConfig {
            docs: 10,
            key_size: 16,
            value_size: 8,
            threads: 1,
            mem_limit: None,
        };
        let e = LarchFactory
            .open(dir.path(), "first-fit/pwrite", &cfg)
            .unwrap();
        e.ib_set_durability(Durability::Async).unwrap();
        let row = |id: u64| {
            let mut v = vec![0u8; 32];
            for k in 0..3 {
                v[8 * k..8 * k + 8].copy_from_slice(&ib::field(id, k).to_be_bytes());
            }
            v
        };
        let vals: Vec<Vec<u8>> = (1..=20).map(row).collect();
        let rows: Vec<IbRow<'_>> = vals
            .iter()
            .enumerate()
            .map(|(i, v)| IbRow {
                id: i as u64 + 1,
                value: v,
            })
            .collect();
        let mut w = e.ib_writer().unwrap();
        assert_eq!(w.insert(&rows[..10], false, 0).unwrap(), 0);
        assert_eq!(e.ib_build_indexes(3, &mut |_| {}).unwrap(), 10);
        // 10 more, indexed, and the 4 oldest deleted.
        assert_eq!(w.insert(&rows[10..], true, 4).unwrap(), 4);
        drop(w);
        let mut r = e.ib_reader().unwrap();
        assert!(!r.row(4).unwrap() && r.row(5).unwrap() && r.row(20).unwrap());
        // Every index holds exactly the 16 live rows, each naming a live row.
        for k in 0..3 {
            let (entries, found) = r.index_range(k, 0, 100).unwrap();
            assert_eq!((entries, found), (16, 16), "index {k}");
        }
        let f = ib::field(20, 1);
        let (entries, found) = r.index_range(1, f, 1).unwrap();
        assert_eq!((entries, found), (1, 1));
        drop(r);
        e.close().unwrap();
    }
}
