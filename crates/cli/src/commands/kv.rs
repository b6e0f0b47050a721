//! `larch get`, `larch put`, `larch del`: one record at a time.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use larch_engine::{Error, Options};

use crate::error::{engine, CliError, CliResult};
use crate::TreeArg;

/// Arguments of `larch get`.
#[derive(Args, Debug)]
pub struct GetArgs {
    /// Database file.
    pub file: PathBuf,
    /// The key (UTF-8 text, or hex with --hex).
    pub key: String,
    #[command(flatten)]
    pub tree: TreeArg,
    /// The key is hex, and the value is printed as lowercase hex.
    #[arg(long)]
    pub hex: bool,
}

/// Arguments of `larch put`.
#[derive(Args, Debug)]
pub struct PutArgs {
    /// Database file (created if missing).
    pub file: PathBuf,
    /// The key (UTF-8 text, or hex with --hex).
    pub key: String,
    /// The value (UTF-8 text, or hex with --hex).
    pub value: String,
    #[command(flatten)]
    pub tree: TreeArg,
    /// Key and value are hex.
    #[arg(long)]
    pub hex: bool,
}

/// Arguments of `larch del`.
#[derive(Args, Debug)]
pub struct DelArgs {
    /// Database file.
    pub file: PathBuf,
    /// The key (UTF-8 text, or hex with --hex).
    pub key: String,
    #[command(flatten)]
    pub tree: TreeArg,
    /// The key is hex.
    #[arg(long)]
    pub hex: bool,
}

/// The bytes of a command-line key or value. Bad hex is a malformed argument: exit 2.
fn arg_bytes(what: &str, s: &str, hex: bool) -> CliResult<Vec<u8>> {
    if hex {
        crate::hex::decode(s.as_bytes())
            .map_err(|e| CliError::usage(format!("{what} {s:?} is not valid hex: {e}")))
    } else {
        Ok(s.as_bytes().to_vec())
    }
}

/// How to show a key in a message: as typed.
fn shown(key: &str, tree: &str, file: &std::path::Path) -> String {
    format!(
        "key {key:?} not found in tree {tree:?} of {}",
        file.display()
    )
}

/// Run `larch get`.
pub fn get(a: GetArgs) -> CliResult {
    let key = arg_bytes("key", &a.key, a.hex)?;
    let db = crate::open::read_only(&a.file)?;
    let rx = db.begin_read().map_err(|e| engine(&a.file, e))?;
    let tree = rx.open_tree(&a.tree.tree).map_err(|e| engine(&a.file, e))?;
    let value = tree.get(&key).map_err(|e| engine(&a.file, e))?;
    let Some(value) = value else {
        return Err(CliError::failed(shown(&a.key, &a.tree.tree, &a.file)));
    };
    let mut out = super::stdout();
    if a.hex {
        let mut line = Vec::new();
        crate::hex::encode_into(value, &mut line);
        out.write_all(&line)?;
    } else {
        // "As text": the stored bytes, unchanged, whether or not they are UTF-8.
        out.write_all(value)?;
    }
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// Run `larch put`.
pub fn put(a: PutArgs) -> CliResult {
    let key = arg_bytes("key", &a.key, a.hex)?;
    let value = arg_bytes("value", &a.value, a.hex)?;
    let db = crate::open::writable(&a.file, Options::default())?;
    let run = || -> Result<(), Error> {
        let tx = db.begin_write()?;
        tx.open_tree(&a.tree.tree)?.insert(&key, &value)?;
        tx.commit()
    };
    run().map_err(|e| engine(&a.file, e))
}

/// Run `larch del`.
pub fn del(a: DelArgs) -> CliResult {
    let key = arg_bytes("key", &a.key, a.hex)?;
    // Deleting from a missing file or tree must not create either.
    let db = crate::open::writable(&a.file, Options::default().create(false))?;
    let exists = {
        let rx = db.begin_read().map_err(|e| engine(&a.file, e))?;
        let names = rx.tree_names().map_err(|e| engine(&a.file, e))?;
        names.contains(&a.tree.tree)
    };
    if !exists {
        return Err(CliError::failed(format!(
            "tree {:?} does not exist in {}",
            a.tree.tree,
            a.file.display()
        )));
    }
    let run = || -> Result<bool, Error> {
        let tx = db.begin_write()?;
        let removed = tx.open_tree(&a.tree.tree)?.remove(&key)?;
        if removed {
            tx.commit()?;
        } else {
            // Nothing changed: abort rather than write a commit that only bumps the txid.
            tx.abort();
        }
        Ok(removed)
    };
    match run() {
        Ok(true) => Ok(()),
        Ok(false) => Err(CliError::failed(shown(&a.key, &a.tree.tree, &a.file))),
        Err(e) => Err(engine(&a.file, e)),
    }
}
