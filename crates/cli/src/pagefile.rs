//! Raw access to a database file's pages for `pages` and `page`: the two metas, the page size
//! and page bytes, read with plain positioned reads so a damaged file can still be looked at.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use larch_engine::raw::{Meta, PageHeader, META_SIZE, PAGE_HEADER_SIZE};

use crate::error::{CliError, CliResult};

/// Smallest and largest page sizes a file can have (the engine's limits).
const MIN_PAGE: usize = 4096;
const MAX_PAGE: usize = 65536;

/// An open file, its page size and what its two meta slots hold.
pub struct PageFile {
    file: File,
    /// File length in bytes.
    pub len: u64,
    /// The page size from a valid meta, or the smallest one when no meta tells.
    pub page_size: usize,
    /// Set when no valid meta gave the page size.
    pub page_size_guessed: bool,
    /// Slot 0 and slot 1: a meta, or why the slot does not hold a valid one.
    pub metas: [Result<Meta, String>; 2],
}

impl PageFile {
    /// Open `path` and decode its metas. Fails only if the file cannot be read.
    pub fn open(path: &Path) -> CliResult<PageFile> {
        let io_err = |op: &str, e: std::io::Error| {
            CliError::failed(format!("{}: {op} failed: {e}", path.display()))
        };
        let file = File::open(path).map_err(|e| io_err("open", e))?;
        let len = file.metadata().map_err(|e| io_err("stat", e))?.len();
        let mut pf = PageFile {
            file,
            len,
            page_size: MIN_PAGE,
            page_size_guessed: true,
            metas: [Err(String::new()), Err(String::new())],
        };
        let slot0 = pf.decode_meta(0, None);
        // Slot 1 sits one page in. If slot 0 cannot tell the page size, accept a meta at any
        // offset that matches its own page size (as the engine's open does).
        let sizes: Vec<usize> = match &slot0 {
            Ok(m) => vec![m.page_size as usize],
            Err(_) => (0..)
                .map(|i| MIN_PAGE << i)
                .take_while(|&s| s <= MAX_PAGE)
                .collect(),
        };
        let mut slot1 = Err("meta page 1 is missing".to_string());
        for ps in sizes {
            let cand = pf.decode_meta(ps as u64, Some(ps));
            let found = cand.is_ok();
            if found || slot1.is_err() {
                slot1 = cand;
            }
            if found {
                break;
            }
        }
        if let Some(m) = slot0.as_ref().ok().or(slot1.as_ref().ok()) {
            pf.page_size = m.page_size as usize;
            pf.page_size_guessed = false;
        }
        pf.metas = [slot0, slot1];
        Ok(pf)
    }

    /// Decode the meta at byte `offset`; `at_page_size` requires its page size to match.
    fn decode_meta(&self, offset: u64, at_page_size: Option<usize>) -> Result<Meta, String> {
        let mut buf = [0u8; META_SIZE];
        if offset + META_SIZE as u64 > self.len {
            return Err(format!(
                "the file ends before the meta page at offset {offset}"
            ));
        }
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|e| format!("read failed: {e}"))?;
        let m = Meta::decode(&buf)?;
        if at_page_size.is_some_and(|ps| ps != m.page_size as usize) {
            return Err(format!(
                "meta page 1 has page size {} but sits at offset {offset}",
                m.page_size
            ));
        }
        match m.high_water.checked_mul(m.page_size as u64) {
            Some(n) if n <= self.len => Ok(m),
            _ => Err(format!(
                "meta {} says the file has {} pages of {} bytes but it is {} bytes (truncated?)",
                m.txid, m.high_water, m.page_size, self.len
            )),
        }
    }

    /// The meta of commit `txid`, if a slot holds it.
    pub fn meta_of(&self, txid: u64) -> Option<Meta> {
        self.metas
            .iter()
            .filter_map(|m| m.as_ref().ok())
            .find(|m| m.txid == txid)
            .copied()
    }

    /// Whole pages in the file.
    pub fn pages(&self) -> u64 {
        self.len / self.page_size as u64
    }

    /// Pages `id..id + n`, or why they cannot be read.
    pub fn read(&self, id: u64, n: u64) -> Result<Vec<u8>, String> {
        let end = id.checked_add(n).filter(|&e| e <= self.pages());
        if end.is_none() {
            return Err(format!(
                "pages {id}..{} lie past the end of the file ({} pages)",
                id.saturating_add(n),
                self.pages()
            ));
        }
        let ps = self.page_size as u64;
        let bytes = usize::try_from(n * ps)
            .map_err(|_| format!("a run of {n} pages is too large to read"))?;
        let mut buf = vec![0u8; bytes];
        self.file
            .read_exact_at(&mut buf, id * ps)
            .map_err(|e| format!("page {id}: read failed: {e}"))?;
        Ok(buf)
    }

    /// The common header of page `id`, if it reads as one.
    pub fn header(&self, id: u64) -> Option<PageHeader> {
        let mut buf = [0u8; PAGE_HEADER_SIZE];
        if id >= self.pages() {
            return None;
        }
        self.file
            .read_exact_at(&mut buf, id * self.page_size as u64)
            .ok()?;
        PageHeader::read(&buf)
    }
}
