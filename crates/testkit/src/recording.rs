//! A `Storage` that does every write, sync and resize on a real file (the engine's map reads
//! it) and records it in an ordered log, so a power-cut simulation can later rebuild the image
//! a disk could hold after any prefix of the log (see [`crate::images`]). An optional
//! [`FaultPlan`] makes chosen calls fail.

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larch::Storage;

/// One storage call that reached the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IoOp {
    Write { off: u64, data: Vec<u8> },
    Sync,
    SetLen(u64),
}

/// The ordered log a [`Recording`] appends to; several `Recording`s (a file closed and
/// reopened, or several files) may share one.
pub type IoLog<T = IoOp> = Arc<Mutex<Vec<T>>>;

/// Which kind of storage call; `as usize` indexes per-kind counters (write 0, sync 1, resize 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Write,
    Sync,
    SetLen,
}

/// How a planned failure behaves.
#[derive(Debug)]
pub enum Fault {
    /// The call returns this error and nothing of it reaches the file or the log.
    Fail(io::Error),
    /// A write's first half reaches the file (and the log), then the call returns this error.
    /// Other calls treat it as `Fail`.
    Short(io::Error),
}

/// Decides, before each call reaches the file, whether it fails.
pub trait FaultPlan: Debug + Send + Sync {
    fn fault(&self, call: Call) -> Option<Fault>;
}

/// When a sync enters the log, relative to its (simulated) duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncRecorded {
    /// When it returns: the writes logged before it are the ones it made durable.
    AtEnd,
    /// When it starts: a write that lands while the sync is in flight is not taken to be
    /// covered by it (the stricter rule).
    AtStart,
}

/// Applies every call to a real file and appends it to a shared log, each entry made by
/// `entry` (so a multi-file simulation can tag which file it was). The log stays locked
/// while the call runs on the file, so the log's order is the order the file saw.
pub struct Recording<T = IoOp> {
    file: File,
    log: IoLog<T>,
    entry: Box<dyn Fn(IoOp) -> T + Send + Sync>,
    faults: Option<Arc<dyn FaultPlan>>,
    sync_delay: Duration,
    sync_recorded: SyncRecorded,
}

impl<T> Debug for Recording<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("file", &self.file)
            .field("faults", &self.faults)
            .field("sync_delay", &self.sync_delay)
            .field("sync_recorded", &self.sync_recorded)
            .finish_non_exhaustive()
    }
}

/// Open an existing file read-write, as a `Recording` needs it.
pub fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

impl Recording<IoOp> {
    /// Records `file`'s calls into `log` as they are.
    pub fn new(file: File, log: &IoLog) -> Recording {
        Recording::tagged(file, log, |op| op)
    }
}

impl<T> Recording<T> {
    /// Records `file`'s calls into `log`, each as `entry(op)`.
    pub fn tagged(
        file: File,
        log: &IoLog<T>,
        entry: impl Fn(IoOp) -> T + Send + Sync + 'static,
    ) -> Recording<T> {
        Recording {
            file,
            log: log.clone(),
            entry: Box::new(entry),
            faults: None,
            sync_delay: Duration::ZERO,
            sync_recorded: SyncRecorded::AtEnd,
        }
    }

    /// Fail calls as `plan` says.
    pub fn faults(mut self, plan: Arc<dyn FaultPlan>) -> Self {
        self.faults = Some(plan);
        self
    }

    /// Make each sync take `delay` (so concurrent writers pile up as on a disk), entering the
    /// log at its start or its end.
    pub fn sync_delay(mut self, delay: Duration, recorded: SyncRecorded) -> Self {
        self.sync_delay = delay;
        self.sync_recorded = recorded;
        self
    }

    fn fault(&self, call: Call) -> Option<Fault> {
        self.faults.as_ref().and_then(|p| p.fault(call))
    }

    fn push(&self, log: &mut Vec<T>, op: IoOp) {
        log.push((self.entry)(op));
    }
}

impl<T: Send + 'static> Storage for Recording<T> {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if let Some(Fault::Fail(e) | Fault::Short(e)) = self.fault(Call::SetLen) {
            return Err(e);
        }
        let mut log = self.log.lock().unwrap();
        self.file.set_len(len)?;
        self.push(&mut log, IoOp::SetLen(len));
        Ok(())
    }

    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let data = bufs.concat();
        let fault = self.fault(Call::Write);
        let mut log = self.log.lock().unwrap();
        match fault {
            None => {
                self.file.write_all_at(&data, offset)?;
                self.push(&mut log, IoOp::Write { off: offset, data });
                Ok(())
            }
            Some(Fault::Fail(e)) => Err(e),
            Some(Fault::Short(e)) => {
                let half = data[..data.len() / 2].to_vec();
                self.file.write_all_at(&half, offset)?;
                self.push(
                    &mut log,
                    IoOp::Write {
                        off: offset,
                        data: half,
                    },
                );
                Err(e)
            }
        }
    }

    fn sync(&self) -> io::Result<()> {
        if self.sync_recorded == SyncRecorded::AtEnd {
            std::thread::sleep(self.sync_delay);
        }
        if let Some(Fault::Fail(e) | Fault::Short(e)) = self.fault(Call::Sync) {
            return Err(e);
        }
        self.push(&mut self.log.lock().unwrap(), IoOp::Sync);
        if self.sync_recorded == SyncRecorded::AtStart {
            std::thread::sleep(self.sync_delay);
        }
        Ok(())
    }

    fn file(&self) -> &File {
        &self.file
    }
}
