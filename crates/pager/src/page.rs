//! The header every non-meta page starts with, and its checksum.
//!
//! ```text
//! 0      1      2        4        8                16
//! +------+------+--------+--------+----------------+
//! | type | role | count  | crc32  | txid           |
//! +------+------+--------+--------+----------------+
//! ```
//! The crc32 covers the whole page (or the whole run, for an overflow run) except its own four
//! bytes. docs/format.md has the body layouts.

use crate::TxId;

/// Bytes of the common page header.
pub const PAGE_HEADER_SIZE: usize = 16;
const TYPE_AT: usize = 0;
const ROLE_AT: usize = 1;
const COUNT_AT: usize = 2;
const CRC_AT: usize = 4;
const TXID_AT: usize = 8;

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageType {
    /// Interior node of a B+tree: separators and child page ids.
    Branch,
    /// Leaf node of a B+tree: keys and values (or references to overflow runs).
    Leaf,
    /// First page of a contiguous run holding one large value.
    Overflow,
}

impl PageType {
    fn code(self) -> u8 {
        match self {
            PageType::Branch => 1,
            PageType::Leaf => 2,
            PageType::Overflow => 3,
        }
    }
    #[inline]
    fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            1 => PageType::Branch,
            2 => PageType::Leaf,
            3 => PageType::Overflow,
            _ => return None,
        })
    }
    /// Lowercase name, as `larch pages` prints it.
    pub fn name(self) -> &'static str {
        match self {
            PageType::Branch => "branch",
            PageType::Leaf => "leaf",
            PageType::Overflow => "overflow",
        }
    }
}

/// Which tree a branch or leaf page belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageRole {
    /// A user's named tree.
    Data,
    /// The catalog: tree name -> tree root.
    Catalog,
    /// The persisted free-space map.
    FreeMap,
}

impl PageRole {
    fn code(self) -> u8 {
        match self {
            PageRole::Data => 0,
            PageRole::Catalog => 1,
            PageRole::FreeMap => 2,
        }
    }
    #[inline]
    fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            0 => PageRole::Data,
            1 => PageRole::Catalog,
            2 => PageRole::FreeMap,
            _ => return None,
        })
    }
    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            PageRole::Data => "data",
            PageRole::Catalog => "catalog",
            PageRole::FreeMap => "freemap",
        }
    }
}

/// The decoded common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    /// What the page holds.
    pub page_type: PageType,
    /// Which tree it belongs to.
    pub role: PageRole,
    /// Number of entries (branch: children; leaf: entries; overflow: 0).
    pub count: u16,
    /// The transaction that wrote it.
    pub txid: TxId,
}

impl PageHeader {
    /// Decode the header at the start of `page`; None if type or role is unknown or the page
    /// is shorter than a header.
    #[inline]
    pub fn read(page: &[u8]) -> Option<PageHeader> {
        if page.len() < PAGE_HEADER_SIZE {
            return None;
        }
        Some(PageHeader {
            page_type: PageType::from_code(page[TYPE_AT])?,
            role: PageRole::from_code(page[ROLE_AT])?,
            count: u16::from_le_bytes([page[COUNT_AT], page[COUNT_AT + 1]]),
            txid: u64::from_le_bytes(page[TXID_AT..TXID_AT + 8].try_into().ok()?),
        })
    }

    /// Encode into the first [`PAGE_HEADER_SIZE`] bytes of `page` (the checksum is left zero:
    /// set it last with [`set_page_checksum`]).
    pub fn write(&self, page: &mut [u8]) {
        page[TYPE_AT] = self.page_type.code();
        page[ROLE_AT] = self.role.code();
        page[COUNT_AT..COUNT_AT + 2].copy_from_slice(&self.count.to_le_bytes());
        page[CRC_AT..CRC_AT + 4].copy_from_slice(&[0; 4]);
        page[TXID_AT..TXID_AT + 8].copy_from_slice(&self.txid.to_le_bytes());
    }
}

/// Quickly read just the type byte (no validation of the rest).
#[inline]
pub fn raw_page_type(page: &[u8]) -> Option<PageType> {
    page.first().and_then(|&c| PageType::from_code(c))
}

/// crc32 of a page (or run) excluding the checksum field itself.
pub fn run_checksum(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&bytes[..CRC_AT]);
    h.update(&bytes[CRC_AT + 4..]);
    h.finalize()
}

/// crc32 of one page, excluding the checksum field.
pub fn page_checksum(page: &[u8]) -> u32 {
    run_checksum(page)
}

/// The checksum stored in the header.
pub fn stored_checksum(page: &[u8]) -> u32 {
    u32::from_le_bytes([
        page[CRC_AT],
        page[CRC_AT + 1],
        page[CRC_AT + 2],
        page[CRC_AT + 3],
    ])
}

/// Compute and store the checksum of a whole run (an overflow value spanning pages).
pub fn set_run_checksum(bytes: &mut [u8]) {
    let crc = run_checksum(bytes);
    bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Compute and store the checksum of one page.
pub fn set_page_checksum(page: &mut [u8]) {
    set_run_checksum(page)
}
