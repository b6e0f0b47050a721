//! The `Value` and `Key` traits, and their implementations for the fixed-width types:
//! integers, floats, `bool`, `()` and byte arrays.

use super::DecodeError;

/// A type a table can store: how a value becomes bytes and back.
///
/// Two associated types, because writing and reading want different things:
/// [`SelfType`](Value::SelfType) is what writes take (borrowed where it can be, so
/// `insert("alice", ..)` does not allocate), and [`Decoded`](Value::Decoded) is what reads
/// return. For `&str` and `&[u8]` both are borrowed slices and a read returns bytes straight
/// out of the page; `String` and `Vec<u8>` write from `&str`/`&[u8]` and read back owned.
///
/// `from_bytes` sees whatever bytes the tree holds, including bytes another type wrote, so it
/// checks them and returns [`DecodeError`] rather than panicking.
///
/// ```
/// use larch_engine::Value;
/// assert_eq!(u16::as_bytes(&0x0102), [1, 2]);
/// assert_eq!(u16::from_bytes(&[1, 2]), Ok(0x0102));
/// let s: &str = <&str>::from_bytes(b"caf\xc3\xa9")?; // borrowed, no copy
/// assert_eq!(s, "café");
/// assert!(<&str>::from_bytes(b"\xff").is_err());
/// # Ok::<(), larch_engine::DecodeError>(())
/// ```
pub trait Value {
    /// What writes take: `&'a str` for `&str` and `String`, `&'a [u8]` for `&[u8]` and
    /// `Vec<u8>`, the type itself for fixed-width types, a tuple of these for tuples.
    type SelfType<'a>
    where
        Self: 'a;

    /// What reads return: borrowed from the page for `&str` and `&[u8]`, owned otherwise.
    type Decoded<'a>
    where
        Self: 'a;

    /// The encoding: a borrowed slice for `&str`/`&[u8]`, an array for fixed-width types.
    type AsBytes<'a>: AsRef<[u8]>
    where
        Self: 'a;

    /// The bytes the tree stores for `value`.
    fn as_bytes<'a, 'b: 'a>(value: &'a Self::SelfType<'b>) -> Self::AsBytes<'a>
    where
        Self: 'b;

    /// The value `bytes` encode, or why they encode none.
    fn from_bytes<'a>(bytes: &'a [u8]) -> Result<Self::Decoded<'a>, DecodeError>
    where
        Self: 'a;
}

/// A type that can be a table's key: a [`Value`] whose encoding sorts like the values do.
///
/// Trees compare keys as raw bytes (`memcmp`), so `as_bytes(a) < as_bytes(b)` must hold
/// exactly when `a < b`. A key also has a *nested* encoding, used for every element of a
/// tuple but the last, which must in addition be self-delimiting: no nested encoding is a
/// prefix of another, so a tuple's elements compare one after the other.
///
/// ## Format
///
/// | type | key bytes | nested (inside a tuple) |
/// |------|-----------|-------------------------|
/// | `u8`..`u128` | big-endian | same |
/// | `i8`..`i128` | big-endian, sign bit flipped | same |
/// | `f32`, `f64` | bits, sign bit flipped if positive, all bits if negative ([`f64::total_cmp`] order) | same |
/// | `bool` | one byte, 0 or 1 | same |
/// | `()` | no bytes | same |
/// | `[u8; N]` | the N bytes | same |
/// | `&[u8]`, `Vec<u8>`, `&str`, `String` | the bytes (UTF-8) | each 0x00 as 0x00 0xff, then 0x00 0x01 |
/// | `Option<T>` | 0x00 for `None`, 0x01 then `T` | 0x00, or 0x01 then `T` nested |
/// | `(A, .., Z)` | each element nested, then the last as a key | every element nested |
///
/// The escape is FoundationDB's tuple-layer escape for byte strings, with 0x00 0x01 instead
/// of a lone 0x00 as the terminator: larch's tuples carry no type codes, so the element after
/// a string may begin with 0xff, and a two-byte terminator keeps the encoding unambiguous.
/// The terminator sorts below every escaped byte, so `("a", "b") < ("ab", "")`.
///
/// Keys in larch are at least one byte long ([`Error::EmptyKey`](crate::Error::EmptyKey)):
/// an empty `&str`/`&[u8]` or `()` as a whole key is refused on insert. They are not given a
/// prefix byte to avoid that, because then a `&[u8]` table would no longer be the byte tree
/// unchanged. Inside a tuple they are fine (`("", 1)` is three bytes).
///
/// A type of your own implements `Key` by writing its order-preserving bytes:
///
/// ```
/// use larch_engine::{DecodeError, Key, Value};
///
/// /// A user id; sorts like its number.
/// #[derive(Debug, PartialEq, Clone, Copy)]
/// struct UserId(u32);
///
/// impl Value for UserId {
///     type SelfType<'a> = UserId;
///     type Decoded<'a> = UserId;
///     type AsBytes<'a> = [u8; 4];
///     fn as_bytes<'a, 'b: 'a>(v: &'a UserId) -> [u8; 4] {
///         u32::as_bytes(&v.0)
///     }
///     fn from_bytes<'a>(bytes: &'a [u8]) -> Result<UserId, DecodeError>
///     where
///         Self: 'a,
///     {
///         u32::from_bytes(bytes).map(UserId)
///     }
/// }
///
/// impl Key for UserId {
///     type Nested<'a> = UserId;
///     fn encode_nested(v: &UserId, out: &mut Vec<u8>) {
///         u32::encode_nested(&v.0, out)
///     }
///     fn decode_nested<'a>(bytes: &'a [u8]) -> Result<(UserId, &'a [u8]), DecodeError>
///     where
///         Self: 'a,
///     {
///         u32::decode_nested(bytes).map(|(n, rest)| (UserId(n), rest))
///     }
/// }
///
/// let k = <(UserId, &str)>::as_bytes(&(UserId(7), "x"));
/// assert_eq!(k, [0, 0, 0, 7, b'x']);
/// ```
pub trait Key: Value {
    /// What the key decodes to as a tuple element before the last: the `Decoded` type, but
    /// owned or copy-on-write for `&str`/`&[u8]`, whose nested bytes may be escaped.
    type Nested<'a>
    where
        Self: 'a;

    /// Append the nested (self-delimiting, order-preserving) encoding of `value` to `out`.
    fn encode_nested(value: &Self::SelfType<'_>, out: &mut Vec<u8>);

    /// Decode the nested encoding at the start of `bytes`; returns it and the bytes after.
    fn decode_nested<'a>(bytes: &'a [u8]) -> Result<(Self::Nested<'a>, &'a [u8]), DecodeError>
    where
        Self: 'a;
}

/// Keys a table can scan by prefix (`range_prefix`): byte strings and text by leading bytes,
/// tuples by their first element.
///
/// ```
/// use larch_engine::PrefixKey;
/// let mut p = Vec::new();
/// <&str as PrefixKey>::encode_prefix(&"ab", &mut p);
/// assert_eq!(p, b"ab"); // every key starting with "ab"
/// p.clear();
/// <(&str, u8) as PrefixKey>::encode_prefix(&"ab", &mut p);
/// assert_eq!(p, b"ab\0\x01"); // every key whose first element is "ab"
/// ```
pub trait PrefixKey: Key {
    /// What a prefix is: the same bytes or text, or a tuple's first element.
    type Prefix: Value;

    /// Append the bytes every matching key starts with, and no other key does.
    fn encode_prefix(prefix: &<Self::Prefix as Value>::SelfType<'_>, out: &mut Vec<u8>);
}

/// The first `N` bytes of `bytes` and the rest, for a fixed-width tuple element.
pub(super) fn split_fixed<'a, const N: usize>(
    ty: &'static str,
    bytes: &'a [u8],
) -> Result<([u8; N], &'a [u8]), DecodeError> {
    match bytes.split_first_chunk::<N>() {
        Some((head, rest)) => Ok((*head, rest)),
        None => Err(DecodeError::short(ty, bytes.len(), N)),
    }
}

/// `bytes` as exactly `N` bytes, for a fixed-width whole key or value.
pub(super) fn exact<const N: usize>(
    ty: &'static str,
    bytes: &[u8],
) -> Result<[u8; N], DecodeError> {
    bytes
        .try_into()
        .map_err(|_| DecodeError::length(ty, bytes.len(), N))
}

/// `Value` and `Key` for a fixed-width type from its `encode`/`decode` to and from an array.
macro_rules! fixed_width {
    ($t:ty, $n:expr, $encode:expr, $decode:expr) => {
        impl Value for $t {
            type SelfType<'a> = $t;
            type Decoded<'a> = $t;
            type AsBytes<'a> = [u8; $n];

            #[inline]
            fn as_bytes<'a, 'b: 'a>(value: &'a $t) -> [u8; $n] {
                let encode: fn(&$t) -> [u8; $n] = $encode;
                encode(value)
            }

            #[inline]
            fn from_bytes<'a>(bytes: &'a [u8]) -> Result<$t, DecodeError>
            where
                Self: 'a,
            {
                let decode: fn([u8; $n]) -> Result<$t, DecodeError> = $decode;
                decode(exact(stringify!($t), bytes)?)
            }
        }

        impl Key for $t {
            type Nested<'a> = $t;

            #[inline]
            fn encode_nested(value: &$t, out: &mut Vec<u8>) {
                out.extend_from_slice(&<$t>::as_bytes(value));
            }

            #[inline]
            fn decode_nested<'a>(bytes: &'a [u8]) -> Result<($t, &'a [u8]), DecodeError>
            where
                Self: 'a,
            {
                let decode: fn([u8; $n]) -> Result<$t, DecodeError> = $decode;
                let (head, rest) = split_fixed(stringify!($t), bytes)?;
                Ok((decode(head)?, rest))
            }
        }
    };
}

macro_rules! unsigned {
    ($($t:ty),*) => {$(
        fixed_width!(
            $t,
            size_of::<$t>(),
            |v| v.to_be_bytes(),
            |b| Ok(<$t>::from_be_bytes(b))
        );
    )*};
}

/// Flipping the sign bit maps `MIN..=MAX` onto `0..=MAX_UNSIGNED` in order.
macro_rules! signed {
    ($($t:ty => $u:ty),*) => {$(
        fixed_width!(
            $t,
            size_of::<$t>(),
            |v| ((*v as $u) ^ (1 << (<$u>::BITS - 1))).to_be_bytes(),
            |b| Ok((<$u>::from_be_bytes(b) ^ (1 << (<$u>::BITS - 1))) as $t)
        );
    )*};
}

/// Positive floats get their sign bit set, negative ones all bits flipped: the bytes then sort
/// as `total_cmp` does (-NaN < -inf < .. < -0.0 < 0.0 < .. < inf < NaN).
macro_rules! float {
    ($($t:ty => $u:ty),*) => {$(
        fixed_width!(
            $t,
            size_of::<$t>(),
            |v| {
                let bits = v.to_bits();
                let sign: $u = 1 << (<$u>::BITS - 1);
                let k = if bits & sign != 0 { !bits } else { bits | sign };
                k.to_be_bytes()
            },
            |b| {
                let k = <$u>::from_be_bytes(b);
                let sign: $u = 1 << (<$u>::BITS - 1);
                Ok(<$t>::from_bits(if k & sign != 0 { k & !sign } else { !k }))
            }
        );
    )*};
}

unsigned!(u8, u16, u32, u64, u128);
signed!(i8 => u8, i16 => u16, i32 => u32, i64 => u64, i128 => u128);
float!(f32 => u32, f64 => u64);

fixed_width!(bool, 1, |v| [u8::from(*v)], |b| match b {
    [0] => Ok(false),
    [1] => Ok(true),
    _ => Err(DecodeError::new("bool", 1, "expected 0 or 1")),
});

fixed_width!((), 0, |_| [], |_| Ok(()));

/// Arrays are their bytes; reading one copies it (N bytes), so `Decoded` is the array.
impl<const N: usize> Value for [u8; N] {
    type SelfType<'a> = [u8; N];
    type Decoded<'a> = [u8; N];
    type AsBytes<'a> = &'a [u8; N];

    #[inline]
    fn as_bytes<'a, 'b: 'a>(value: &'a [u8; N]) -> &'a [u8; N] {
        value
    }

    #[inline]
    fn from_bytes<'a>(bytes: &'a [u8]) -> Result<[u8; N], DecodeError>
    where
        Self: 'a,
    {
        exact("[u8; N]", bytes)
    }
}

impl<const N: usize> Key for [u8; N] {
    type Nested<'a> = [u8; N];

    #[inline]
    fn encode_nested(value: &[u8; N], out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }

    #[inline]
    fn decode_nested<'a>(bytes: &'a [u8]) -> Result<([u8; N], &'a [u8]), DecodeError>
    where
        Self: 'a,
    {
        split_fixed("[u8; N]", bytes)
    }
}

/// An array key's prefix is leading bytes, as for a byte string.
impl<const N: usize> PrefixKey for [u8; N] {
    type Prefix = &'static [u8];

    fn encode_prefix(prefix: &&[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(prefix);
    }
}
