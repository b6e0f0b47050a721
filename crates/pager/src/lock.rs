//! The file lock: one read-write handle, or any number of read-only ones.
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

/// Take an flock on `file` without waiting. flock locks belong to the open file description,
/// so a second open of the same path in this process conflicts too.
pub(crate) fn try_lock(file: &File, exclusive: bool) -> io::Result<bool> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    } | libc::LOCK_NB;
    loop {
        // SAFETY: flock on a valid, owned descriptor; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
        if rc == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(err),
        }
    }
}
