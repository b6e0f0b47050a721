//! Opening a database the way each kind of command needs it.

use std::path::Path;

use larch_engine::{Db, Options};

use crate::error::{engine, CliResult};

/// Open for a read-only command: shared lock, no write access, never creates the file, and
/// every page's checksum is verified so damage shows up as an error instead of wrong output.
pub fn read_only(path: &Path) -> CliResult<Db> {
    read_only_with(path, Options::default())
}

/// [`read_only`] with other options (e.g. recovery ones) set in `opts`.
pub fn read_only_with(path: &Path, opts: Options) -> CliResult<Db> {
    let opts = opts.read_only(true).create(false).verify_checksums(true);
    Db::open(path, opts).map_err(|e| engine(path, e))
}

/// Open for writing with `opts` (which say whether a missing file is created).
pub fn writable(path: &Path, opts: Options) -> CliResult<Db> {
    Db::open(path, opts).map_err(|e| engine(path, e))
}
