//! The lock file: shared memory beside the database through which processes that open the same
//! file find each other. It holds a reader table (which snapshot each reading thread of each
//! process holds) and the cross-process writer lock. Issue 15; docs/format.md, "The lock file".
//!
//! Nothing in it is needed to read or recover the data file: it describes who is attached *now*.
//! When no process has it open it may be deleted, and the first process to attach
//! re-initialises it (clearing slots left by processes that died).
//!
//! # Layout
//!
//! `<db path>-lock`, mapped `MAP_SHARED`, native byte order (the file never leaves the machine):
//! a 128-byte header ([`LOCK_MAGIC`], [`LOCK_VERSION`], slot counts, the layout size, a
//! generation counter, the newest committed and durable txids, a count of writer-lock takes,
//! the reader slots' high-water mark), then `process_slots` slots of 64 bytes (one
//! per attached [`LockFile`]), then `reader_slots` slots of 64 bytes (one per claimed
//! [`SlotHandle`]). A slot is `owner` (a nonzero nonce naming the `LockFile` that claimed it; 0
//! = free), `txid` (0 = idle, otherwise the snapshot txid + 1, so snapshot 0 can be held) and
//! `pid` (for display only). Every field is read and written only through atomics.
//!
//! # Liveness without trusting pids
//!
//! Each slot has a lock byte (outside the mapped range: advisory locks may lie past the end of
//! the file). Its owner holds an exclusive open-file-description (OFD) lock on that byte for
//! as long as it owns the slot. OFD locks belong to the open file description, not to a pid, so
//! they vanish when the owning process dies (SIGKILL included) and a new process that happens
//! to reuse the pid does not inherit them. A slot whose owner is nonzero but whose byte can be
//! locked has a dead owner: [`LockFile::clear_stale`] frees it *while holding that byte*, so a
//! claimer (which must take the byte before it may set `owner`) cannot race the clearing.
//! One caveat: a child `fork`ed after open shares the description, and keeps the parent's slots
//! alive until it exits or closes it (the descriptor is close-on-exec, so `exec` drops it).
//!
//! The writer lock is an exclusive OFD lock on one more byte ([`LockFile::lock_writer`]), so it
//! too is released when its holder dies. Attaching takes a shared OFD lock on an "attach" byte
//! for the life of the [`LockFile`]; the lock file is (re-)initialised only by an opener that
//! holds that byte *exclusively*, i.e. when provably no other process is attached.
//!
//! # The reader protocol (as LMDB's `mdb_txn_renew0`)
//!
//! The writer, holding the writer lock, makes commit `T` visible (pages, meta page `T % 2`) and
//! then publishes it: [`LockFile::publish_commit`]`(T)`, a SeqCst store to the header. A reader
//! with a claimed slot begins a snapshot with [`SlotHandle::begin_snapshot`]:
//!
//! 1. `t = committed_txid()` (SeqCst load);
//! 2. store `t` in its slot (SeqCst);
//! 3. load `committed_txid()` again (SeqCst); if it is not `t`, go to 1;
//! 4. read meta slot `t % 2` of the data file; if its checksum fails or its txid is not `t` (the
//!    writer has since reused that meta slot for `t + 2`), go to 1;
//! 5. read the snapshot; when done, [`SlotHandle::end`] (a Release store of 0).
//!
//! At the start of each write transaction `X` the writer takes
//! `oldest = min(oldest_reader(), X - 1)` (SeqCst loads) and reuses a page freed by commit `c`
//! only if `c <= oldest` (it is then unreachable from every snapshot `>= c`).
//!
//! Why the writer never reuses a page a reader can reach: all the stores and loads above are
//! SeqCst, so they fall in one total order consistent with each thread's program order. Take a
//! reader that passed step 3 with `t` and the writer's scan of its slot at the start of `X`.
//! - If the reader's store (2) precedes the scan, the scan sees `t` (or a later value the same
//!   reader stored, when it is done with `t`), so `oldest <= t` and no page of snapshot `t`
//!   (all freed by commits `> t`) is reused.
//! - If the scan precedes the store (2), then so does the writer's publication of `X - 1`
//!   (earlier in the writer's program order), so the reader's load (3) sees `X - 1` or later.
//!   It passed step 3, so `t >= X - 1`: its snapshot is the newest commit (or newer), whose
//!   pages `X` never reuses; later writers scan after (2) and fall in the first case.
//!
//! The hot path is steps 1–3 and 5: loads and stores to shared memory, no system call.
//! Claiming a slot ([`LockFile::claim_slot`], once per reading thread) takes one `fcntl`.

use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, MutexGuard};

use crate::kill::{Killer, LockStep};
use crate::TxId;

/// The first eight bytes of a lock file.
pub const LOCK_MAGIC: u64 = u64::from_ne_bytes(*b"larchlk\0");
/// The lock file layout this build reads and writes.
pub const LOCK_VERSION: u32 = 3;
/// Reader slots a lock file gets by default (LMDB's default is 126 too).
pub const DEFAULT_READER_SLOTS: u32 = 254;
/// Process slots a lock file gets by default: processes attached at once.
pub const DEFAULT_PROCESS_SLOTS: u32 = 126;
/// The most slots of either kind a lock file may have.
pub const MAX_SLOTS: u32 = 1 << 16;
/// Bytes of the header.
pub const LOCK_HEADER_SIZE: usize = 128;
/// Bytes of one slot: a cache line, so readers in different slots share none.
pub const LOCK_SLOT_SIZE: usize = 64;

/// Where the lock bytes live: far past any layout, so they never overlap the mapped table
/// (they need not: the locks are advisory, but keeping them apart keeps them legible).
const LOCK_BASE: i64 = 1 << 40;
const WRITER_BYTE: i64 = LOCK_BASE;
const ATTACH_BYTE: i64 = LOCK_BASE + 1;
const PROCESS_BYTES: i64 = LOCK_BASE + (1 << 20);
const READER_BYTES: i64 = LOCK_BASE + (2 << 20);

/// The lock file's name: the database's path with `-lock` appended.
pub fn lock_path(db_path: &Path) -> PathBuf {
    let mut s: OsString = db_path.as_os_str().to_owned();
    s.push("-lock");
    PathBuf::from(s)
}

/// What went wrong opening or using a lock file.
#[derive(Debug)]
pub enum LockFileError {
    /// A system call failed.
    Io {
        /// What was being done.
        op: &'static str,
        /// The lock file.
        path: PathBuf,
        /// The error the system returned.
        source: io::Error,
    },
    /// There is no lock file and the opener may not create one.
    Missing {
        /// The lock file.
        path: PathBuf,
    },
    /// The lock file exists (or must be created) but this process may not write it; every
    /// process that opens the database, readers included, writes its slots there.
    NotWritable {
        /// The lock file.
        path: PathBuf,
        /// The error the system returned.
        source: io::Error,
    },
    /// The file is not a lock file this build can use: short, wrong magic, impossible layout,
    /// or a size that does not match its header. It is re-initialised only by an opener that
    /// may create it while no other process is attached.
    Invalid {
        /// The lock file.
        path: PathBuf,
        /// Why, in words.
        reason: String,
        /// Whether other processes had it open (so it could not be re-initialised).
        attached: bool,
    },
    /// A lock file of another layout version.
    UnsupportedVersion {
        /// The lock file.
        path: PathBuf,
        /// The version it carries.
        found: u32,
        /// The version this build uses.
        supported: u32,
    },
    /// Every slot of a kind is taken by a live owner.
    Full {
        /// The lock file.
        path: PathBuf,
        /// "reader" or "process".
        what: &'static str,
        /// How many slots of that kind there are.
        slots: u32,
    },
}

impl LockFileError {
    fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        LockFileError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

impl fmt::Display for LockFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockFileError::Io { op, path, source } => {
                write!(f, "{}: {op} failed: {source}", path.display())
            }
            LockFileError::Missing { path } => write!(
                f,
                "{}: the lock file does not exist and this open may not create it",
                path.display()
            ),
            LockFileError::NotWritable { path, source } => write!(
                f,
                "{}: the lock file cannot be written ({source}); every process that opens the database needs write access to it, readers included",
                path.display()
            ),
            LockFileError::Invalid {
                path,
                reason,
                attached,
            } => {
                write!(f, "{}: not a larch lock file: {reason}", path.display())?;
                if *attached {
                    write!(f, " (other processes have it open, so it was left alone)")
                } else {
                    write!(
                        f,
                        " (no process has it open: deleting it loses nothing, or open with create)"
                    )
                }
            }
            LockFileError::UnsupportedVersion {
                path,
                found,
                supported,
            } => write!(
                f,
                "{}: lock file layout version {found}, this build uses {supported}",
                path.display()
            ),
            LockFileError::Full { path, what, slots } => write!(
                f,
                "{}: all {slots} {what} slots are held by live processes",
                path.display()
            ),
        }
    }
}

impl std::error::Error for LockFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LockFileError::Io { source, .. } | LockFileError::NotWritable { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }
}

/// Result of a lock file operation.
pub type LockResult<T> = std::result::Result<T, LockFileError>;

/// How a new lock file is laid out (an existing one keeps its own counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockFileOptions {
    /// Reader slots: reading threads (across all processes) at once.
    pub reader_slots: u32,
    /// Process slots: processes attached at once.
    pub process_slots: u32,
}

impl Default for LockFileOptions {
    fn default() -> Self {
        LockFileOptions {
            reader_slots: DEFAULT_READER_SLOTS,
            process_slots: DEFAULT_PROCESS_SLOTS,
        }
    }
}

/// The header, as laid out at offset 0. All fields atomics: the map is shared memory.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    header_size: AtomicU32,
    reader_slots: AtomicU32,
    process_slots: AtomicU32,
    layout_size: AtomicU64,
    /// Bumped when the database file is switched (a future compaction file switch).
    generation: AtomicU64,
    /// The newest committed txid + 1, or 0 before any writer published one.
    committed: AtomicU64,
    /// The newest txid known durable (synced) + 1, or 0 if unknown.
    durable: AtomicU64,
    /// How many times any process took the writer lock since the lock file was initialised
    /// (each taker adds one while it holds the lock, before it writes anything).
    writer_takes: AtomicU64,
    /// One past the highest reader slot ever claimed since the lock file was initialised:
    /// slots at or past it have never held a snapshot, so a scan stops there.
    reader_high_water: AtomicU64,
}

/// One slot, as laid out in the file.
#[repr(C, align(64))]
struct Slot {
    /// The nonce of the `LockFile` that owns it; 0 = free.
    owner: AtomicU64,
    /// Reader slots: 0 = idle, else the snapshot txid + 1. Process slots: unused (0).
    txid: AtomicU64,
    /// The owner's pid, for display.
    pid: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Slot>() == LOCK_SLOT_SIZE);
const _: () = assert!(std::mem::size_of::<Header>() <= LOCK_HEADER_SIZE);

/// The layout a header describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    reader_slots: u32,
    process_slots: u32,
}

impl Layout {
    fn size(self) -> u64 {
        LOCK_HEADER_SIZE as u64
            + (self.reader_slots as u64 + self.process_slots as u64) * LOCK_SLOT_SIZE as u64
    }
    fn process_offset(self, i: u32) -> usize {
        LOCK_HEADER_SIZE + i as usize * LOCK_SLOT_SIZE
    }
    fn reader_offset(self, i: u32) -> usize {
        LOCK_HEADER_SIZE + (self.process_slots + i) as usize * LOCK_SLOT_SIZE
    }
}

/// Why a lock file's bytes cannot be used.
#[derive(Debug, PartialEq, Eq)]
enum Bad {
    Invalid(String),
    Version(u32),
}

fn field_u32(h: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(h[at..at + 4].try_into().expect("4 bytes"))
}
fn field_u64(h: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(h[at..at + 8].try_into().expect("8 bytes"))
}

/// Judge a lock file from its first bytes (up to [`LOCK_HEADER_SIZE`]) and its length.
fn validate(head: &[u8], file_len: u64) -> std::result::Result<Layout, Bad> {
    if file_len < LOCK_HEADER_SIZE as u64 || head.len() < LOCK_HEADER_SIZE {
        return Err(Bad::Invalid(format!(
            "{file_len} bytes, shorter than the {LOCK_HEADER_SIZE}-byte header"
        )));
    }
    if field_u64(head, 0) != LOCK_MAGIC {
        return Err(Bad::Invalid("wrong magic".into()));
    }
    let version = field_u32(head, 8);
    if version != LOCK_VERSION {
        return Err(Bad::Version(version));
    }
    let header_size = field_u32(head, 12);
    if header_size as usize != LOCK_HEADER_SIZE {
        return Err(Bad::Invalid(format!("header size {header_size}")));
    }
    let layout = Layout {
        reader_slots: field_u32(head, 16),
        process_slots: field_u32(head, 20),
    };
    for (n, what) in [
        (layout.reader_slots, "reader"),
        (layout.process_slots, "process"),
    ] {
        if n == 0 || n > MAX_SLOTS {
            return Err(Bad::Invalid(format!("{n} {what} slots")));
        }
    }
    let recorded = field_u64(head, 24);
    if recorded != layout.size() {
        return Err(Bad::Invalid(format!(
            "layout size {recorded} does not match {} for its slot counts",
            layout.size()
        )));
    }
    if file_len != layout.size() {
        return Err(Bad::Invalid(format!(
            "{file_len} bytes, its header describes {}",
            layout.size()
        )));
    }
    Ok(layout)
}

/// A fresh header for `layout`, keeping `generation`.
fn fresh_header(layout: Layout, generation: u64) -> [u8; LOCK_HEADER_SIZE] {
    let mut h = [0u8; LOCK_HEADER_SIZE];
    h[0..8].copy_from_slice(&LOCK_MAGIC.to_ne_bytes());
    h[8..12].copy_from_slice(&LOCK_VERSION.to_ne_bytes());
    h[12..16].copy_from_slice(&(LOCK_HEADER_SIZE as u32).to_ne_bytes());
    h[16..20].copy_from_slice(&layout.reader_slots.to_ne_bytes());
    h[20..24].copy_from_slice(&layout.process_slots.to_ne_bytes());
    h[24..32].copy_from_slice(&layout.size().to_ne_bytes());
    h[32..40].copy_from_slice(&generation.to_ne_bytes());
    // committed (40..48) stays 0: unknown until a writer publishes.
    h
}

// ---- OFD byte locks -------------------------------------------------------------------------

fn flock_for(kind: libc::c_int, start: i64) -> libc::flock {
    // SAFETY: `flock` is a plain C struct of integers (and, on some targets, padding fields);
    // all zeroes is a valid value of it, and l_pid must be 0 for OFD commands.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = 1;
    fl
}

/// Set (or, with `F_UNLCK`, clear) an OFD lock on the byte at `start`. Without `wait`, returns
/// false if another description holds a conflicting lock.
fn ofd_lock(file: &File, kind: libc::c_int, start: i64, wait: bool) -> io::Result<bool> {
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    let fl = flock_for(kind, start);
    loop {
        // SAFETY: fcntl on a valid, owned descriptor with a pointer to a live, initialised
        // `flock` that the call only reads for SETLK/SETLKW.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &fl as *const libc::flock) };
        if rc == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) if !wait => return Ok(false),
            _ => return Err(err),
        }
    }
}

/// Clear every OFD lock `file`'s description holds, on any byte.
fn ofd_unlock_all(file: &File) -> io::Result<()> {
    let mut fl = flock_for(libc::F_UNLCK, 0);
    // 0: to the end of every offset.
    fl.l_len = 0;
    // SAFETY: fcntl on a valid, owned descriptor with a pointer to a live, initialised
    // `flock` that the call only reads for SETLK.
    let rc = unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_OFD_SETLK,
            &fl as *const libc::flock,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Does another open file description hold any lock on the byte at `start`? (Locks of `file`'s
/// own description never conflict with it, so they read as "no".)
fn ofd_locked_by_other(file: &File, start: i64) -> io::Result<bool> {
    let mut fl = flock_for(libc::F_WRLCK, start);
    // SAFETY: fcntl on a valid, owned descriptor with a pointer to a live `flock` it may write.
    let rc = unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_OFD_GETLK,
            &mut fl as *mut libc::flock,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

// ---- the mapping ----------------------------------------------------------------------------

/// The shared mapping of the whole lock file (never past its end).
struct LockMap {
    ptr: NonNull<u8>,
    len: usize,
}

impl LockMap {
    fn new(file: &File, len: usize) -> io::Result<LockMap> {
        // SAFETY: a fresh shared read-write mapping of a valid descriptor at an address the
        // kernel picks; it aliases no Rust object. `len` is the file's length, checked by the
        // caller under the attach lock, so no page of the mapping lies past the end of the file.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(LockMap {
            ptr: NonNull::new(ptr as *mut u8)
                .ok_or_else(|| io::Error::other("mmap returned null"))?,
            len,
        })
    }

    fn header(&self) -> &Header {
        debug_assert!(self.len >= LOCK_HEADER_SIZE);
        // SAFETY: the mapping is page-aligned and at least LOCK_HEADER_SIZE bytes (validated
        // before mapping), `Header` is repr(C) of atomics (valid for any bit pattern), and the
        // reference borrows `self`, so it cannot outlive the mapping.
        unsafe { &*(self.ptr.as_ptr() as *const Header) }
    }

    fn slot(&self, offset: usize) -> &Slot {
        assert!(offset + LOCK_SLOT_SIZE <= self.len && offset & (LOCK_SLOT_SIZE - 1) == 0);
        // SAFETY: in bounds (asserted), 64-byte aligned (page-aligned base, offset a multiple
        // of 64), `Slot` is repr(C) of atomics (valid for any bit pattern), and the reference
        // borrows `self`, so it cannot outlive the mapping.
        unsafe { &*(self.ptr.as_ptr().add(offset) as *const Slot) }
    }
}

impl Drop for LockMap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the range mmap returned; every reference into it borrowed
        // `self`, so none is left.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut _, self.len);
        }
    }
}

// SAFETY: the mapping is shared memory touched only through atomics; the pointer may be used
// from any thread.
unsafe impl Send for LockMap {}
// SAFETY: as above: `&LockMap` hands out only references to atomics.
unsafe impl Sync for LockMap {}

// ---- the lock file --------------------------------------------------------------------------

static NONCE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A nonzero value naming this `LockFile` among all attached ones. A collision could only make
/// `clear_stale` skip a dead slot that looks like ours (a leak, not a hazard).
fn new_nonce() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = (std::process::id() as u64) << 32
        ^ t
        ^ NONCE_COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    x.max(1)
}

struct Inner {
    path: PathBuf,
    map: LockMap,
    layout: Layout,
    nonce: u64,
    pid: u32,
    process_slot: u32,
    initialised: bool,
    /// Serialises claiming, releasing and clearing slots within this description: its own
    /// OFD locks do not exclude each other, so threads sharing it must not race on a byte.
    claim: Mutex<()>,
    /// The in-process half of the writer lock (threads share this description's OFD lock).
    writer: Mutex<()>,
    /// `writer_takes` as this attachment left it at its last take of the writer lock, or
    /// `u64::MAX` before its first.
    last_take: AtomicU64,
    /// At this attachment's latest take of the writer lock: another attachment took it since
    /// this one's previous take (or there was none).
    taken_elsewhere: std::sync::atomic::AtomicBool,
    /// Tests only: decides when the process this attachment stands for is killed (kill.rs).
    killer: OnceLock<Arc<dyn Killer>>,
    /// Killed (kill.rs): every lock released, and nothing more reaches the map.
    dead: AtomicBool,
    /// Declared last: closing it (after the map is unmapped) drops every OFD lock we hold.
    file: File,
}

impl Inner {
    /// Does this attachment live to take `step`? Always, unless a test's [`Killer`] kills it
    /// there (or did before): then every OFD lock it holds is released, as the death of its
    /// process would, and the step must do nothing.
    fn lives_to(&self, step: LockStep) -> bool {
        if self.dead() {
            return false;
        }
        match self.killer.get() {
            Some(k) if k.kills_before(step) => {
                self.die();
                false
            }
            _ => true,
        }
    }

    /// Killed by a test's [`Killer`] (here or elsewhere): nothing more of this attachment
    /// reaches the map.
    fn dead(&self) -> bool {
        if self.dead.load(Ordering::Acquire) {
            return true;
        }
        match self.killer.get() {
            Some(k) if k.killed() => {
                self.die();
                true
            }
            _ => false,
        }
    }

    /// What the kernel does for a killed process: drop every lock of its description.
    fn die(&self) {
        self.dead.store(true, Ordering::Release);
        let _ = ofd_unlock_all(&self.file);
    }

    /// Take the writer byte (after the in-process half, if any); counted if taken.
    fn take_writer(&self, wait: bool) -> io::Result<bool> {
        if !self.lives_to(LockStep::TakeWriter) {
            return Ok(false);
        }
        let got = ofd_lock(&self.file, libc::F_WRLCK, WRITER_BYTE, wait)?;
        if got && self.lives_to(LockStep::CountTake) {
            self.note_writer_take();
        }
        Ok(got && !self.dead())
    }

    /// Count a take of the writer lock; caller just took it.
    fn note_writer_take(&self) {
        let prev = self
            .map
            .header()
            .writer_takes
            .fetch_add(1, Ordering::SeqCst);
        let ours = self.last_take.swap(prev.wrapping_add(1), Ordering::AcqRel);
        self.taken_elsewhere.store(ours != prev, Ordering::Release);
    }

    fn process(&self, i: u32) -> &Slot {
        self.map.slot(self.layout.process_offset(i))
    }
    fn reader(&self, i: u32) -> &Slot {
        self.map.slot(self.layout.reader_offset(i))
    }

    /// Claim a free slot of a region: take its byte, then its `owner` word.
    fn claim(&self, reader: bool) -> LockResult<Option<u32>> {
        if !self.lives_to(LockStep::ClaimSlot) {
            return Ok(None);
        }
        let _g = self.claim.lock();
        let (n, base) = if reader {
            (self.layout.reader_slots, READER_BYTES)
        } else {
            (self.layout.process_slots, PROCESS_BYTES)
        };
        for i in 0..n {
            let slot = if reader {
                self.reader(i)
            } else {
                self.process(i)
            };
            if slot.owner.load(Ordering::Acquire) != 0 {
                continue;
            }
            let byte = base + i as i64;
            if !ofd_lock(&self.file, libc::F_WRLCK, byte, false)
                .map_err(|e| LockFileError::io("fcntl(F_OFD_SETLK)", &self.path, e))?
            {
                continue;
            }
            // Holding the byte: no clearer or other claimer can touch the slot now.
            if slot
                .owner
                .compare_exchange(0, self.nonce, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                slot.txid.store(0, Ordering::SeqCst);
                slot.pid.store(self.pid, Ordering::Relaxed);
                if reader {
                    // Before any snapshot is stored in the slot (SeqCst, as the reader
                    // protocol's stores): see `LockFile::oldest_reader`.
                    self.map
                        .header()
                        .reader_high_water
                        .fetch_max(i as u64 + 1, Ordering::SeqCst);
                }
                return Ok(Some(i));
            }
            let _ = ofd_lock(&self.file, libc::F_UNLCK, byte, false);
        }
        Ok(None)
    }

    fn release(&self, reader: bool, i: u32) {
        if self.dead() {
            // A killed process's slots stay claimed: dead slots, for others to clear.
            return;
        }
        let _g = self.claim.lock();
        let (slot, byte) = if reader {
            (self.reader(i), READER_BYTES + i as i64)
        } else {
            (self.process(i), PROCESS_BYTES + i as i64)
        };
        slot.txid.store(0, Ordering::SeqCst);
        slot.pid.store(0, Ordering::Relaxed);
        slot.owner.store(0, Ordering::SeqCst);
        let _ = ofd_lock(&self.file, libc::F_UNLCK, byte, false);
    }

    /// Is the owner of a slot (owner word `owner`, lock byte `byte`) alive?
    fn owner_alive(&self, owner: u64, byte: i64) -> io::Result<bool> {
        if owner == 0 {
            return Ok(false);
        }
        if owner == self.nonce {
            return Ok(true);
        }
        ofd_locked_by_other(&self.file, byte)
    }
}

/// An attached lock file. Cheap to clone (the clones share one attachment); the process slot
/// and the attach lock are given up when the last clone and the last [`SlotHandle`] drop.
#[derive(Clone)]
pub struct LockFile {
    inner: Arc<Inner>,
}

impl fmt::Debug for LockFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockFile")
            .field("path", &self.inner.path)
            .field("reader_slots", &self.inner.layout.reader_slots)
            .field("process_slots", &self.inner.layout.process_slots)
            .field("process_slot", &self.inner.process_slot)
            .finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let i = self.process_slot;
        if i != u32::MAX {
            self.release(false, i);
        }
        // The map, then the file (and with it the attach lock), drop after this.
    }
}

/// Whether an open error means "may not write this file".
fn is_permission(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS)
    )
}

impl LockFile {
    /// Attach to the lock file of the database at `db_path`, with the default layout if it
    /// has to be made. `create`: the file may be created, or re-initialised if it is invalid
    /// and no other process is attached.
    pub fn open(db_path: &Path, create: bool) -> LockResult<LockFile> {
        Self::open_with(db_path, create, LockFileOptions::default())
    }

    /// [`open`](Self::open) with the layout a new lock file gets.
    pub fn open_with(db_path: &Path, create: bool, opts: LockFileOptions) -> LockResult<LockFile> {
        // A lock file deleted (while detached) and re-created between our open and our attach
        // would leave us alone on an unlinked inode: retry then (a few times at most).
        for _ in 0..8 {
            if let Some(lf) = Self::open_once(db_path, create, opts)? {
                return Ok(lf);
            }
        }
        Err(LockFileError::io(
            "open",
            &lock_path(db_path),
            io::Error::other("the lock file kept being replaced while attaching"),
        ))
    }

    fn open_once(
        db_path: &Path,
        create: bool,
        opts: LockFileOptions,
    ) -> LockResult<Option<LockFile>> {
        let path = lock_path(db_path);
        let want = Layout {
            reader_slots: opts.reader_slots.clamp(1, MAX_SLOTS),
            process_slots: opts.process_slots.clamp(1, MAX_SLOTS),
        };
        // The database's permissions, so whoever may write the database may attach.
        let mode = std::fs::metadata(db_path).map_or(0o644, |m| m.mode() & 0o666);
        let mut created = false;
        let file = if create {
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&path)
            {
                Ok(f) => {
                    created = true;
                    // Not narrowed by this process's umask.
                    f.set_permissions(std::fs::Permissions::from_mode(mode))
                        .map_err(|e| LockFileError::io("fchmod", &path, e))?;
                    Ok(f)
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    OpenOptions::new().read(true).write(true).open(&path)
                }
                Err(e) => Err(e),
            }
        } else {
            OpenOptions::new().read(true).write(true).open(&path)
        };
        let file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => {
                return Err(LockFileError::Missing { path })
            }
            Err(e) if is_permission(&e) => {
                return Err(LockFileError::NotWritable { path, source: e })
            }
            Err(e) => return Err(LockFileError::io("open", &path, e)),
        };
        let io_err = |op: &'static str| {
            let path = path.clone();
            move |e: io::Error| LockFileError::io(op, &path, e)
        };

        // Attach: first try the attach byte exclusively (nobody else attached: we may
        // initialise), else wait for a shared hold (an initialiser holds it only briefly).
        let (layout, initialised) = loop {
            if ofd_lock(&file, libc::F_WRLCK, ATTACH_BYTE, false)
                .map_err(io_err("fcntl(F_OFD_SETLK)"))?
            {
                let (head, len) = read_head(&file).map_err(io_err("read"))?;
                let (layout, generation) = match validate(&head, len) {
                    Ok(l) => (l, field_u64(&head, 32)),
                    Err(_) if create || created => (want, 0),
                    Err(bad) => return Err(bad_error(&path, bad, false)),
                };
                // Nobody is attached: every slot is stale. Start from a clean table (and an
                // unknown committed txid: the data file may have changed while detached).
                file.set_len(0).map_err(io_err("ftruncate"))?;
                file.set_len(layout.size()).map_err(io_err("ftruncate"))?;
                file.write_all_at(&fresh_header(layout, generation), 0)
                    .map_err(io_err("write"))?;
                // Downgrade to shared: a conversion, atomic for OFD locks.
                ofd_lock(&file, libc::F_RDLCK, ATTACH_BYTE, false)
                    .map_err(io_err("fcntl(F_OFD_SETLK)"))?;
                break (layout, true);
            }
            ofd_lock(&file, libc::F_RDLCK, ATTACH_BYTE, true)
                .map_err(io_err("fcntl(F_OFD_SETLKW)"))?;
            let (head, len) = read_head(&file).map_err(io_err("read"))?;
            match validate(&head, len) {
                Ok(l) => break (l, false),
                Err(bad) => {
                    // If everyone else detached meanwhile, take the exclusive path instead.
                    ofd_lock(&file, libc::F_UNLCK, ATTACH_BYTE, false)
                        .map_err(io_err("fcntl(F_OFD_SETLK)"))?;
                    if ofd_locked_by_other(&file, ATTACH_BYTE)
                        .map_err(io_err("fcntl(F_OFD_GETLK)"))?
                    {
                        return Err(bad_error(&path, bad, true));
                    }
                }
            }
        };
        let ours = file.metadata().map_err(io_err("fstat"))?;
        match std::fs::metadata(&path) {
            Ok(named) if named.dev() == ours.dev() && named.ino() == ours.ino() => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(LockFileError::io("stat", &path, e)),
        }
        let map = LockMap::new(&file, layout.size() as usize).map_err(io_err("mmap"))?;
        let mut inner = Inner {
            path: path.clone(),
            map,
            layout,
            nonce: new_nonce(),
            pid: std::process::id(),
            process_slot: u32::MAX,
            initialised,
            claim: Mutex::new(()),
            writer: Mutex::new(()),
            last_take: AtomicU64::new(u64::MAX),
            taken_elsewhere: std::sync::atomic::AtomicBool::new(true),
            killer: OnceLock::new(),
            dead: AtomicBool::new(false),
            file,
        };
        let slot = match inner.claim(false)? {
            Some(i) => Some(i),
            None => {
                clear_stale_in(&inner).map_err(io_err("fcntl(F_OFD_GETLK)"))?;
                inner.claim(false)?
            }
        };
        match slot {
            Some(i) => inner.process_slot = i,
            None => {
                // Not attached after all (Inner's Drop skips the slot it lacks).
                let slots = inner.layout.process_slots;
                return Err(LockFileError::Full {
                    path,
                    what: "process",
                    slots,
                });
            }
        }
        Ok(Some(LockFile {
            inner: Arc::new(inner),
        }))
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// True if this open (re-)initialised the lock file because no other process was attached:
    /// the caller should then publish the data file's newest txid ([`publish_commit`]).
    ///
    /// [`publish_commit`]: Self::publish_commit
    pub fn initialised(&self) -> bool {
        self.inner.initialised
    }

    /// Reader slots in the table.
    pub fn reader_slots(&self) -> u32 {
        self.inner.layout.reader_slots
    }

    /// Process slots in the table.
    pub fn process_slots(&self) -> u32 {
        self.inner.layout.process_slots
    }

    /// Claim a reader slot for one reading thread (or one long-lived reader). One `fcntl`; the
    /// slot's `begin`/`end` are then plain atomic stores. If every slot is taken, slots of dead
    /// processes are cleared and the claim retried once.
    pub fn claim_slot(&self) -> LockResult<SlotHandle> {
        let inner = &self.inner;
        let mut got = inner.claim(true)?;
        if got.is_none() {
            self.clear_stale()?;
            got = inner.claim(true)?;
        }
        match got {
            Some(index) => Ok(SlotHandle {
                inner: Arc::clone(inner),
                index,
            }),
            None => Err(LockFileError::Full {
                path: inner.path.clone(),
                what: "reader",
                slots: inner.layout.reader_slots,
            }),
        }
    }

    /// The oldest snapshot any reader slot holds, in any process (dead ones included until
    /// cleared). SeqCst loads only: no system call.
    ///
    /// Only slots below the claimed high-water mark are read. A claimer raises the mark
    /// (SeqCst) before its reader stores a snapshot in the slot, so a scan that loads the mark
    /// before that raise precedes the reader's store (2) and re-check (3) of the reader
    /// protocol, and like any scan that precedes the store, comes after the writer's
    /// publication: the reader's re-check sees the newest commit (module docs).
    pub fn oldest_reader(&self) -> Option<TxId> {
        let n = self
            .inner
            .map
            .header()
            .reader_high_water
            .load(Ordering::SeqCst)
            .min(self.inner.layout.reader_slots as u64) as u32;
        (0..n)
            .map(|i| self.inner.reader(i).txid.load(Ordering::SeqCst))
            .filter(|&t| t != 0)
            .min()
            .map(|t| t - 1)
    }

    /// Free the slots (reader and process) whose owners have died; returns how many reader
    /// slots were freed. One `fcntl` per slot owned by another live attachment.
    pub fn clear_stale(&self) -> LockResult<usize> {
        if !self.inner.lives_to(LockStep::ClearStale) {
            return Ok(0);
        }
        clear_stale_in(&self.inner).map_err(|e| LockFileError::io("fcntl", &self.inner.path, e))
    }

    /// Processes (strictly: attachments, one per `open`) attached now, this one included.
    pub fn attached_processes(&self) -> LockResult<usize> {
        let inner = &self.inner;
        let mut n = 0;
        for i in 0..inner.layout.process_slots {
            let owner = inner.process(i).owner.load(Ordering::Acquire);
            if inner
                .owner_alive(owner, PROCESS_BYTES + i as i64)
                .map_err(|e| LockFileError::io("fcntl(F_OFD_GETLK)", &inner.path, e))?
            {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Every claimed reader slot: for `larch readers`.
    pub fn readers(&self) -> LockResult<Vec<ReaderInfo>> {
        let inner = &self.inner;
        let mut out = Vec::new();
        for i in 0..inner.layout.reader_slots {
            let s = inner.reader(i);
            let owner = s.owner.load(Ordering::Acquire);
            if owner == 0 {
                continue;
            }
            let txid = s.txid.load(Ordering::SeqCst);
            out.push(ReaderInfo {
                slot: i,
                pid: s.pid.load(Ordering::Relaxed),
                txid: txid.checked_sub(1),
                alive: inner
                    .owner_alive(owner, READER_BYTES + i as i64)
                    .map_err(|e| LockFileError::io("fcntl(F_OFD_GETLK)", &inner.path, e))?,
                ours: owner == inner.nonce,
            });
        }
        Ok(out)
    }

    /// Take the cross-process writer lock if it is free (in this process and every other).
    pub fn try_lock_writer(&self) -> LockResult<Option<WriterGuard<'_>>> {
        let Some(g) = self.inner.writer.try_lock() else {
            return Ok(None);
        };
        let got = self
            .inner
            .take_writer(false)
            .map_err(|e| LockFileError::io("fcntl(F_OFD_SETLK)", &self.inner.path, e))?;
        Ok(got.then_some(WriterGuard {
            inner: &self.inner,
            _in_process: g,
        }))
    }

    /// Take the cross-process writer lock, waiting for it. Released when the guard drops, or
    /// when the holding process dies.
    pub fn lock_writer(&self) -> LockResult<WriterGuard<'_>> {
        let g = self.inner.writer.lock();
        let got = self
            .inner
            .take_writer(true)
            .map_err(|e| LockFileError::io("fcntl(F_OFD_SETLKW)", &self.inner.path, e))?;
        if !got {
            return Err(LockFileError::io(
                "fcntl(F_OFD_SETLKW)",
                &self.inner.path,
                io::Error::other("the process was killed (a test hook)"),
            ));
        }
        Ok(WriterGuard {
            inner: &self.inner,
            _in_process: g,
        })
    }

    /// The newest committed txid a writer has published, or `None` if none has since the lock
    /// file was initialised. Step 1 and 3 of the reader protocol (module docs).
    pub fn committed_txid(&self) -> Option<TxId> {
        self.inner
            .map
            .header()
            .committed
            .load(Ordering::SeqCst)
            .checked_sub(1)
    }

    /// Publish commit `txid` as the newest, after its meta page is written. The writer calls
    /// this holding the writer lock (the guard proves it).
    pub fn publish_commit(&self, _writer: &WriterGuard<'_>, txid: TxId) {
        if !self.inner.lives_to(LockStep::PublishCommitted) {
            return;
        }
        self.inner
            .map
            .header()
            .committed
            .store(txid + 1, Ordering::SeqCst);
    }

    /// The generation of the database file: bumped when the file is switched under its path.
    pub fn generation(&self) -> u64 {
        self.inner.map.header().generation.load(Ordering::SeqCst)
    }

    /// Bump the generation (under the writer lock); returns the new one.
    pub fn bump_generation(&self, _writer: &WriterGuard<'_>) -> u64 {
        if !self.inner.lives_to(LockStep::BumpGeneration) {
            return self.generation();
        }
        self.inner
            .map
            .header()
            .generation
            .fetch_add(1, Ordering::SeqCst)
            + 1
    }
}

impl LockFile {
    /// Take the cross-process writer lock for an owner that keeps it across calls (the
    /// engine holds it from a write transaction's start until its commits are on disk).
    /// Threads of this process share the lock: serialising them is the caller's business.
    /// `wait`: block until it is free; else return `false` if another process holds it.
    pub fn acquire_writer(&self, wait: bool) -> LockResult<bool> {
        let op = if wait {
            "fcntl(F_OFD_SETLKW)"
        } else {
            "fcntl(F_OFD_SETLK)"
        };
        self.inner
            .take_writer(wait)
            .map_err(|e| LockFileError::io(op, &self.inner.path, e))
    }

    /// For the holder of the writer lock: did another attachment (another process, or another
    /// `LockFile` of this one) take the writer lock between this attachment's previous take
    /// and its latest? `true` at its first take. When `false`, the data file holds only what
    /// this attachment wrote since it last held the lock: nobody else could write it.
    pub fn writer_taken_elsewhere(&self) -> bool {
        self.inner.taken_elsewhere.load(Ordering::Acquire)
    }

    /// Release what [`acquire_writer`](Self::acquire_writer) took.
    pub fn release_writer(&self) -> LockResult<()> {
        if !self.inner.lives_to(LockStep::ReleaseWriter) {
            return Ok(());
        }
        ofd_lock(&self.inner.file, libc::F_UNLCK, WRITER_BYTE, false)
            .map(|_| ())
            .map_err(|e| LockFileError::io("fcntl(F_OFD_SETLK)", &self.inner.path, e))
    }

    /// [`publish_commit`](Self::publish_commit) for an owner of
    /// [`acquire_writer`](Self::acquire_writer): the caller holds the writer lock. Never moves
    /// the published txid backwards.
    pub fn publish_committed(&self, txid: TxId) {
        if !self.inner.lives_to(LockStep::PublishCommitted) {
            return;
        }
        self.inner
            .map
            .header()
            .committed
            .fetch_max(txid + 1, Ordering::SeqCst);
    }

    /// Record that commit `txid` is durable (synced), so the next writer process need not sync
    /// the file before it builds on it. Caller holds the writer lock.
    pub fn publish_durable(&self, txid: TxId) {
        if !self.inner.lives_to(LockStep::PublishDurable) {
            return;
        }
        self.inner
            .map
            .header()
            .durable
            .fetch_max(txid + 1, Ordering::SeqCst);
    }

    /// Name `txid` as the newest commit, forgetting what was published before (the database
    /// file was switched for a compacted copy). Caller holds the attach byte exclusively.
    pub fn set_committed(&self, txid: TxId) {
        if !self.inner.lives_to(LockStep::SetCommitted) {
            return;
        }
        let h = self.inner.map.header();
        h.committed.store(txid + 1, Ordering::SeqCst);
        h.durable.store(txid + 1, Ordering::SeqCst);
    }

    /// [`bump_generation`](Self::bump_generation) for a caller that holds the attach byte
    /// exclusively ([`try_attach_exclusive`](Self::try_attach_exclusive)).
    pub fn bump_generation_alone(&self) -> u64 {
        if !self.inner.lives_to(LockStep::BumpGeneration) {
            return self.generation();
        }
        self.inner
            .map
            .header()
            .generation
            .fetch_add(1, Ordering::SeqCst)
            + 1
    }

    /// The newest txid a writer recorded as durable, if any.
    pub fn durable_txid(&self) -> Option<TxId> {
        self.inner
            .map
            .header()
            .durable
            .load(Ordering::SeqCst)
            .checked_sub(1)
    }

    /// Hold the attach byte exclusively if no other process is attached (a conversion of this
    /// attachment's shared hold; never waits). While held, processes that open the database
    /// wait in their attach. Returns `false` if another process is attached.
    pub fn try_attach_exclusive(&self) -> LockResult<bool> {
        if !self.inner.lives_to(LockStep::AttachExclusive) {
            return Ok(false);
        }
        ofd_lock(&self.inner.file, libc::F_WRLCK, ATTACH_BYTE, false)
            .map_err(|e| LockFileError::io("fcntl(F_OFD_SETLK)", &self.inner.path, e))
    }

    /// Go back to a shared hold of the attach byte after
    /// [`try_attach_exclusive`](Self::try_attach_exclusive).
    pub fn attach_shared(&self) -> LockResult<()> {
        if !self.inner.lives_to(LockStep::AttachShared) {
            return Ok(());
        }
        ofd_lock(&self.inner.file, libc::F_RDLCK, ATTACH_BYTE, false)
            .map(|_| ())
            .map_err(|e| LockFileError::io("fcntl(F_OFD_SETLK)", &self.inner.path, e))
    }

    /// Is another process attached? One `fcntl`: whether some other attachment holds the
    /// attach byte.
    pub fn others_attached(&self) -> LockResult<bool> {
        ofd_locked_by_other(&self.inner.file, ATTACH_BYTE)
            .map_err(|e| LockFileError::io("fcntl(F_OFD_GETLK)", &self.inner.path, e))
    }

    /// The process id this attachment records in its slots.
    pub fn pid(&self) -> u32 {
        self.inner.pid
    }

    /// Tests only: let `killer` decide when the process this attachment stands for is killed
    /// (kill.rs). Set once, before the attachment is used; a second call is ignored.
    #[doc(hidden)]
    pub fn set_killer(&self, killer: Arc<dyn Killer>) {
        let _ = self.inner.killer.set(killer);
    }
}

fn read_head(file: &File) -> io::Result<(Vec<u8>, u64)> {
    let len = file.metadata()?.len();
    let mut head = vec![0u8; LOCK_HEADER_SIZE.min(len as usize)];
    file.read_exact_at(&mut head, 0)?;
    Ok((head, len))
}

fn bad_error(path: &Path, bad: Bad, attached: bool) -> LockFileError {
    match bad {
        Bad::Invalid(reason) => LockFileError::Invalid {
            path: path.to_path_buf(),
            reason,
            attached,
        },
        Bad::Version(found) => LockFileError::UnsupportedVersion {
            path: path.to_path_buf(),
            found,
            supported: LOCK_VERSION,
        },
    }
}

fn clear_stale_in(inner: &Inner) -> io::Result<usize> {
    let _g = inner.claim.lock();
    let mut freed = 0;
    for reader in [false, true] {
        let (n, base) = if reader {
            (inner.layout.reader_slots, READER_BYTES)
        } else {
            (inner.layout.process_slots, PROCESS_BYTES)
        };
        for i in 0..n {
            let slot = if reader {
                inner.reader(i)
            } else {
                inner.process(i)
            };
            let owner = slot.owner.load(Ordering::Acquire);
            if owner == 0 || owner == inner.nonce {
                continue;
            }
            let byte = base + i as i64;
            // Taking the byte proves its owner dead (a live one holds it), and keeps claimers
            // out while the slot is cleared.
            if !ofd_lock(&inner.file, libc::F_WRLCK, byte, false)? {
                continue;
            }
            let owner = slot.owner.load(Ordering::SeqCst);
            if owner != 0 && owner != inner.nonce {
                slot.txid.store(0, Ordering::SeqCst);
                slot.pid.store(0, Ordering::Relaxed);
                slot.owner.store(0, Ordering::SeqCst);
                freed += usize::from(reader);
            }
            ofd_lock(&inner.file, libc::F_UNLCK, byte, false)?;
        }
    }
    Ok(freed)
}

/// One claimed reader slot. `begin`/`end` are single atomic stores; dropping it frees the slot.
pub struct SlotHandle {
    inner: Arc<Inner>,
    index: u32,
}

impl fmt::Debug for SlotHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotHandle")
            .field("index", &self.index)
            .field("txid", &self.txid())
            .finish()
    }
}

impl SlotHandle {
    fn slot(&self) -> &Slot {
        self.inner.reader(self.index)
    }

    /// The slot's index in the reader table.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Publish that this reader holds snapshot `txid` (SeqCst store). The caller must then
    /// re-check the newest committed txid (module docs); [`begin_snapshot`] does both.
    ///
    /// [`begin_snapshot`]: Self::begin_snapshot
    #[inline]
    pub fn begin(&self, txid: TxId) {
        if self.inner.dead() {
            return;
        }
        self.slot().txid.store(txid + 1, Ordering::SeqCst);
    }

    /// Steps 1–3 of the reader protocol: publish the newest committed txid and retry until it
    /// did not move meanwhile. `newest` gives the newest committed txid (normally
    /// [`LockFile::committed_txid`]); returns the txid now held.
    #[inline]
    pub fn begin_snapshot(&self, mut newest: impl FnMut() -> TxId) -> TxId {
        loop {
            let t = newest();
            self.begin(t);
            if newest() == t {
                return t;
            }
        }
    }

    /// The reader is done with its snapshot (Release store: its reads happen before a writer
    /// that sees the slot idle reuses anything).
    #[inline]
    pub fn end(&self) {
        if self.inner.dead() {
            // A killed reader's slot keeps its snapshot until the slot is cleared.
            return;
        }
        self.slot().txid.store(0, Ordering::Release);
    }

    /// The snapshot held, if any.
    pub fn txid(&self) -> Option<TxId> {
        self.slot().txid.load(Ordering::Relaxed).checked_sub(1)
    }
}

impl Drop for SlotHandle {
    fn drop(&mut self) {
        self.inner.release(true, self.index);
    }
}

/// The cross-process writer lock, held until dropped.
pub struct WriterGuard<'a> {
    inner: &'a Inner,
    _in_process: MutexGuard<'a, ()>,
}

impl fmt::Debug for WriterGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterGuard")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl Drop for WriterGuard<'_> {
    fn drop(&mut self) {
        if !self.inner.lives_to(LockStep::ReleaseWriter) {
            return;
        }
        let _ = ofd_lock(&self.inner.file, libc::F_UNLCK, WRITER_BYTE, false);
    }
}

/// One claimed reader slot, as [`LockFile::readers`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReaderInfo {
    /// Index in the reader table.
    pub slot: u32,
    /// The owner's pid when it claimed the slot.
    pub pid: u32,
    /// The snapshot held, or `None` if idle.
    pub txid: Option<TxId>,
    /// Whether the owner still holds the slot's lock (is alive).
    pub alive: bool,
    /// Whether this `LockFile` owns it.
    pub ours: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(dir: &tempfile::TempDir) -> PathBuf {
        let p = dir.path().join("db");
        std::fs::write(&p, b"").unwrap();
        p
    }

    #[test]
    fn validate_rejects_bad_headers() {
        let layout = Layout {
            reader_slots: 4,
            process_slots: 2,
        };
        let good = fresh_header(layout, 7);
        assert_eq!(validate(&good, layout.size()), Ok(layout));
        assert!(matches!(validate(&good[..10], 10), Err(Bad::Invalid(_))));
        assert!(matches!(
            validate(&good, layout.size() - 1),
            Err(Bad::Invalid(_))
        ));
        assert!(matches!(
            validate(&good, layout.size() + 64),
            Err(Bad::Invalid(_))
        ));
        let mut h = good;
        h[0] ^= 1;
        assert!(matches!(validate(&h, layout.size()), Err(Bad::Invalid(_))));
        let mut h = good;
        h[8..12].copy_from_slice(&9u32.to_ne_bytes());
        assert_eq!(validate(&h, layout.size()), Err(Bad::Version(9)));
        let mut h = good;
        h[16..20].copy_from_slice(&0u32.to_ne_bytes());
        assert!(matches!(validate(&h, layout.size()), Err(Bad::Invalid(_))));
        let mut h = good;
        h[16..20].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(matches!(validate(&h, layout.size()), Err(Bad::Invalid(_))));
        let mut h = good;
        h[24..32].copy_from_slice(&1u64.to_ne_bytes());
        assert!(matches!(validate(&h, layout.size()), Err(Bad::Invalid(_))));
        assert!(validate(&[0u8; LOCK_HEADER_SIZE], 1 << 20).is_err());
    }

    #[test]
    fn the_oldest_reader_scan_reaches_every_claimed_slot_below_the_high_water_mark() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let a = LockFile::open(&path, true).unwrap();
        let b = LockFile::open(&path, true).unwrap();
        let mut held: Vec<_> = (0..5).map(|_| a.claim_slot().unwrap()).collect();
        let last = b.claim_slot().unwrap();
        assert_eq!(last.index(), 5);
        assert_eq!(b.oldest_reader(), None);
        // The highest slot, claimed by another attachment, is the only one in use.
        last.begin(7);
        assert_eq!(a.oldest_reader(), Some(7));
        held[4].begin(9);
        assert_eq!(b.oldest_reader(), Some(7));
        last.end();
        assert_eq!(b.oldest_reader(), Some(9));
        // Freed slots below the mark are claimed again and still scanned.
        held.truncate(2);
        let again = b.claim_slot().unwrap();
        assert!(again.index() < 5);
        again.begin(3);
        assert_eq!(a.oldest_reader(), Some(3));
        drop(again);
        drop(held);
        drop(last);
        assert_eq!(a.oldest_reader(), None);
    }

    #[test]
    fn slots_publish_and_free() {
        let dir = tempfile::tempdir().unwrap();
        let lf = LockFile::open(&db(&dir), true).unwrap();
        assert!(lf.initialised());
        assert_eq!(lf.oldest_reader(), None);
        assert_eq!(lf.committed_txid(), None);
        let a = lf.claim_slot().unwrap();
        let b = lf.claim_slot().unwrap();
        assert_ne!(a.index(), b.index());
        a.begin(0);
        b.begin(5);
        assert_eq!(lf.oldest_reader(), Some(0));
        a.end();
        assert_eq!(lf.oldest_reader(), Some(5));
        assert_eq!(a.txid(), None);
        drop(b);
        assert_eq!(lf.oldest_reader(), None);
        assert_eq!(lf.readers().unwrap().len(), 1);
        // Our own slots are never stale.
        a.begin(3);
        assert_eq!(lf.clear_stale().unwrap(), 0);
        assert_eq!(lf.oldest_reader(), Some(3));
        assert_eq!(lf.attached_processes().unwrap(), 1);
    }

    #[test]
    fn writer_takes_tell_a_taker_whether_another_attachment_held_the_lock_in_between() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let a = LockFile::open(&path, true).unwrap();
        let b = LockFile::open(&path, true).unwrap();
        let take_a = || {
            assert!(a.acquire_writer(false).unwrap());
            let elsewhere = a.writer_taken_elsewhere();
            a.release_writer().unwrap();
            elsewhere
        };
        assert!(take_a(), "a first take knows nothing of what came before");
        assert!(!take_a());
        assert!(!take_a());
        // Each way of taking the lock counts.
        assert!(b.acquire_writer(true).unwrap());
        b.release_writer().unwrap();
        assert!(take_a());
        assert!(!take_a());
        drop(b.lock_writer().unwrap());
        assert!(take_a());
        drop(b.try_lock_writer().unwrap().unwrap());
        assert!(take_a());
        assert!(!take_a());
        // A new attachment of the same process is another attachment.
        let c = LockFile::open(&path, true).unwrap();
        assert!(c.acquire_writer(false).unwrap());
        assert!(c.writer_taken_elsewhere());
        c.release_writer().unwrap();
        assert!(take_a());
    }

    /// Kills its attachment before the first step of one kind (kill.rs).
    #[derive(Debug)]
    struct KillBefore(LockStep);

    impl Killer for KillBefore {
        fn kills_before(&self, step: LockStep) -> bool {
            step == self.0
        }
        fn killed(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_killed_attachment_releases_its_locks_and_leaves_the_map_as_the_kill_found_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let a = LockFile::open(&path, true).unwrap();
        let b = LockFile::open(&path, true).unwrap();
        assert!(a.acquire_writer(false).unwrap());
        a.publish_committed(4);
        a.release_writer().unwrap();
        b.set_killer(Arc::new(KillBefore(LockStep::PublishCommitted)));
        let slot = b.claim_slot().unwrap();
        slot.begin(3);
        assert!(b.acquire_writer(false).unwrap());
        let takes = a.inner.map.header().writer_takes.load(Ordering::SeqCst);
        // Killed between its meta write and the publication: nothing of it after that.
        b.publish_committed(5);
        b.publish_durable(5);
        slot.end();
        drop(slot);
        assert_eq!(a.committed_txid(), Some(4));
        assert_eq!(a.durable_txid(), None);
        assert!(
            !b.acquire_writer(false).unwrap(),
            "a killed attachment took the lock"
        );
        assert_eq!(
            a.inner.map.header().writer_takes.load(Ordering::SeqCst),
            takes
        );
        // Its locks went with it, its slots stayed: dead, still pinning snapshot 3.
        assert!(a.acquire_writer(false).unwrap());
        assert!(a.writer_taken_elsewhere());
        a.release_writer().unwrap();
        assert_eq!(a.oldest_reader(), Some(3));
        assert!(!a.others_attached().unwrap());
        drop(b);
        assert_eq!(a.clear_stale().unwrap(), 1);
        assert_eq!(a.oldest_reader(), None);
        assert_eq!(a.attached_processes().unwrap(), 1);
    }

    #[test]
    fn an_attachment_killed_between_its_take_and_the_count_leaves_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let a = LockFile::open(&path, true).unwrap();
        let b = LockFile::open(&path, true).unwrap();
        assert!(a.acquire_writer(false).unwrap());
        a.release_writer().unwrap();
        b.set_killer(Arc::new(KillBefore(LockStep::CountTake)));
        assert!(!b.acquire_writer(false).unwrap());
        // Neither held nor counted: the next take by `a` follows its own.
        assert!(a.acquire_writer(false).unwrap());
        assert!(!a.writer_taken_elsewhere());
        a.release_writer().unwrap();
    }

    #[test]
    fn begin_snapshot_retries_until_stable() {
        let dir = tempfile::tempdir().unwrap();
        let lf = LockFile::open(&db(&dir), true).unwrap();
        let s = lf.claim_slot().unwrap();
        // The newest txid moves twice between the store and the re-check, then settles.
        let seq = [1u64, 2, 2, 3, 3, 3];
        let mut i = 0;
        let t = s.begin_snapshot(|| {
            let v = seq[i];
            i += 1;
            v
        });
        assert_eq!(t, 3);
        assert_eq!(s.txid(), Some(3));
        let w = lf.lock_writer().unwrap();
        lf.publish_commit(&w, 9);
        drop(w);
        assert_eq!(s.begin_snapshot(|| lf.committed_txid().unwrap()), 9);
    }

    #[test]
    fn two_attachments_in_one_process_see_each_other_alive() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let one = LockFile::open(&path, true).unwrap();
        let two = LockFile::open(&path, false).unwrap();
        assert!(!two.initialised());
        assert_eq!(one.attached_processes().unwrap(), 2);
        let s = one.claim_slot().unwrap();
        s.begin(4);
        assert_eq!(two.oldest_reader(), Some(4));
        assert_eq!(two.clear_stale().unwrap(), 0);
        assert_eq!(two.oldest_reader(), Some(4));
        let info = two.readers().unwrap();
        assert_eq!(info.len(), 1);
        assert!(info[0].alive && !info[0].ours);
        // The writer lock excludes the other attachment, and threads of one attachment.
        let g = one.try_lock_writer().unwrap().expect("free");
        assert!(two.try_lock_writer().unwrap().is_none());
        assert!(one.try_lock_writer().unwrap().is_none());
        drop(g);
        let g2 = two.try_lock_writer().unwrap().expect("free again");
        two.publish_commit(&g2, 11);
        assert_eq!(one.committed_txid(), Some(11));
        assert!(one.try_lock_writer().unwrap().is_none());
        drop(g2);
        let g1 = one.lock_writer().unwrap();
        assert_eq!(one.bump_generation(&g1), 1);
        assert_eq!(two.generation(), 1);
    }

    #[test]
    fn dropped_attachment_is_not_counted_and_slots_reinit_on_first_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let one = LockFile::open(&path, true).unwrap();
        let two = LockFile::open(&path, false).unwrap();
        let s = two.claim_slot().unwrap();
        s.begin(2);
        drop(s);
        drop(two);
        assert_eq!(one.attached_processes().unwrap(), 1);
        assert_eq!(one.oldest_reader(), None);
        drop(one);
        let again = LockFile::open(&path, false).unwrap();
        assert!(again.initialised(), "nobody attached: a clean table");
    }

    #[test]
    fn reader_table_fills_up() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LockFileOptions {
            reader_slots: 3,
            process_slots: 2,
        };
        let lf = LockFile::open_with(&db(&dir), true, opts).unwrap();
        let held: Vec<_> = (0..3).map(|_| lf.claim_slot().unwrap()).collect();
        assert!(matches!(
            lf.claim_slot(),
            Err(LockFileError::Full {
                what: "reader",
                slots: 3,
                ..
            })
        ));
        drop(held);
        lf.claim_slot().unwrap();
    }

    #[test]
    fn missing_lock_file_without_create() {
        let dir = tempfile::tempdir().unwrap();
        let err = LockFile::open(&db(&dir), false).unwrap_err();
        assert!(matches!(err, LockFileError::Missing { .. }), "{err}");
    }

    #[test]
    fn slot_handles_work_across_threads() {
        let dir = tempfile::tempdir().unwrap();
        let lf = LockFile::open(&db(&dir), true).unwrap();
        std::thread::scope(|sc| {
            for t in 0..8u64 {
                let lf = lf.clone();
                sc.spawn(move || {
                    let s = lf.claim_slot().unwrap();
                    for i in 0..1000 {
                        s.begin(100 + t + i);
                        s.end();
                    }
                    s.begin(100 + t);
                    assert_eq!(s.txid(), Some(100 + t));
                    let oldest = lf.oldest_reader().unwrap();
                    assert!(oldest <= 100 + t, "{oldest}");
                });
            }
        });
        assert_eq!(lf.oldest_reader(), None, "every handle dropped");
    }
}
