//! The limits printed beside the engines (engine `limit`), measured in the same run by the
//! same step runner:
//!
//! - `fdatasync-4k` (ows.1): pwrite of 4 KiB into an already-written file, then fdatasync.
//!   The ceiling for commits that need one sync each.
//! - `btreemap-mem` (pq.1, pq.n, rq.1, rq.n; cached runs): the same keys and values in a
//!   `std::collections::BTreeMap`, no persistence and no locks. What an in-memory ordered
//!   map does with the same access pattern.
//! - `pread-4k-direct` (pq.1, pq.n; not-cached runs): O_DIRECT reads of one random 4 KiB
//!   block of a file the size of the data set. The device's own random-read rate at the
//!   same concurrency: the ceiling for point reads that each miss the cache once.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::ops::Bound;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::engine::{Durability, Engine, EngineConfig, EngineFactory, Reader, Result, Writer};
use crate::keys::{KeyGen, Rng, Values, MAX_KEY};
use crate::steps::{Kind, Step};

/// The engine name of every limit.
pub const ENGINE: &str = "limit";
/// fdatasync after a 4 KiB write.
pub const FDATASYNC: &str = "fdatasync-4k";
/// The same as [`FDATASYNC`], measured again after every engine: device contention from
/// other work drifts during a long run, and the two rows show by how much.
pub const FDATASYNC_AFTER: &str = "fdatasync-4k-after";
/// An in-memory BTreeMap.
pub const BTREEMAP: &str = "btreemap-mem";
/// O_DIRECT 4 KiB random reads.
pub const DIRECT: &str = "pread-4k-direct";

const BLOCK: usize = 4096;
const SYNC_FILE_BLOCKS: u64 = 256;

/// The limit factory (one engine name, a setup per limit).
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits;

/// The limits that apply to a run: with a memory limit, direct reads replace the BTreeMap.
pub fn setups_for(cfg: &EngineConfig) -> Vec<&'static str> {
    if cfg.mem_limit.is_some() {
        vec![FDATASYNC, DIRECT]
    } else {
        vec![FDATASYNC, BTREEMAP]
    }
}

fn first8(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// The size of the direct-read file: the data set, between 256 MiB and 4 GiB.
fn direct_file_bytes(cfg: &EngineConfig) -> u64 {
    let want = cfg.logical_bytes().clamp(256 << 20, 4 << 30);
    want / (1 << 20) * (1 << 20)
}

impl EngineFactory for Limits {
    fn name(&self) -> &'static str {
        ENGINE
    }

    fn check_setup(&self, setup: &str) -> Result<()> {
        if [FDATASYNC, FDATASYNC_AFTER, BTREEMAP, DIRECT].contains(&setup) {
            Ok(())
        } else {
            Err(format!("no limit called {setup:?}").into())
        }
    }

    fn steps(&self, setup: &str) -> Option<Vec<Step>> {
        Some(match setup {
            FDATASYNC | FDATASYNC_AFTER => vec![Step::new(Kind::Ows, false)],
            BTREEMAP => vec![
                Step::new(Kind::Pq, false),
                Step::new(Kind::Pq, true),
                Step::new(Kind::Rq, false),
                Step::new(Kind::Rq, true),
            ],
            _ => vec![Step::new(Kind::Pq, false), Step::new(Kind::Pq, true)],
        })
    }

    fn describe(&self, setup: &str, cfg: &EngineConfig) -> Vec<(String, String)> {
        let what = match setup {
            FDATASYNC | FDATASYNC_AFTER => format!(
                "{}pwrite of 4 KiB at a random 4 KiB-aligned offset of a {} KiB file already written, then fdatasync (File::sync_data): the ceiling for one-sync durable commits",
                if setup == FDATASYNC_AFTER {
                    "measured again after every engine ran: "
                } else {
                    ""
                },
                SYNC_FILE_BLOCKS * 4
            ),
            BTREEMAP => format!(
                "std::collections::BTreeMap<Box<[u8]>, Box<[u8]>> holding the {} documents; get / range(start..).take(20) with no lock and no persistence",
                cfg.docs
            ),
            _ => format!(
                "pread of one random 4 KiB block with O_DIRECT from a {} MiB file written with O_DIRECT: the device's random-read rate at the step's concurrency",
                direct_file_bytes(cfg) >> 20
            ),
        };
        vec![("what".to_string(), what)]
    }

    fn open(&self, dir: &Path, setup: &str, cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        match setup {
            FDATASYNC | FDATASYNC_AFTER => {
                let path = dir.join("limit-fdatasync.dat");
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(path)?;
                let block = vec![0x5au8; BLOCK];
                for i in 0..SYNC_FILE_BLOCKS {
                    file.write_all_at(&block, i * BLOCK as u64)?;
                }
                file.sync_all()?;
                Ok(Box::new(SyncFile {
                    file,
                    block,
                    sync: AtomicBool::new(true),
                }))
            }
            BTREEMAP => {
                let keys = KeyGen::new(cfg.key_size)?;
                let values = Values::new(cfg.value_size, 1);
                let mut rng = Rng::new(1);
                let mut buf = [0u8; MAX_KEY];
                let mut map = BTreeMap::new();
                for i in 1..=cfg.docs {
                    let k: Box<[u8]> = keys.key(i, &mut buf).into();
                    map.insert(k, Box::<[u8]>::from(values.pick(&mut rng)));
                }
                Ok(Box::new(MemMap { map }))
            }
            DIRECT => {
                let bytes = direct_file_bytes(cfg);
                let path = dir.join("limit-direct.dat");
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(path)?;
                let mut chunk = Aligned::new(1 << 20);
                let mut rng = Rng::new(7);
                for b in chunk.as_mut().chunks_mut(8) {
                    b.copy_from_slice(&rng.next_u64().to_le_bytes());
                }
                let mut off = 0;
                while off < bytes {
                    file.write_all_at(chunk.as_mut(), off)?;
                    off += 1 << 20;
                }
                file.sync_all()?;
                Ok(Box::new(DirectFile {
                    file,
                    blocks: bytes / BLOCK as u64,
                }))
            }
            other => Err(format!("no limit called {other:?}").into()),
        }
    }
}

fn no_reads() -> crate::engine::BoxError {
    "this limit has no reads".into()
}

fn no_writes() -> crate::engine::BoxError {
    "this limit has no writes".into()
}

struct SyncFile {
    file: File,
    block: Vec<u8>,
    sync: AtomicBool,
}

impl Engine for SyncFile {
    fn set_durability(&self, d: Durability) -> Result<()> {
        self.sync.store(d == Durability::Sync, Ordering::Relaxed);
        Ok(())
    }
    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(SyncWriter { f: self }))
    }
    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Err(no_reads())
    }
    fn sync(&self) -> Result<()> {
        Ok(self.file.sync_data()?)
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

struct SyncWriter<'f> {
    f: &'f SyncFile,
}

impl Writer for SyncWriter<'_> {
    fn write(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        for (k, _) in pairs {
            let off = (first8(k) % SYNC_FILE_BLOCKS) * BLOCK as u64;
            self.f.file.write_all_at(&self.f.block, off)?;
        }
        if self.f.sync.load(Ordering::Relaxed) {
            self.f.file.sync_data()?;
        }
        Ok(())
    }
}

struct MemMap {
    map: BTreeMap<Box<[u8]>, Box<[u8]>>,
}

impl Engine for MemMap {
    fn set_durability(&self, _d: Durability) -> Result<()> {
        Ok(())
    }
    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Err(no_writes())
    }
    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(MemReader { map: &self.map }))
    }
    fn sync(&self) -> Result<()> {
        Ok(())
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

struct MemReader<'m> {
    map: &'m BTreeMap<Box<[u8]>, Box<[u8]>>,
}

impl Reader for MemReader<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.map.get(key).map(|v| v.len()))
    }
    fn scan(&mut self, start: &[u8], n: usize, bytes: &mut u64) -> Result<usize> {
        let mut got = 0;
        for (k, v) in self
            .map
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .take(n)
        {
            *bytes += (k.len() + v.len()) as u64;
            got += 1;
        }
        Ok(got)
    }
}

/// A heap buffer whose start is aligned to 4 KiB (O_DIRECT needs that).
struct Aligned {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let buf = vec![0u8; len + BLOCK];
        let off = (BLOCK - buf.as_ptr() as usize % BLOCK) % BLOCK;
        Aligned { buf, off, len }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

struct DirectFile {
    file: File,
    blocks: u64,
}

impl Engine for DirectFile {
    fn set_durability(&self, _d: Durability) -> Result<()> {
        Ok(())
    }
    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Err(no_writes())
    }
    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(DirectReader {
            f: self,
            buf: Aligned::new(BLOCK),
        }))
    }
    fn sync(&self) -> Result<()> {
        Ok(())
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

struct DirectReader<'f> {
    f: &'f DirectFile,
    buf: Aligned,
}

impl Reader for DirectReader<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>> {
        let off = (first8(key) % self.f.blocks) * BLOCK as u64;
        self.f.file.read_exact_at(self.buf.as_mut(), off)?;
        Ok(Some(BLOCK))
    }
    fn scan(&mut self, start: &[u8], _n: usize, bytes: &mut u64) -> Result<usize> {
        self.get(start)?;
        *bytes += BLOCK as u64;
        Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(mem: Option<u64>) -> EngineConfig {
        EngineConfig {
            docs: 1000,
            key_size: 16,
            value_size: 32,
            threads: 2,
            mem_limit: mem,
        }
    }

    #[test]
    fn picks_limits_per_mode() {
        assert_eq!(setups_for(&cfg(None)), vec![FDATASYNC, BTREEMAP]);
        assert_eq!(setups_for(&cfg(Some(64 << 20))), vec![FDATASYNC, DIRECT]);
        assert_eq!(direct_file_bytes(&cfg(None)), 256 << 20);
        for s in [FDATASYNC, FDATASYNC_AFTER, BTREEMAP, DIRECT] {
            assert!(Limits.check_setup(s).is_ok());
            assert!(!Limits.describe(s, &cfg(None)).is_empty());
        }
        assert!(Limits.check_setup("x").is_err());
    }

    #[test]
    fn btreemap_reads_every_key() {
        let dir = tempfile::tempdir().unwrap();
        let e = Limits.open(dir.path(), BTREEMAP, &cfg(None)).unwrap();
        let mut r = e.reader().unwrap();
        let g = KeyGen::new(16).unwrap();
        let mut buf = [0u8; MAX_KEY];
        for i in 1..=1000 {
            assert_eq!(r.get(g.key(i, &mut buf)).unwrap(), Some(32));
        }
        let mut bytes = 0;
        assert!(r.scan(&[0u8; 16], 20, &mut bytes).unwrap() == 20);
        assert_eq!(bytes, 20 * 48);
    }

    #[test]
    fn fdatasync_limit_writes() {
        let dir = tempfile::tempdir().unwrap();
        let e = Limits.open(dir.path(), FDATASYNC, &cfg(None)).unwrap();
        e.set_durability(Durability::Sync).unwrap();
        let mut w = e.writer().unwrap();
        w.write(&[(b"0123456789abcdef".as_slice(), b"".as_slice())])
            .unwrap();
        assert!(e.reader().is_err());
    }
}
