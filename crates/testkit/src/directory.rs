//! Power cuts across a whole directory, for simulations in which compaction creates files and
//! renames one over the database (tests/crash_compaction.rs, tests/crash_processes.rs).
//!
//! One ordered log holds every page write, sync and resize of every file (the database, a
//! compacted copy) and every link, rename, removal and directory sync
//! (`larch::CompactionFs` routes compaction's through [`RecordingFs`]). For a cut after
//! operation k, [`image_at`] builds what a disk could hold:
//! - each file: its writes up to its own last sync, plus any subset of its later 4 KiB blocks,
//!   some torn (as [`crate::images`] does for one file);
//! - the directory: every operation up to the last directory sync, plus a prefix of the later
//!   ones (a journaling file system persists metadata operations in order; a rename is atomic).

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larch::{CompactionFs, Storage, WriteMode};

use crate::images::{durable_prefix, land, Image};
use crate::recording::{IoLog, IoOp, Recording, SyncRecorded};
use crate::Rng;

/// One operation on the directory or on one of its files.
#[derive(Clone, Debug)]
pub enum Op {
    /// A write, sync or resize of one file (by its number).
    File {
        file: usize,
        op: IoOp,
    },
    /// A new file (created, synced and linked by the engine, with the directory synced): its
    /// contents at creation and its name are durable from here on.
    Create {
        file: usize,
        name: String,
    },
    Link {
        from: String,
        to: String,
    },
    Rename {
        from: String,
        to: String,
    },
    Remove {
        name: String,
    },
    SyncDir,
}

impl Op {
    /// The file an operation changes, if it is not a directory operation.
    pub fn file(&self) -> Option<usize> {
        match self {
            Op::File { file, .. } => Some(*file),
            _ => None,
        }
    }
}

/// The log, and which file each name is as the engine sees the directory now.
#[derive(Debug, Default)]
pub struct Log {
    pub ops: IoLog<Op>,
    pub files: Mutex<Files>,
}

/// Every file the log knows.
#[derive(Debug, Default)]
pub struct Files {
    /// Contents of each file when it entered the log.
    pub initial: Vec<Vec<u8>>,
    /// Names to files as the engine sees them now (to know which file a path is).
    pub names: BTreeMap<String, usize>,
}

/// A path's last component, as the log names files.
pub fn name_of(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

impl Log {
    /// A log whose directory starts with the existing file at `path` as file 0.
    pub fn of_file(path: &Path) -> Arc<Log> {
        let log = Arc::new(Log::default());
        {
            let mut files = log.files.lock().unwrap();
            files.initial.push(std::fs::read(path).unwrap());
            files.names.insert(name_of(path), 0);
        }
        log
    }

    /// The file the name `path` is now, by number.
    pub fn file_named(&self, path: &Path) -> usize {
        self.files.lock().unwrap().names[&name_of(path)]
    }

    /// Operations logged so far.
    pub fn len(&self) -> usize {
        self.ops.lock().unwrap().len()
    }

    /// Nothing logged yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file's storage: applies every operation to the real file (the engine maps it) and logs it
/// as file `id`'s.
pub fn recording(file: File, id: usize, log: &Log) -> Recording<Op> {
    Recording::tagged(file, &log.ops, move |op| Op::File { file: id, op })
}

/// Compaction's file-system operations, performed for real and logged.
#[derive(Debug)]
pub struct RecordingFs {
    pub log: Arc<Log>,
    /// A directory operation that fails on purpose, if any.
    pub fault: Option<DirFault>,
    /// How long each sync of a file it makes takes (entering the log at its end).
    pub sync_delay: Duration,
    /// Syncs on another thread for the files it makes, each done this many calls later
    /// ([`Recording::syncs_in_background`]).
    pub background: Option<usize>,
}

impl RecordingFs {
    /// Every operation performed and logged.
    pub fn new(log: Arc<Log>) -> RecordingFs {
        RecordingFs {
            log,
            fault: None,
            sync_delay: Duration::ZERO,
            background: None,
        }
    }

    /// Each sync of a file it makes takes `delay`, as `Recording::sync_delay` (the log
    /// entry at the sync's end): threads of the handle pile up behind it as on a disk.
    pub fn sync_delay(mut self, delay: Duration) -> RecordingFs {
        self.sync_delay = delay;
        self
    }

    /// The files it makes sync on another thread, each sync done `lag` calls after it starts
    /// ([`Recording::syncs_in_background`]), as the database's storage does: a compacted
    /// copy becomes the database at a switch, and without them it would make no durable
    /// point in the background from then on.
    pub fn syncs_in_background(mut self, lag: usize) -> RecordingFs {
        self.background = Some(lag);
        self
    }

    /// The `at`-th (from 1) link, rename, removal or directory sync fails, and with `sticky`
    /// every one after it: a failed operation changes nothing and is not logged, so a cut
    /// after it finds the directory as the operations before it left it.
    pub fn failing(log: Arc<Log>, at: usize, sticky: bool) -> RecordingFs {
        let fault = DirFault {
            at,
            sticky,
            calls: Default::default(),
            failed_at: Mutex::new(None),
        };
        RecordingFs {
            log,
            fault: Some(fault),
            sync_delay: Duration::ZERO,
            background: None,
        }
    }

    /// Made by [`RecordingFs::failing`].
    pub fn fault_planned(&self) -> bool {
        self.fault.is_some()
    }

    /// Directory operations asked for so far, failed ones included (0 without a fault
    /// planned: only [`RecordingFs::failing`] counts).
    pub fn calls(&self) -> usize {
        self.fault.as_ref().map_or(0, |f| *f.calls.lock().unwrap())
    }

    /// How many operations the log held when the first failure happened (a cut at this
    /// length or later comes after it), and what failed.
    pub fn failed_at(&self) -> Option<(usize, &'static str)> {
        self.fault
            .as_ref()
            .and_then(|f| *f.failed_at.lock().unwrap())
    }

    fn turn(&self, what: &'static str) -> io::Result<()> {
        let Some(f) = &self.fault else {
            return Ok(());
        };
        let mut calls = f.calls.lock().unwrap();
        *calls += 1;
        if *calls == f.at || (f.sticky && *calls > f.at) {
            let mut first = f.failed_at.lock().unwrap();
            if first.is_none() {
                *first = Some((self.log.len(), what));
            }
            return Err(io::Error::other(format!("{what} refused by the test")));
        }
        Ok(())
    }
}

/// The failure plan of [`RecordingFs::failing`].
#[derive(Debug)]
pub struct DirFault {
    at: usize,
    sticky: bool,
    calls: Mutex<usize>,
    failed_at: Mutex<Option<(usize, &'static str)>>,
}

impl CompactionFs for RecordingFs {
    fn storage(&self, path: &Path, file: File, _mode: WriteMode) -> Box<dyn Storage> {
        let mut files = self.log.files.lock().unwrap();
        let name = name_of(path);
        let id = match files.names.get(&name) {
            Some(&id) => id,
            None => {
                let id = files.initial.len();
                files.initial.push(std::fs::read(path).unwrap());
                files.names.insert(name.clone(), id);
                self.log
                    .ops
                    .lock()
                    .unwrap()
                    .push(Op::Create { file: id, name });
                id
            }
        };
        let r = recording(file, id, &self.log).sync_delay(self.sync_delay, SyncRecorded::AtEnd);
        Box::new(match self.background {
            Some(lag) => r.syncs_in_background(lag),
            None => r,
        })
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.turn("hard_link")?;
        std::fs::hard_link(from, to)?;
        let mut files = self.log.files.lock().unwrap();
        let id = files.names[&name_of(from)];
        files.names.insert(name_of(to), id);
        self.log.ops.lock().unwrap().push(Op::Link {
            from: name_of(from),
            to: name_of(to),
        });
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.turn("rename")?;
        std::fs::rename(from, to)?;
        let mut files = self.log.files.lock().unwrap();
        let id = files.names.remove(&name_of(from)).unwrap();
        files.names.insert(name_of(to), id);
        self.log.ops.lock().unwrap().push(Op::Rename {
            from: name_of(from),
            to: name_of(to),
        });
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.turn("remove")?;
        std::fs::remove_file(path)?;
        let mut files = self.log.files.lock().unwrap();
        files.names.remove(&name_of(path));
        self.log.ops.lock().unwrap().push(Op::Remove {
            name: name_of(path),
        });
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.turn("sync_dir")?;
        File::open(dir)?.sync_all()?;
        self.log.ops.lock().unwrap().push(Op::SyncDir);
        Ok(())
    }
}

/// The directory (names to files) and each file's contents a cut after the first `k` of
/// `ops` may leave, starting from files `initial` and the directory in which file 0 is
/// named `first`. [`Image::DurableOnly`], [`Image::Everything`], [`Image::Random`], and
/// [`Image::AllBut`] with an index into `ops` that is a file's write: that write lost whole
/// (if it is not durable), every other operation of every file and of the directory done.
pub fn image_at(
    initial: &[Vec<u8>],
    ops: &[Op],
    k: usize,
    how: Image,
    page_size: usize,
    first: &str,
) -> (BTreeMap<String, usize>, Vec<Vec<u8>>) {
    let ops = &ops[..k];
    let mut rng = Rng(match how {
        Image::Random(seed) => seed | 1,
        _ => 1,
    });
    // AllBut: the lost write's file, and its index among that file's operations.
    let lost = match how {
        Image::AllBut(j) => match &ops[j] {
            Op::File {
                file,
                op: IoOp::Write { .. },
            } => Some((
                *file,
                ops[..j].iter().filter(|o| o.file() == Some(*file)).count(),
            )),
            other => panic!("AllBut({j}): {other:?} is not a file's write"),
        },
        _ => None,
    };
    // Files: each as the single-file image of its own operations, one seed across them all.
    let mut files = initial.to_vec();
    for (id, img) in files.iter_mut().enumerate() {
        let file_ops: Vec<IoOp> = ops
            .iter()
            .filter_map(|o| match o {
                Op::File { file, op } if *file == id => Some(op.clone()),
                _ => None,
            })
            .collect();
        let how = match lost {
            Some((file, i)) if file == id => Image::AllBut(i),
            Some(_) => Image::Everything,
            None => how,
        };
        land(img, &file_ops, how, page_size, &mut rng);
    }
    // Directory: durable up to the last directory sync (a create syncs it too), then a prefix.
    let dir_ops: Vec<&Op> = ops.iter().filter(|o| o.file().is_none()).collect();
    let durable = dir_ops
        .iter()
        .rposition(|o| matches!(o, Op::SyncDir | Op::Create { .. }))
        .map_or(0, |i| i + 1);
    let extra = dir_ops.len() - durable;
    let keep = durable
        + match how {
            Image::DurableOnly => 0,
            Image::Everything | Image::AllBut(_) => extra,
            Image::Random(_) => rng.below(extra as u64 + 1) as usize,
            other => unreachable!("{other:?}: directory simulations build only four images"),
        };
    let mut names = BTreeMap::new();
    names.insert(first.to_string(), 0usize);
    for op in &dir_ops[..keep] {
        match op {
            Op::Create { file, name } => {
                names.insert(name.clone(), *file);
            }
            Op::Link { from, to } => {
                let id = names[from];
                names.insert(to.clone(), id);
            }
            Op::Rename { from, to } => {
                let id = names.remove(from).unwrap();
                names.insert(to.clone(), id);
            }
            Op::Remove { name } => {
                names.remove(name);
            }
            _ => {}
        }
    }
    (names, files)
}

/// If the last of the first `k` of `ops` wrote a meta (page 0 or 1 of a file, plain or
/// durable): one of that file's writes before it that no completed sync made durable, chosen
/// by `pick`, by its index in `ops` (for [`Image::AllBut`]).
pub fn lost_before_meta(ops: &[Op], k: usize, page_size: usize, pick: u64) -> Option<usize> {
    let Op::File { file, op } = ops.get(k.checked_sub(1)?)? else {
        return None;
    };
    let (IoOp::Write { off, .. } | IoOp::DurableWrite { off, .. }) = op else {
        return None;
    };
    if *off >= 2 * page_size as u64 {
        return None;
    }
    let of_file: Vec<usize> = (0..k - 1)
        .filter(|&i| ops[i].file() == Some(*file))
        .collect();
    let file_ops: Vec<IoOp> = of_file
        .iter()
        .map(|&i| match &ops[i] {
            Op::File { op, .. } => op.clone(),
            _ => unreachable!("filtered to file operations"),
        })
        .collect();
    let candidates: Vec<usize> = of_file[durable_prefix(&file_ops)..]
        .iter()
        .copied()
        .filter(|&i| {
            matches!(
                &ops[i],
                Op::File {
                    op: IoOp::Write { .. },
                    ..
                }
            )
        })
        .collect();
    (!candidates.is_empty()).then(|| candidates[(pick % candidates.len() as u64) as usize])
}
