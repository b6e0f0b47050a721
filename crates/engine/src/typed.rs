//! Typed tables over the byte trees: `Table<K, V>` and `MultimapTable<K, V>` definitions, and
//! the `Key`/`Value` traits that turn Rust values into the bytes a tree stores.
//!
//! A typed table is an ordinary tree read and written through an encoding; nothing about the
//! types is stored in the file, so the same tree can be opened as bytes or as another type.
//! Reading bytes that some other type wrote is an error, never a panic ([`DecodeError`],
//! reported by the table methods as [`Error::Corrupt`] with page 0).
//!
//! Trees compare keys as raw bytes, so a [`Key`]'s encoding is order-preserving: the encoded
//! bytes sort the way the values do (numbers numerically, tuples element by element). The
//! encodings are described in the `## Format` sections of [`Key`] and of the implementations.

mod bytes;
mod key;
mod multimap;
mod table;
mod tuple;

use std::fmt;

use crate::Error;

pub use key::{Key, PrefixKey, Value};
pub use multimap::{
    MultimapTable, MultimapValues, OwnedReadMultimapTable, ReadMultimapTable, WriteMultimapTable,
};
pub use table::{OwnedEntry, OwnedReadTable, ReadTable, Table, TableRange, WriteTable};

/// Bytes that do not decode as the type asked for: a tree written as one type and read as
/// another, or a hand-written byte value in a typed table.
///
/// [`Value::from_bytes`] returns it; the table methods report it as [`Error::Corrupt`] with
/// page 0 and the table's name in the reason (the file is fine; its contents are not of the
/// table's type).
///
/// ```
/// use larch_engine::Value;
/// let err = u32::from_bytes(b"abc").unwrap_err();
/// assert_eq!(err.to_string(), "3 bytes are not a u32: expected 4 bytes");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    ty: &'static str,
    len: usize,
    reason: Reason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Reason {
    /// A fixed-width type given another length.
    Length(usize),
    /// A tuple element cut short.
    Short(usize),
    Other(&'static str),
}

impl DecodeError {
    /// An error reading `len` bytes as `ty` (a type's name), with `reason` in words.
    ///
    /// For implementations of [`Value`] outside this crate.
    ///
    /// ```
    /// let e = larch_engine::DecodeError::new("Celsius", 3, "expected 8 bytes");
    /// assert_eq!(e.to_string(), "3 bytes are not a Celsius: expected 8 bytes");
    /// ```
    pub fn new(ty: &'static str, len: usize, reason: &'static str) -> DecodeError {
        DecodeError {
            ty,
            len,
            reason: Reason::Other(reason),
        }
    }

    /// `len` bytes given to a type that is always `expected` long.
    pub(crate) fn length(ty: &'static str, len: usize, expected: usize) -> DecodeError {
        DecodeError {
            ty,
            len,
            reason: Reason::Length(expected),
        }
    }

    /// `len` bytes left for a tuple element that needs `need`.
    pub(crate) fn short(ty: &'static str, len: usize, need: usize) -> DecodeError {
        DecodeError {
            ty,
            len,
            reason: Reason::Short(need),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes are not a {}: ", self.len, self.ty)?;
        match self.reason {
            Reason::Length(n) => write!(f, "expected {n} bytes"),
            Reason::Short(n) => write!(f, "a tuple element needs {n} bytes"),
            Reason::Other(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Error {
        Error::corrupt(0, e.to_string())
    }
}

/// The error a table method reports for bytes of the wrong type: which table, and why.
fn decode_error(table: &str, e: DecodeError) -> Error {
    Error::corrupt(0, format!("table {table:?}: {e}"))
}

/// The first key after every key that starts with `prefix`, or `None` if no such key exists
/// (the prefix is empty or all 0xff).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let keep = prefix.iter().rposition(|&b| b != 0xff)?;
    let mut end = prefix[..=keep].to_vec();
    end[keep] += 1;
    Some(end)
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_increments_the_last_byte_below_0xff() {
        assert_eq!(prefix_end(b""), None);
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
    }
}
