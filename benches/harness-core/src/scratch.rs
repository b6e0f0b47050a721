//! Files the device measurements (`examples/sync_ranges.rs`, `examples/meta_dsync.rs`) write
//! into.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Create `path` (truncating it) with `mib` MiB written and synced, so the writes a
/// measurement makes overwrite allocated blocks.
pub fn written_file(path: &Path, mib: u64) -> std::io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let chunk = vec![0x5a_u8; 1 << 20];
    for i in 0..mib {
        f.write_all_at(&chunk, i << 20)?;
    }
    f.sync_all()?;
    Ok(f)
}
