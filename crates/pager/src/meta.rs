//! The two meta pages: which tree roots make up a commit.
//!
//! ```text
//! offset size field
//! 0      8    magic "LARCHDB\0"
//! 8      4    format version
//! 12     4    page size
//! 16     8    txid
//! 24     24   catalog root   (root page u64, entries u64, depth u32, reserved u32)
//! 48     24   free-map root  (same shape; its last u32 holds flags: 1 = the free map is
//!             behind, it records an earlier commit and open derives free pages by a walk)
//! 72     8    high-water mark: first page id never used
//! 80     8    live pages (reachable from this meta, metas included)
//! 88     8    unreachable pages below the high-water mark (free + pending)
//! 96     4    manifest runs (0: a two-sync commit, nothing to verify)
//! 100    4    crc32 of the manifest runs
//! 104    8    oldest txid whose pages the manifest lists (0: only this meta's txid)
//! 112    8    closed at: txid of the other slot's meta when the file was closed cleanly
//!             right after it became durable (0: no such close)
//! 120    4    crc32 of that meta (bytes 124..128 of the other slot)
//! 124    4    crc32 of bytes 0..124
//! 128    16n  manifest: first page u64 | pages u32 (high bit: one overflow run, else n node
//!             pages) | checksum u32 (the overflow run's stored checksum, or crc32 of the n
//!             node pages' stored checksums, little-endian, in page order)
//!        24n  ... or, when offset 104 is not 0: the same and the txid that wrote them u64
//! ```
//! Commit T writes slot T % 2; open takes the valid meta with the highest txid. A one-fsync
//! commit lists in its manifest every page it wrote, so recovery can check they all reached
//! the disk (docs/format.md, "One-fsync commit"); when it also makes earlier Async commits
//! durable, it lists their pages that its tree still holds, and the oldest of their txids.
//! Each run's checksum binds the manifest to what was written, not only to who wrote it: a
//! page left by an aborted attempt, or by a commit lost in an earlier crash, can carry the
//! same txid and a valid checksum of its own, but not the checksum the commit wrote.

use crate::{PageId, TxId};

/// The file's magic bytes.
pub const MAGIC: [u8; 8] = *b"LARCHDB\0";
/// The on-disk format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 2;
/// The largest txid a meta may carry: 2^62 leaves the writer room to add to it without
/// overflow (a file that commits a million times a second reaches it in 146,000 years).
pub const MAX_TXID: TxId = 1 << 62;
/// Bytes of a meta page that are used (the rest of the page is zero).
pub const META_SIZE: usize = 128;
const CRC_AT: usize = 124;

/// Where a B+tree starts, and what it holds: the shape of every tree root in the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeRoot {
    /// Root page, or 0 for an empty tree.
    pub root: PageId,
    /// Number of entries (so `len` is O(1)).
    pub entries: u64,
    /// Levels: 0 for an empty tree, 1 for a single leaf.
    pub depth: u32,
}

/// Bytes of an encoded [`TreeRoot`].
pub const TREE_ROOT_SIZE: usize = 24;

impl TreeRoot {
    /// Encode into 24 bytes.
    pub fn encode(&self) -> [u8; TREE_ROOT_SIZE] {
        let mut b = [0u8; TREE_ROOT_SIZE];
        b[0..8].copy_from_slice(&self.root.to_le_bytes());
        b[8..16].copy_from_slice(&self.entries.to_le_bytes());
        b[16..20].copy_from_slice(&self.depth.to_le_bytes());
        b
    }
    /// Decode from at least 24 bytes.
    pub fn decode(b: &[u8]) -> Option<TreeRoot> {
        if b.len() < TREE_ROOT_SIZE {
            return None;
        }
        Some(TreeRoot {
            root: u64::from_le_bytes(b[0..8].try_into().ok()?),
            entries: u64::from_le_bytes(b[8..16].try_into().ok()?),
            depth: u32::from_le_bytes(b[16..20].try_into().ok()?),
        })
    }
}

/// One decoded meta page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Page size of the file.
    pub page_size: u32,
    /// The commit this meta describes.
    pub txid: TxId,
    /// The catalog tree (tree name -> tree root).
    pub catalog: TreeRoot,
    /// The persisted free-space map.
    pub freemap: TreeRoot,
    /// The free map records the free pages of an earlier commit, not of this one (Async
    /// commits leave it to the next commit that saves it): open finds this commit's free
    /// pages by walking its trees (docs/format.md, "A free map behind its meta").
    pub freemap_behind: bool,
    /// First page id never used; the file holds at least this many pages.
    pub high_water: PageId,
    /// Pages reachable from this meta, the two meta pages included.
    pub live_pages: u64,
    /// Pages below the high-water mark not reachable from this meta (free or pending).
    pub unreachable_pages: u64,
    /// Runs in the manifest that follows the meta (0 for a two-sync commit).
    pub manifest_runs: u32,
    /// crc32 of the manifest runs.
    pub manifest_crc: u32,
    /// Oldest txid whose pages the manifest lists (a commit that also makes earlier Async
    /// commits durable); 0 means only this meta's txid.
    pub manifest_first: TxId,
    /// Written at a clean close into the older meta: the newer meta (its txid and checksum)
    /// was durable when the file was closed, so a manifest of it that does not verify is
    /// damage, not a torn commit (docs/format.md, "Torn or damaged"). 0 when not closed so.
    pub closed_at: TxId,
    /// The checksum of the meta `closed_at` names.
    pub closed_at_crc: u32,
}

/// What a one-fsync commit wrote: `pages` node pages from `start`, or one overflow run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ManifestRun {
    /// First page.
    pub start: PageId,
    /// Pages.
    pub pages: u32,
    /// One overflow run (one checksum over all its pages) rather than separate node pages.
    pub overflow: bool,
    /// The commit that wrote it; 0 in a plain one-fsync manifest (the meta's own txid).
    pub txid: TxId,
    /// What was written: an overflow run's stored checksum, or [`node_run_checksum`] of its
    /// pages' stored checksums.
    pub checksum: u32,
}

/// The manifest checksum of a run of node pages: crc32 over each page's stored checksum,
/// little-endian, in page order.
pub fn node_run_checksum(page_checksums: impl IntoIterator<Item = u32>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for c in page_checksums {
        h.update(&c.to_le_bytes());
    }
    h.finalize()
}

/// Bytes of one manifest run.
pub const MANIFEST_RUN_SIZE: usize = 16;
/// Bytes of one run in a manifest that lists several commits' pages (with their txids).
pub const MANIFEST_BATCH_RUN_SIZE: usize = 24;
const OVERFLOW_BIT: u32 = 1 << 31;

impl ManifestRun {
    fn encode(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.start.to_le_bytes());
        let n = self.pages | if self.overflow { OVERFLOW_BIT } else { 0 };
        b[8..12].copy_from_slice(&n.to_le_bytes());
        b[12..16].copy_from_slice(&self.checksum.to_le_bytes());
        if b.len() >= MANIFEST_BATCH_RUN_SIZE {
            b[16..24].copy_from_slice(&self.txid.to_le_bytes());
        }
    }
    fn decode(b: &[u8]) -> ManifestRun {
        let mut s = [0u8; 8];
        s.copy_from_slice(&b[0..8]);
        let n = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        let mut t = [0u8; 8];
        if b.len() >= MANIFEST_BATCH_RUN_SIZE {
            t.copy_from_slice(&b[16..24]);
        }
        ManifestRun {
            start: u64::from_le_bytes(s),
            pages: n & !OVERFLOW_BIT,
            overflow: n & OVERFLOW_BIT != 0,
            txid: u64::from_le_bytes(t),
            checksum: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
        }
    }
}

/// Runs that fit in a meta page of `page_size` bytes.
pub fn manifest_capacity(page_size: usize) -> usize {
    (page_size - META_SIZE) / MANIFEST_RUN_SIZE
}

/// Runs with txids (several commits' pages) that fit in a meta page of `page_size` bytes.
pub fn manifest_batch_capacity(page_size: usize) -> usize {
    (page_size - META_SIZE) / MANIFEST_BATCH_RUN_SIZE
}

impl Meta {
    /// Bytes of each run of this meta's manifest.
    pub fn manifest_run_size(&self) -> usize {
        if self.manifest_first == 0 {
            MANIFEST_RUN_SIZE
        } else {
            MANIFEST_BATCH_RUN_SIZE
        }
    }
}

/// Which of the two meta pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaSlot {
    /// Page 0.
    Zero,
    /// Page 1.
    One,
}

impl MetaSlot {
    /// The slot a commit of `txid` writes.
    pub fn for_txid(txid: TxId) -> MetaSlot {
        if txid & 1 == 0 {
            MetaSlot::Zero
        } else {
            MetaSlot::One
        }
    }
    /// The page id of the slot.
    pub fn page(self) -> PageId {
        match self {
            MetaSlot::Zero => 0,
            MetaSlot::One => 1,
        }
    }
}

impl Meta {
    /// An empty database of the given page size, as written by create.
    pub fn empty(page_size: u32) -> Meta {
        Meta {
            page_size,
            txid: 0,
            catalog: TreeRoot::default(),
            freemap: TreeRoot::default(),
            freemap_behind: false,
            high_water: 2,
            live_pages: 2,
            unreachable_pages: 0,
            manifest_runs: 0,
            manifest_crc: 0,
            manifest_first: 0,
            closed_at: 0,
            closed_at_crc: 0,
        }
    }

    /// Encode a whole meta page: the meta and, after it, `manifest` (the counts and crc of
    /// which are set from it).
    pub fn encode_page(&self, manifest: &[ManifestRun], page_size: usize) -> Vec<u8> {
        let mut page = vec![0u8; page_size];
        let mut meta = *self;
        let size = self.manifest_run_size();
        let end = META_SIZE + manifest.len() * size;
        for (i, r) in manifest.iter().enumerate() {
            let at = META_SIZE + i * size;
            r.encode(&mut page[at..at + size]);
        }
        meta.manifest_runs = manifest.len() as u32;
        meta.manifest_crc = crc32fast::hash(&page[META_SIZE..end]);
        page[..META_SIZE].copy_from_slice(&meta.encode());
        page
    }

    /// The manifest that follows this meta in `page` (the whole meta page), checked against
    /// its crc: an error means a torn or damaged meta.
    pub fn manifest(&self, page: &[u8]) -> Result<Vec<ManifestRun>, String> {
        let n = self.manifest_runs as usize;
        let size = self.manifest_run_size();
        let end = META_SIZE + n * size;
        let Some(bytes) = page.get(META_SIZE..end) else {
            return Err(format!("manifest of {n} runs does not fit the meta page"));
        };
        if crc32fast::hash(bytes) != self.manifest_crc {
            return Err("manifest checksum mismatch (torn meta write)".into());
        }
        Ok(bytes.chunks_exact(size).map(ManifestRun::decode).collect())
    }

    /// The checksum stored in an encoded meta (bytes 124..128).
    pub fn stored_crc(b: &[u8]) -> Option<u32> {
        let c = b.get(CRC_AT..CRC_AT + 4)?;
        Some(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// Encode into the first [`META_SIZE`] bytes, crc last.
    pub fn encode(&self) -> [u8; META_SIZE] {
        let mut b = [0u8; META_SIZE];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.page_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.txid.to_le_bytes());
        b[24..48].copy_from_slice(&self.catalog.encode());
        b[48..72].copy_from_slice(&self.freemap.encode());
        b[68..72].copy_from_slice(&u32::from(self.freemap_behind).to_le_bytes());
        b[72..80].copy_from_slice(&self.high_water.to_le_bytes());
        b[80..88].copy_from_slice(&self.live_pages.to_le_bytes());
        b[88..96].copy_from_slice(&self.unreachable_pages.to_le_bytes());
        b[96..100].copy_from_slice(&self.manifest_runs.to_le_bytes());
        b[100..104].copy_from_slice(&self.manifest_crc.to_le_bytes());
        b[104..112].copy_from_slice(&self.manifest_first.to_le_bytes());
        b[112..120].copy_from_slice(&self.closed_at.to_le_bytes());
        b[120..124].copy_from_slice(&self.closed_at_crc.to_le_bytes());
        let crc = crc32fast::hash(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The format version of a meta page written by another version of larch: the magic
    /// matches but the version does not (the magic and the version sit at offsets 0 and 8 in
    /// every version; what follows them may change). None for this version, version 0, or no
    /// meta at all.
    pub fn foreign_version(b: &[u8]) -> Option<u32> {
        if b.len() < 12 || b[0..8] != MAGIC {
            return None;
        }
        let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        // 0 is no version: a meta cut short after its magic (an interrupted initialisation).
        (version != FORMAT_VERSION && version != 0).then_some(version)
    }

    /// Decode and validate a meta page: magic, version, checksum, page size. The error says
    /// why it is not a valid meta.
    pub fn decode(b: &[u8]) -> Result<Meta, String> {
        if b.len() < META_SIZE {
            return Err(format!(
                "meta page is {} bytes, shorter than {META_SIZE}",
                b.len()
            ));
        }
        if b[0..8] != MAGIC {
            if b[..META_SIZE].iter().all(|&x| x == 0) {
                return Err("meta page is all zero".into());
            }
            return Err("bad magic".into());
        }
        let crc = u32::from_le_bytes(b[CRC_AT..CRC_AT + 4].try_into().map_err(|_| "short")?);
        if crc != crc32fast::hash(&b[..CRC_AT]) {
            return Err("meta checksum mismatch (torn or damaged write)".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version}, this build reads {FORMAT_VERSION}"
            ));
        }
        let page_size = u32_at(12);
        if !crate::valid_page_size(page_size as usize) {
            return Err(format!("page size {page_size} is not valid"));
        }
        let meta = Meta {
            page_size,
            txid: u64_at(16),
            catalog: TreeRoot::decode(&b[24..48]).ok_or("short catalog root")?,
            freemap: TreeRoot::decode(&b[48..72]).ok_or("short free-map root")?,
            freemap_behind: match u32_at(68) {
                0 => false,
                1 => true,
                f => return Err(format!("free-map flags {f:#x} are not known")),
            },
            high_water: u64_at(72),
            live_pages: u64_at(80),
            unreachable_pages: u64_at(88),
            manifest_runs: u32_at(96),
            manifest_crc: u32_at(100),
            manifest_first: u64_at(104),
            closed_at: u64_at(112),
            closed_at_crc: u32_at(120),
        };
        let capacity = if meta.manifest_first == 0 {
            manifest_capacity(page_size as usize)
        } else {
            manifest_batch_capacity(page_size as usize)
        };
        if meta.manifest_runs as usize > capacity {
            return Err(format!(
                "manifest of {} runs cannot fit a meta page",
                meta.manifest_runs
            ));
        }
        if meta.txid > MAX_TXID {
            // No file reaches it by committing; the writer could not count past it.
            return Err(format!("txid {} is beyond {MAX_TXID}", meta.txid));
        }
        if meta.high_water < 2 {
            return Err(format!("high-water mark {} is below 2", meta.high_water));
        }
        for (what, r) in [("catalog", meta.catalog), ("free map", meta.freemap)] {
            if r.root != 0 && (r.root < 2 || r.root >= meta.high_water) {
                return Err(format!(
                    "{what} root page {} outside 2..{}",
                    r.root, meta.high_water
                ));
            }
        }
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_detects_any_flipped_byte() {
        let m = Meta {
            page_size: 4096,
            txid: 7,
            catalog: TreeRoot {
                root: 5,
                entries: 2,
                depth: 1,
            },
            freemap: TreeRoot {
                root: 9,
                entries: 1,
                depth: 1,
            },
            freemap_behind: true,
            high_water: 12,
            live_pages: 6,
            unreachable_pages: 6,
            manifest_runs: 0,
            manifest_crc: 0,
            manifest_first: 5,
            closed_at: 6,
            closed_at_crc: 0x1234_5678,
        };
        let b = m.encode();
        assert_eq!(Meta::decode(&b).unwrap(), m);
        for i in 0..META_SIZE {
            let mut c = b;
            c[i] ^= 0x10;
            assert!(Meta::decode(&c).is_err(), "flip at {i} not detected");
        }
    }
}

#[cfg(test)]
mod manifest_tests {
    use super::*;

    #[test]
    fn manifest_round_trips_and_a_torn_manifest_is_detected() {
        let m = Meta::empty(4096);
        let runs = vec![
            ManifestRun {
                start: 9,
                pages: 3,
                overflow: false,
                txid: 0,
                checksum: 0,
            },
            ManifestRun {
                start: 40,
                pages: 17,
                overflow: true,
                txid: 0,
                checksum: 0xdead_beef,
            },
        ];
        let page = m.encode_page(&runs, 4096);
        let back = Meta::decode(&page).unwrap();
        assert_eq!(back.manifest_runs, 2);
        assert_eq!(back.manifest(&page).unwrap(), runs);
        for at in META_SIZE..META_SIZE + 2 * MANIFEST_RUN_SIZE {
            let mut torn = page.clone();
            torn[at] ^= 1;
            let meta = Meta::decode(&torn).unwrap();
            assert!(meta.manifest(&torn).is_err(), "flip at {at} not detected");
        }
        assert_eq!(manifest_capacity(4096), 248);
    }

    #[test]
    fn a_batch_manifest_round_trips_with_each_runs_txid() {
        let mut m = Meta::empty(4096);
        m.txid = 12;
        m.manifest_first = 9;
        let runs = vec![
            ManifestRun {
                start: 9,
                pages: 2,
                overflow: false,
                txid: 9,
                checksum: 0,
            },
            ManifestRun {
                start: 30,
                pages: 5,
                overflow: true,
                txid: 12,
                checksum: 0,
            },
        ];
        let page = m.encode_page(&runs, 4096);
        let back = Meta::decode(&page).unwrap();
        assert_eq!(back.manifest_first, 9);
        assert_eq!(back.manifest(&page).unwrap(), runs);
        assert_eq!(manifest_batch_capacity(4096), 165);
    }
}
