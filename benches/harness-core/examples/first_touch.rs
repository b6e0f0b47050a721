//! How fast the page cache takes new data on this machine, 256 MiB at a time, for
//! docs/performance.md, "Memory after a large transaction": `MB` MiB written to a new file in
//! `PIECE`-byte pwrites (64 KiB by default: 64 KiB page-cache folios), the rate of each 256 MiB
//! printed, then the file removed. On a virtual machine whose balloon reports free memory to
//! the host, memory the guest has not touched lately is slow to touch again, and the rate
//! drops once the writes run past what is warm.
//!
//! ```text
//! cargo build --release -p larch-bench-core --example first_touch
//! target/release/examples/first_touch DIR 6000 [PIECE]
//! ```

use std::os::unix::fs::FileExt;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().ok_or("usage: first_touch DIR MB [PIECE]")?);
    let mb: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(4000);
    let piece: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(64 << 10);
    let path = dir.join("first_touch.tmp");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let buf = vec![7u8; piece];
    let seg = 256u64 << 20;
    let total = mb << 20;
    let mut rates = Vec::new();
    let mut t = std::time::Instant::now();
    let mut off = 0u64;
    while off < total {
        file.write_all_at(&buf, off)?;
        off += piece as u64;
        if off.is_multiple_of(seg) {
            rates.push(format!(
                "{:.0}",
                seg as f64 / t.elapsed().as_secs_f64() / 1e6
            ));
            t = std::time::Instant::now();
        }
    }
    drop(file);
    std::fs::remove_file(&path)?;
    println!(
        "MB/s for each 256 MiB of {mb} MiB in {piece}-byte writes: {}",
        rates.join(" ")
    );
    Ok(())
}
