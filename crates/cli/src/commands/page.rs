//! `larch page FILE ID [--raw]`: one page decoded; a viewer, so it works on damaged files
//! too (exit 1 only if the page cannot be read at all).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use larch_engine::raw::{
    run_checksum, stored_checksum, Meta, NodePage, PageHeader, PageType, ValRef, OVERFLOW_HEADER,
    PAGE_HEADER_SIZE,
};

use crate::error::{CliError, CliResult};
use crate::layout::{Kind, Layout};
use crate::pagefile::PageFile;

/// Arguments of `larch page`.
#[derive(Args, Debug)]
pub struct PageArgs {
    /// Database file.
    pub file: PathBuf,
    /// Page number (0 and 1 are the metas).
    pub id: u64,
    /// Also print the page bytes as a hex dump.
    #[arg(long)]
    pub raw: bool,
}

/// Run `larch page`.
pub fn run(a: PageArgs) -> CliResult {
    // The snapshot (when the file opens) is held while the page is read, so a page it reaches
    // is read as its commit wrote it even while another process writes the file.
    let snap = crate::commands::pages::layout_of(&a.file);
    let (opened, why) = match snap {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e.message.unwrap_or_default())),
    };
    let reopened;
    let pf = match &opened {
        Some(s) => &s.pf,
        None => {
            reopened = PageFile::open(&a.file)?;
            &reopened
        }
    };
    if a.id >= pf.pages() {
        return Err(CliError::failed(format!(
            "{}: page {} is past the end of the file ({} pages of {} bytes)",
            a.file.display(),
            a.id,
            pf.pages(),
            pf.page_size
        )));
    }
    let bytes = pf
        .read(a.id, 1)
        .map_err(|e| CliError::failed(format!("{}: {e}", a.file.display())))?;
    let mut out = super::stdout();
    writeln!(
        out,
        "page {} of {} (page size {}, {} pages in the file)",
        a.id,
        a.file.display(),
        pf.page_size,
        pf.pages()
    )?;
    if pf.page_size_guessed {
        writeln!(
            out,
            "note: no valid meta gives the page size; assuming {}",
            pf.page_size
        )?;
    }
    let status = match (&opened, why) {
        (Some(s), _) => status(&s.layout, a.id),
        (None, why) => format!("unknown ({})", why.unwrap_or_default()),
    };
    writeln!(out, "status: {status}")?;
    if a.id < 2 {
        meta(&mut out, pf, a.id as usize)?;
    } else {
        node(&mut out, pf, a.id, &bytes)?;
    }
    if a.raw {
        writeln!(out, "raw:")?;
        hexdump(&mut out, &bytes)?;
    }
    out.flush()?;
    Ok(())
}

/// What page `id` is in the snapshot's commit, from the same walk `larch pages` does. A file
/// the engine will not open still gets its page decoded, just without a status.
fn status(l: &Layout, id: u64) -> String {
    let Some(r) = l.rows.get(id as usize) else {
        return format!(
            "beyond the high-water mark {} of txid {} (not in use)",
            l.meta.high_water, l.meta.txid
        );
    };
    let tree = match (r.tree.and_then(|i| l.trees.get(i)), r.role) {
        (Some(name), _) => format!(" of tree {name:?}"),
        (None, Some(role)) => format!(" of the {} tree", role.name()),
        (None, None) => String::new(),
    };
    match r.kind {
        Kind::Meta if l.meta.txid % 2 == id => {
            format!("meta slot {} (the newest commit, txid {})", id, l.meta.txid)
        }
        Kind::Meta => format!("meta slot {} (an older commit)", id),
        Kind::Free => format!(
            "free in txid {} (unreachable: free or pending)",
            l.meta.txid
        ),
        Kind::Leaked => format!(
            "leaked in txid {} (neither reachable nor marked free)",
            l.meta.txid
        ),
        k => format!("reachable in txid {}: {}{tree}", l.meta.txid, k.name()),
    }
}

fn meta(out: &mut impl Write, pf: &PageFile, slot: usize) -> CliResult {
    writeln!(out, "type: meta (slot {slot})")?;
    let m: &Meta = match &pf.metas[slot] {
        Ok(m) => m,
        Err(why) => {
            writeln!(out, "valid: no ({why})")?;
            return Ok(());
        }
    };
    writeln!(out, "valid: yes (magic, version and checksum check out)")?;
    writeln!(out, "page_size: {}", m.page_size)?;
    writeln!(out, "txid: {}", m.txid)?;
    for (what, r) in [("catalog", m.catalog), ("freemap", m.freemap)] {
        writeln!(
            out,
            "{what}: root {} entries {} depth {}",
            r.root, r.entries, r.depth
        )?;
    }
    if m.freemap_behind {
        writeln!(
            out,
            "freemap_behind: yes (it records an earlier commit; open finds the free pages by a walk)"
        )?;
    }
    writeln!(out, "high_water: {}", m.high_water)?;
    writeln!(out, "live_pages: {}", m.live_pages)?;
    writeln!(out, "unreachable_pages: {}", m.unreachable_pages)?;
    Ok(())
}

fn node(out: &mut impl Write, pf: &PageFile, id: u64, bytes: &[u8]) -> CliResult {
    let Some(h) = PageHeader::read(bytes) else {
        writeln!(
            out,
            "type: unknown (type byte 0x{:02x}, role byte 0x{:02x})",
            bytes[0], bytes[1]
        )?;
        return Ok(());
    };
    writeln!(out, "type: {}", h.page_type.name())?;
    writeln!(out, "tree: {}", h.role.name())?;
    writeln!(out, "count: {}", h.count)?;
    writeln!(out, "txid: {}", h.txid)?;
    if h.page_type == PageType::Overflow {
        return overflow(out, pf, id, bytes);
    }
    crc(out, bytes)?;
    let page = match NodePage::parse(id, bytes, h.role) {
        Ok(p) => p,
        Err(e) => {
            writeln!(out, "error: {e}")?;
            return Ok(());
        }
    };
    writeln!(out, "{}:", if page.leaf { "entries" } else { "children" })?;
    for i in 0..page.count {
        if page.leaf {
            match page.entry(i) {
                Ok((k, ValRef::Inline(v))) => writeln!(
                    out,
                    "  {i:>4}  key {}  value inline {} bytes",
                    key(k),
                    v.len()
                )?,
                Ok((k, ValRef::Overflow { page, len })) => writeln!(
                    out,
                    "  {i:>4}  key {}  value overflow {len} bytes at page {page}",
                    key(k)
                )?,
                Err(e) => writeln!(out, "  {i:>4}  error: {e}")?,
            }
        } else {
            let child = page.child(i);
            // Separator 0 is empty by design: child 0 holds everything below separator 1.
            let sep = if i == 0 {
                Ok("(none)".to_string())
            } else {
                page.key(i).map(key)
            };
            match (sep, child) {
                (Ok(s), Ok(c)) => writeln!(out, "  {i:>4}  separator {s}  child {c}")?,
                (Err(e), _) | (_, Err(e)) => writeln!(out, "  {i:>4}  error: {e}")?,
            }
        }
    }
    Ok(())
}

fn overflow(out: &mut impl Write, pf: &PageFile, id: u64, bytes: &[u8]) -> CliResult {
    let len = u64::from_le_bytes(
        bytes[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + 8]
            .try_into()
            .unwrap_or([0; 8]),
    );
    let n = (OVERFLOW_HEADER as u64)
        .saturating_add(len)
        .div_ceil(pf.page_size as u64);
    writeln!(
        out,
        "value length: {len} bytes, a run of {n} pages ({id}..{})",
        id.saturating_add(n)
    )?;
    match pf.read(id, n) {
        // The checksum covers the whole run.
        Ok(run) => crc(out, &run)?,
        Err(e) => writeln!(out, "crc: cannot verify: {e}")?,
    }
    Ok(())
}

fn crc(out: &mut impl Write, bytes: &[u8]) -> CliResult {
    let (stored, actual) = (stored_checksum(bytes), run_checksum(bytes));
    if stored == actual {
        writeln!(out, "crc: {stored:08x} (ok)")?;
    } else {
        writeln!(out, "crc: stored {stored:08x}, computed {actual:08x} (BAD)")?;
    }
    Ok(())
}

/// A key as hex and as escaped text, so both binary and text keys read well.
fn key(k: &[u8]) -> String {
    format!("{} \"{}\"", crate::hex::encode(k), k.escape_ascii())
}

/// `hexdump -C` style: offset, 16 bytes, ASCII; runs of identical lines collapse to `*`.
pub fn hexdump(out: &mut impl Write, bytes: &[u8]) -> CliResult {
    let mut prev: Option<&[u8]> = None;
    let mut starred = false;
    for (i, line) in bytes.chunks(16).enumerate() {
        if prev == Some(line) {
            if !starred {
                writeln!(out, "*")?;
                starred = true;
            }
            continue;
        }
        prev = Some(line);
        starred = false;
        let mut hex = String::with_capacity(50);
        for (j, b) in line.iter().enumerate() {
            hex.push_str(&format!("{b:02x} "));
            if j == 7 {
                hex.push(' ');
            }
        }
        let text: String = line
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        writeln!(out, "{:08x}  {hex:<49} |{text}|", i * 16)?;
    }
    writeln!(out, "{:08x}", bytes.len())?;
    Ok(())
}
