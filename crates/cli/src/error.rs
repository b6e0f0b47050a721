//! How a command fails: the message for stderr and the exit code scripts rely on.
//!
//! Exit codes are part of the contract: 0 success, 1 the operation failed or found a problem,
//! 2 a usage error (clap exits with 2 by itself; [`CliError::usage`] covers what only shows up
//! after parsing, such as a malformed `--hex` argument).

use std::io;
use std::path::Path;

/// The operation failed or found a problem.
pub const EXIT_FAILED: u8 = 1;
/// The command line was wrong.
pub const EXIT_USAGE: u8 = 2;

/// A failed command: an exit code, and a message unless the output already said it all.
#[derive(Debug)]
pub struct CliError {
    /// Process exit code.
    pub code: u8,
    /// Printed as `larch: <message>` on stderr.
    pub message: Option<String>,
}

/// Result of a command.
pub type CliResult<T = ()> = Result<T, CliError>;

impl CliError {
    /// The operation failed (exit 1).
    pub fn failed(message: impl Into<String>) -> CliError {
        CliError {
            code: EXIT_FAILED,
            message: Some(message.into()),
        }
    }

    /// A malformed argument that clap could not see (exit 2).
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            code: EXIT_USAGE,
            message: Some(message.into()),
        }
    }

    /// Exit 1 with nothing more to say: the command's own output reported the problem (check
    /// listing damage), or there is no one left to tell (stdout closed by `| head`).
    pub fn quiet() -> CliError {
        CliError {
            code: EXIT_FAILED,
            message: None,
        }
    }
}

/// An engine error as the user should see it: the engine's file-level errors already start
/// with the path, the tree-level ones (corrupt page, key too large, ...) do not, so add it.
pub fn engine(path: &Path, e: larch_engine::Error) -> CliError {
    use larch_engine::Error;
    match e {
        Error::Io { .. }
        | Error::AlreadyOpen { .. }
        | Error::NotADatabase { .. }
        | Error::UnsupportedVersion { .. }
        | Error::Poisoned { .. }
        | Error::ReadOnly { .. } => CliError::failed(e.to_string()),
        other => CliError::failed(format!("{}: {other}", path.display())),
    }
}

/// `?` on a write to stdout. A closed pipe (`larch dump f | head`) is not worth a message,
/// but the command did not finish, so it still exits 1.
impl From<io::Error> for CliError {
    fn from(e: io::Error) -> CliError {
        if e.kind() == io::ErrorKind::BrokenPipe {
            CliError::quiet()
        } else {
            CliError::failed(format!("writing output: {e}"))
        }
    }
}
