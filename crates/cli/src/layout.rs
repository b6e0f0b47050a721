//! What every page of a commit is, found by walking the file from a meta: the catalog, the
//! free map and every tree, then the free map's bits. Page headers alone cannot tell (an
//! overflow run's later pages hold value bytes that may look like a header), so `pages` and
//! `page` use this walk. It never trusts the file: page ids are range-checked, each page is
//! visited once (so cycles end), and anything wrong becomes a problem, not a panic.

use larch_engine::raw::{
    run_checksum, stored_checksum, Meta, NodePage, PageHeader, PageRole, PageType, TreeRoot,
    ValRef, CHUNK_BYTES, CHUNK_PAGES, OVERFLOW_HEADER,
};

use crate::pagefile::PageFile;

/// Stop listing problems after this many: a wrecked file need not list every page.
const MAX_PROBLEMS: usize = 1000;

/// What a page is in the walked commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Page 0 or 1.
    Meta,
    /// A branch of some tree.
    Branch,
    /// A leaf of some tree.
    Leaf,
    /// First page of an overflow run.
    Overflow,
    /// A later page of an overflow run.
    OverflowCont,
    /// Marked unreachable by the free map (free or pending; the file does not say which).
    Free,
    /// Reached from a tree, but its header is not a branch, leaf or overflow header.
    Unknown,
    /// Neither reachable nor marked free: damage.
    Leaked,
}

impl Kind {
    /// Name in `pages` output.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Meta => "meta",
            Kind::Branch => "branch",
            Kind::Leaf => "leaf",
            Kind::Overflow => "overflow",
            Kind::OverflowCont => "overflow-cont",
            Kind::Free => "free",
            Kind::Unknown => "unknown",
            Kind::Leaked => "leaked",
        }
    }
}

/// One page.
#[derive(Clone, Debug)]
pub struct Row {
    /// What it is.
    pub kind: Kind,
    /// The tree kind it belongs to (data, catalog, freemap).
    pub role: Option<PageRole>,
    /// Index into [`Layout::trees`] for pages of a named tree.
    pub tree: Option<usize>,
    /// The transaction that wrote it.
    pub txid: Option<u64>,
    /// Entries (leaf), children (branch).
    pub count: Option<u64>,
    /// Value length, on the first page of an overflow run.
    pub overflow_len: Option<u64>,
    /// Whether its checksum matches (for a run: the whole run's, on its first page).
    pub crc_ok: Option<bool>,
}

impl Row {
    fn bare(kind: Kind) -> Row {
        Row {
            kind,
            role: None,
            tree: None,
            txid: None,
            count: None,
            overflow_len: None,
            crc_ok: None,
        }
    }
}

/// The page map of one commit.
pub struct Layout {
    /// The meta walked.
    pub meta: Meta,
    /// Names of the data trees, in catalog order.
    pub trees: Vec<String>,
    /// One row per page below the high-water mark.
    pub rows: Vec<Row>,
    /// Damage found on the way (`check` is the full verdict; this is what the walk tripped on).
    pub problems: Vec<String>,
}

struct Walker<'a> {
    pf: &'a PageFile,
    hw: u64,
    rows: Vec<Row>,
    claimed: Vec<bool>,
    problems: Vec<String>,
}

/// Walk the commit `meta` of `pf`.
pub fn walk(pf: &PageFile, meta: Meta) -> Layout {
    // The meta's high-water mark was checked against the file length, but stay within the
    // file regardless.
    let hw = meta.high_water.min(pf.pages());
    let mut w = Walker {
        pf,
        hw,
        rows: (0..hw).map(|_| Row::bare(Kind::Leaked)).collect(),
        claimed: vec![false; hw as usize],
        problems: Vec::new(),
    };
    for slot in 0..2u64.min(hw) {
        let m = &pf.metas[slot as usize];
        w.rows[slot as usize] = Row {
            txid: m.as_ref().ok().map(|m| m.txid),
            crc_ok: match m {
                Ok(_) => Some(true),
                Err(e) if e.contains("all zero") => None,
                Err(_) => Some(false),
            },
            ..Row::bare(Kind::Meta)
        };
        w.claimed[slot as usize] = true;
    }
    let catalog = w.tree(meta.catalog, PageRole::Catalog, None, "catalog");
    let freemap = w.tree(meta.freemap, PageRole::FreeMap, None, "free map");
    let mut trees = Vec::new();
    for (name, value) in catalog {
        let name = String::from_utf8_lossy(&name).into_owned();
        match TreeRoot::decode(&value) {
            Some(root) => {
                trees.push(name.clone());
                w.tree(
                    root,
                    PageRole::Data,
                    Some(trees.len() - 1),
                    &format!("tree {name:?}"),
                );
            }
            None => w.problem(format!("catalog entry {name:?} is not a tree root")),
        }
    }
    // A free map behind its meta records an earlier commit (docs/format.md, "A free map
    // behind its meta"): its shape is checked, and the pages no tree reaches are the free
    // ones, as open and `check` take them.
    w.free_bits(&freemap, !meta.freemap_behind);
    for id in 2..hw {
        if meta.freemap_behind && !w.claimed[id as usize] {
            w.claimed[id as usize] = true;
            w.rows[id as usize].kind = Kind::Free;
            w.stale_header(id);
        } else if w.rows[id as usize].kind == Kind::Leaked {
            w.stale_header(id);
            w.problem(format!(
                "page {id}: neither reachable nor marked free (leaked)"
            ));
        }
    }
    Layout {
        meta,
        trees,
        rows: w.rows,
        problems: w.problems,
    }
}

impl Walker<'_> {
    fn problem(&mut self, what: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(what);
        }
    }

    /// Claim pages `p..p+n`; false (and a problem) if outside the commit or already claimed.
    fn claim(&mut self, p: u64, n: u64, what: &str) -> bool {
        let end = match p.checked_add(n) {
            Some(e) if p >= 2 && e <= self.hw => e,
            _ => {
                self.problem(format!(
                    "{what}: page {p} (+{n}) lies outside the commit's pages 2..{}",
                    self.hw
                ));
                return false;
            }
        };
        if let Some(q) = (p..end).find(|&q| self.claimed[q as usize]) {
            self.problem(format!(
                "page {q}: reachable twice ({what}; shared page or a cycle)"
            ));
            return false;
        }
        for q in p..end {
            self.claimed[q as usize] = true;
        }
        true
    }

    /// Walk a tree, recording its pages. Returns the inline leaf entries of the catalog and
    /// free map (what the rest of the walk needs); nothing for a data tree.
    fn tree(
        &mut self,
        root: TreeRoot,
        role: PageRole,
        tree: Option<usize>,
        what: &str,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        if root.root == 0 {
            return out;
        }
        let mut stack = vec![(root.root, root.depth)];
        while let Some((id, level)) = stack.pop() {
            if self.problems.len() >= MAX_PROBLEMS || !self.claim(id, 1, what) {
                continue;
            }
            let bytes = match self.pf.read(id, 1) {
                Ok(b) => b,
                Err(e) => {
                    self.problem(format!("{what}: {e}"));
                    continue;
                }
            };
            let crc_ok = stored_checksum(&bytes) == run_checksum(&bytes);
            if !crc_ok {
                self.problem(format!("page {id}: checksum mismatch ({what})"));
            }
            let header = PageHeader::read(&bytes);
            self.rows[id as usize] = Row {
                kind: match header.map(|h| h.page_type) {
                    Some(PageType::Branch) => Kind::Branch,
                    Some(PageType::Leaf) => Kind::Leaf,
                    Some(PageType::Overflow) => Kind::Overflow,
                    None => Kind::Unknown,
                },
                role: header.map(|h| h.role),
                tree,
                txid: header.map(|h| h.txid),
                count: header.map(|h| h.count.into()),
                overflow_len: None,
                crc_ok: Some(crc_ok),
            };
            let page = match NodePage::parse(id, &bytes, role) {
                Ok(p) => p,
                Err(e) => {
                    self.problem(format!("{what}: {e}"));
                    continue;
                }
            };
            if page.leaf != (level == 1) {
                self.problem(format!(
                    "page {id}: a {} at level {level} ({what})",
                    if page.leaf { "leaf" } else { "branch" }
                ));
            }
            for i in 0..page.count {
                if page.leaf {
                    match page.entry(i) {
                        Ok((k, ValRef::Inline(v))) if role != PageRole::Data => {
                            out.push((k.to_vec(), v.to_vec()))
                        }
                        Ok((_, ValRef::Inline(_))) => {}
                        Ok((_, ValRef::Overflow { page: first, len })) => {
                            self.overflow(first, len, role, tree, what)
                        }
                        Err(e) => self.problem(format!("{what}: {e}")),
                    }
                } else {
                    match page.child(i) {
                        // Levels only label problems; the claim bitmap is what ends cycles.
                        Ok(c) => stack.push((c, level.saturating_sub(1))),
                        Err(e) => self.problem(format!("{what}: {e}")),
                    }
                }
            }
        }
        out
    }

    fn overflow(&mut self, first: u64, len: u64, role: PageRole, tree: Option<usize>, what: &str) {
        let ps = self.pf.page_size as u64;
        let Some(n) = (OVERFLOW_HEADER as u64)
            .checked_add(len)
            .map(|b| b.div_ceil(ps))
        else {
            return self.problem(format!("{what}: absurd overflow length {len}"));
        };
        if !self.claim(first, n, &format!("{what}, overflow value")) {
            return;
        }
        let run = match self.pf.read(first, n) {
            Ok(r) => r,
            Err(e) => return self.problem(format!("{what}: {e}")),
        };
        let crc_ok = stored_checksum(&run) == run_checksum(&run);
        if !crc_ok {
            self.problem(format!(
                "page {first}: overflow run checksum mismatch ({what})"
            ));
        }
        let header = PageHeader::read(&run);
        if header.map(|h| h.page_type) != Some(PageType::Overflow) {
            self.problem(format!("page {first}: expected an overflow page ({what})"));
        }
        let stored = run
            .get(16..24)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes);
        if stored != Some(len) {
            self.problem(format!(
                "page {first}: overflow run holds {stored:?} bytes, its leaf says {len} ({what})"
            ));
        }
        let txid = header.map(|h| h.txid);
        self.rows[first as usize] = Row {
            kind: Kind::Overflow,
            role: Some(role),
            tree,
            txid,
            count: header.map(|h| h.count.into()),
            overflow_len: Some(len),
            crc_ok: Some(crc_ok),
        };
        for q in first + 1..first + n {
            self.rows[q as usize] = Row {
                role: Some(role),
                tree,
                txid,
                ..Row::bare(Kind::OverflowCont)
            };
        }
    }

    /// Check the free map's chunks, and with `mark`, record the pages they mark as free.
    fn free_bits(&mut self, chunks: &[(Vec<u8>, Vec<u8>)], mark: bool) {
        for (key, bits) in chunks {
            let Some(idx) = <[u8; 8]>::try_from(key.as_slice())
                .ok()
                .map(u64::from_be_bytes)
            else {
                self.problem(format!(
                    "free map: key {} is not 8 bytes",
                    crate::hex::encode(key)
                ));
                continue;
            };
            if bits.len() != CHUNK_BYTES {
                self.problem(format!(
                    "free map: chunk {idx} is {} bytes, not {CHUNK_BYTES}",
                    bits.len()
                ));
                continue;
            }
            for (byte_i, &byte) in bits.iter().enumerate() {
                for bit in (0..8).filter(|b| byte & (1 << b) != 0) {
                    let page = idx
                        .checked_mul(CHUNK_PAGES)
                        .and_then(|b| b.checked_add((byte_i * 8 + bit) as u64));
                    match page {
                        Some(p) if p < 2 || p >= self.hw => self.problem(format!(
                            "free map marks page {p}, outside the commit's pages 2..{}",
                            self.hw
                        )),
                        Some(_) if !mark => {}
                        Some(p) if self.claimed[p as usize] => self.problem(format!(
                            "page {p}: reachable, yet the free map marks it free"
                        )),
                        Some(p) => {
                            self.claimed[p as usize] = true;
                            self.rows[p as usize].kind = Kind::Free;
                            self.stale_header(p);
                        }
                        None => {
                            self.problem(format!("free map: chunk {idx} is past any possible page"))
                        }
                    }
                }
            }
        }
    }

    /// For a page no tree reaches: who wrote what it still holds, if its header says.
    fn stale_header(&mut self, id: u64) {
        if let Some(h) = self.pf.header(id) {
            let row = &mut self.rows[id as usize];
            row.txid = Some(h.txid);
        }
    }
}
