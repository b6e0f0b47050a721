//! `Value` and `Key` for byte strings and text: `&[u8]`, `Vec<u8>`, `&str`, `String`.
//!
//! As a whole key or value they are their bytes, so `&[u8]` costs nothing over the byte API
//! and reads of `&[u8]`/`&str` borrow from the page. Inside a tuple they are escaped and
//! terminated (see [`Key`]'s format table), so the element after them can be found and
//! compared; decoding that copies only if the bytes held a 0x00.

use std::borrow::Cow;

use super::key::{Key, PrefixKey, Value};
use super::DecodeError;

/// The nested encoding: each 0x00 as 0x00 0xff, then the terminator 0x00 0x01.
pub(super) fn encode_escaped(bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(bytes.len() + 2);
    let mut rest = bytes;
    while let Some(zero) = rest.iter().position(|&b| b == 0) {
        out.extend_from_slice(&rest[..=zero]);
        out.push(0xff);
        rest = &rest[zero + 1..];
    }
    out.extend_from_slice(rest);
    out.extend_from_slice(&[0x00, 0x01]);
}

/// Undo [`encode_escaped`] at the start of `bytes`: the content (borrowed unless it held an
/// escaped 0x00) and the bytes after the terminator.
pub(super) fn decode_escaped<'a>(
    ty: &'static str,
    bytes: &'a [u8],
) -> Result<(Cow<'a, [u8]>, &'a [u8]), DecodeError> {
    let mut unescaped: Option<Vec<u8>> = None;
    let mut from = 0;
    loop {
        let zero = bytes[from..]
            .iter()
            .position(|&b| b == 0)
            .map(|i| from + i)
            .ok_or_else(|| DecodeError::new(ty, bytes.len(), "no terminator (0x00 0x01)"))?;
        match bytes.get(zero + 1) {
            Some(0x01) => {
                let rest = &bytes[zero + 2..];
                let content = match unescaped {
                    None => Cow::Borrowed(&bytes[..zero]),
                    Some(mut v) => {
                        v.extend_from_slice(&bytes[from..zero]);
                        Cow::Owned(v)
                    }
                };
                return Ok((content, rest));
            }
            Some(0xff) => {
                unescaped
                    .get_or_insert_with(Vec::new)
                    .extend_from_slice(&bytes[from..=zero]);
                from = zero + 2;
            }
            _ => {
                return Err(DecodeError::new(
                    ty,
                    bytes.len(),
                    "0x00 not followed by 0x01 or 0xff",
                ))
            }
        }
    }
}

fn utf8<'a>(ty: &'static str, bytes: &'a [u8]) -> Result<&'a str, DecodeError> {
    std::str::from_utf8(bytes).map_err(|_| DecodeError::new(ty, bytes.len(), "not UTF-8"))
}

fn decode_escaped_str<'a>(
    ty: &'static str,
    bytes: &'a [u8],
) -> Result<(Cow<'a, str>, &'a [u8]), DecodeError> {
    let (content, rest) = decode_escaped(ty, bytes)?;
    let text = match content {
        Cow::Borrowed(b) => Cow::Borrowed(utf8(ty, b)?),
        Cow::Owned(v) => Cow::Owned(
            String::from_utf8(v)
                .map_err(|e| DecodeError::new(ty, e.as_bytes().len(), "not UTF-8"))?,
        ),
    };
    Ok((text, rest))
}

/// Bytes as they are; reads borrow from the page.
impl Value for &[u8] {
    type SelfType<'a>
        = &'a [u8]
    where
        Self: 'a;
    type Decoded<'a>
        = &'a [u8]
    where
        Self: 'a;
    type AsBytes<'a>
        = &'a [u8]
    where
        Self: 'a;

    #[inline]
    fn as_bytes<'a, 'b: 'a>(value: &'a &'b [u8]) -> &'a [u8]
    where
        Self: 'b,
    {
        value
    }

    #[inline]
    fn from_bytes<'a>(bytes: &'a [u8]) -> Result<&'a [u8], DecodeError>
    where
        Self: 'a,
    {
        Ok(bytes)
    }
}

impl Key for &[u8] {
    type Nested<'a>
        = Cow<'a, [u8]>
    where
        Self: 'a;

    fn encode_nested(value: &&[u8], out: &mut Vec<u8>) {
        encode_escaped(value, out);
    }

    fn decode_nested<'a>(bytes: &'a [u8]) -> Result<(Cow<'a, [u8]>, &'a [u8]), DecodeError>
    where
        Self: 'a,
    {
        decode_escaped("&[u8]", bytes)
    }
}

impl PrefixKey for &[u8] {
    type Prefix = &'static [u8];

    fn encode_prefix(prefix: &&[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(prefix);
    }
}

/// Bytes, written from `&[u8]` and read back as an owned `Vec<u8>`.
impl Value for Vec<u8> {
    type SelfType<'a> = &'a [u8];
    type Decoded<'a> = Vec<u8>;
    type AsBytes<'a> = &'a [u8];

    #[inline]
    fn as_bytes<'a, 'b: 'a>(value: &'a &'b [u8]) -> &'a [u8] {
        value
    }

    #[inline]
    fn from_bytes<'a>(bytes: &'a [u8]) -> Result<Vec<u8>, DecodeError>
    where
        Self: 'a,
    {
        Ok(bytes.to_vec())
    }
}

impl Key for Vec<u8> {
    type Nested<'a> = Vec<u8>;

    fn encode_nested(value: &&[u8], out: &mut Vec<u8>) {
        encode_escaped(value, out);
    }

    fn decode_nested<'a>(bytes: &'a [u8]) -> Result<(Vec<u8>, &'a [u8]), DecodeError>
    where
        Self: 'a,
    {
        decode_escaped("Vec<u8>", bytes).map(|(b, rest)| (b.into_owned(), rest))
    }
}

impl PrefixKey for Vec<u8> {
    type Prefix = &'static [u8];

    fn encode_prefix(prefix: &&[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(prefix);
    }
}

/// Text as its UTF-8 bytes; reads borrow from the page (after checking the UTF-8).
impl Value for &str {
    type SelfType<'a>
        = &'a str
    where
        Self: 'a;
    type Decoded<'a>
        = &'a str
    where
        Self: 'a;
    type AsBytes<'a>
        = &'a [u8]
    where
        Self: 'a;

    #[inline]
    fn as_bytes<'a, 'b: 'a>(value: &'a &'b str) -> &'a [u8]
    where
        Self: 'b,
    {
        value.as_bytes()
    }

    #[inline]
    fn from_bytes<'a>(bytes: &'a [u8]) -> Result<&'a str, DecodeError>
    where
        Self: 'a,
    {
        utf8("&str", bytes)
    }
}

impl Key for &str {
    type Nested<'a>
        = Cow<'a, str>
    where
        Self: 'a;

    fn encode_nested(value: &&str, out: &mut Vec<u8>) {
        encode_escaped(value.as_bytes(), out);
    }

    fn decode_nested<'a>(bytes: &'a [u8]) -> Result<(Cow<'a, str>, &'a [u8]), DecodeError>
    where
        Self: 'a,
    {
        decode_escaped_str("&str", bytes)
    }
}

impl PrefixKey for &str {
    type Prefix = &'static str;

    fn encode_prefix(prefix: &&str, out: &mut Vec<u8>) {
        out.extend_from_slice(prefix.as_bytes());
    }
}

/// Text, written from `&str` and read back as an owned `String`.
impl Value for String {
    type SelfType<'a> = &'a str;
    type Decoded<'a> = String;
    type AsBytes<'a> = &'a [u8];

    #[inline]
    fn as_bytes<'a, 'b: 'a>(value: &'a &'b str) -> &'a [u8] {
        value.as_bytes()
    }

    #[inline]
    fn from_bytes<'a>(bytes: &'a [u8]) -> Result<String, DecodeError>
    where
        Self: 'a,
    {
        utf8("String", bytes).map(str::to_owned)
    }
}

impl Key for String {
    type Nested<'a> = String;

    fn encode_nested(value: &&str, out: &mut Vec<u8>) {
        encode_escaped(value.as_bytes(), out);
    }

    fn decode_nested<'a>(bytes: &'a [u8]) -> Result<(String, &'a [u8]), DecodeError>
    where
        Self: 'a,
    {
        decode_escaped_str("String", bytes).map(|(s, rest)| (s.into_owned(), rest))
    }
}

impl PrefixKey for String {
    type Prefix = &'static str;

    fn encode_prefix(prefix: &&str, out: &mut Vec<u8>) {
        out.extend_from_slice(prefix.as_bytes());
    }
}
