//! Reading a committed tree in place: every page access is bounds-checked against the
//! snapshot's high-water mark, so no page id from the file can reach past its end.

use larch_pager::{Map, Meta, PageHeader, PageRole, PageType, TreeRoot};

use crate::error::{Error, Result};
use crate::node_page::{NodePage, ValRef, OVERFLOW_HEADER, PREFETCHED_LEVELS};
use crate::PageId;

/// Deepest tree accepted; deeper means a corrupt root record.
pub const MAX_DEPTH: u32 = 64;

/// A read-only view of the file as of one meta: the map, the page size and the page limit.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    /// The mapping.
    pub map: &'a Map,
    /// Page size.
    pub page_size: usize,
    /// Pages at or past this id do not exist in this view.
    pub high_water: PageId,
    /// Verify each page's checksum on read.
    pub verify: bool,
}

impl<'a> View<'a> {
    /// A view of `meta` through `map`.
    pub fn new(map: &'a Map, meta: &Meta, verify: bool) -> View<'a> {
        View {
            map,
            page_size: meta.page_size as usize,
            high_water: meta.high_water,
            verify,
        }
    }

    /// The bytes of `n` pages starting at `id`.
    #[inline]
    pub fn pages(&self, id: PageId, n: u64) -> Result<&'a [u8]> {
        let end = id
            .checked_add(n)
            .filter(|&e| id >= 2 && e <= self.high_water);
        if end.is_none() {
            return Err(Error::corrupt(
                id,
                format!(
                    "page run of {n} outside the file's pages 2..{}",
                    self.high_water
                ),
            ));
        }
        let ps = self.page_size as u64;
        let len = (n * ps) as usize;
        self.map
            .slice(id * ps, len, self.high_water * ps)
            .ok_or_else(|| Error::corrupt(id, "page outside the mapping"))
    }

    /// Start loading the first line of page `id`, which a scan will read next: its header and
    /// first slots arrive while the scan reads the page before it. A hint: an id outside the
    /// view is ignored.
    #[inline]
    pub fn prefetch_page(&self, id: PageId) {
        if id >= 2 && id < self.high_water {
            if let Ok(b) = self.pages(id, 1) {
                larch_pager::map::prefetch(b, 0);
            }
        }
    }

    /// A branch or leaf page of a tree of `role`.
    #[inline]
    pub fn node(&self, id: PageId, role: PageRole) -> Result<NodePage<'a>> {
        let bytes = self.pages(id, 1)?;
        if self.verify {
            verify_checksum(id, bytes)?;
        }
        NodePage::parse(id, bytes, role)
    }

    /// The bytes of a value.
    #[inline]
    pub fn value(&self, v: ValRef<'a>) -> Result<&'a [u8]> {
        match v {
            ValRef::Inline(b) => Ok(b),
            ValRef::Overflow { page, len } => self.overflow(page, len),
        }
    }

    /// The value held by the overflow run at `page`, which must say it holds `len` bytes.
    pub fn overflow(&self, page: PageId, len: u64) -> Result<&'a [u8]> {
        let n = (OVERFLOW_HEADER as u64)
            .checked_add(len)
            .map(|b| b.div_ceil(self.page_size as u64))
            .ok_or_else(|| Error::corrupt(page, "absurd overflow length"))?;
        let run = self.pages(page, n)?;
        match PageHeader::read(run) {
            Some(h) if h.page_type == PageType::Overflow => {}
            _ => return Err(Error::corrupt(page, "expected an overflow page")),
        }
        let stored = u64::from_le_bytes(
            run[16..24]
                .try_into()
                .map_err(|_| Error::corrupt(page, "short"))?,
        );
        if stored != len {
            return Err(Error::corrupt(
                page,
                format!("overflow holds {stored} bytes, leaf says {len}"),
            ));
        }
        if self.verify {
            verify_checksum(page, run)?;
        }
        Ok(&run[OVERFLOW_HEADER..OVERFLOW_HEADER + len as usize])
    }

    /// Look `key` up in the tree rooted at `root`.
    pub fn get(&self, root: &TreeRoot, role: PageRole, key: &[u8]) -> Result<Option<&'a [u8]>> {
        if root.root == 0 {
            return Ok(None);
        }
        if root.depth == 0 || root.depth > MAX_DEPTH {
            return Err(Error::corrupt(
                root.root,
                format!("tree depth {} is impossible", root.depth),
            ));
        }
        let mut id = root.root;
        for level in (1..=root.depth).rev() {
            let p = self.node(id, role)?;
            if level <= PREFETCHED_LEVELS {
                p.prefetch_search();
            }
            if p.leaf != (level == 1) {
                return Err(Error::corrupt(
                    id,
                    "leaf and branch levels do not match the tree depth",
                ));
            }
            if p.leaf {
                return match p.search(key)? {
                    Ok(i) => Ok(Some(self.value(p.entry(i)?.1)?)),
                    Err(_) => Ok(None),
                };
            }
            id = p.child(p.child_index(key)?)?;
        }
        Ok(None)
    }
}

/// Fail unless the stored crc32 of a page (or run) matches its contents.
pub fn verify_checksum(id: PageId, bytes: &[u8]) -> Result<()> {
    let stored = larch_pager::stored_checksum(bytes);
    let actual = larch_pager::run_checksum(bytes);
    if stored != actual {
        return Err(Error::corrupt(
            id,
            format!("checksum mismatch (stored {stored:08x}, computed {actual:08x})"),
        ));
    }
    Ok(())
}
