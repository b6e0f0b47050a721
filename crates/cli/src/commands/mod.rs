//! One module per subcommand: its arguments and what it does.

pub mod check;
pub mod demo;
pub mod dump;
pub mod info;
pub mod kv;
pub mod load;
pub mod page;
pub mod pages;
pub mod stat;
pub mod trees;

use std::io::{self, BufWriter, StdoutLock};

/// Buffered stdout: commands print many lines, and one write per line is slow.
pub fn stdout() -> BufWriter<StdoutLock<'static>> {
    BufWriter::with_capacity(1 << 16, io::stdout().lock())
}
