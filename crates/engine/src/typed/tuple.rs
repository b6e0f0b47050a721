//! `Value` and `Key` for composite keys: tuples of 2 to 6 keys, and `Option<T>`.
//!
//! A tuple's key is every element but the last in its nested (self-delimiting) encoding,
//! then the last element as a whole key. The last needs no terminator because nothing
//! follows it, so it reads back borrowed like a whole key: a `(u64, &str)` key's text is a
//! slice of the page. Two tuples compare element by element: equal elements are equal byte
//! runs, and the first differing element decides within its own bytes (nested encodings are
//! order-preserving and none is a prefix of another).
//!
//! The nested encoding of a tuple is all its elements nested, so `((A, B), C)` and
//! `(A, B, C)` have the same bytes: a table of triples can be opened as pairs whose first
//! element is a pair, to scan by the first two elements with `range_prefix`.

use super::key::{Key, PrefixKey, Value};
use super::DecodeError;

macro_rules! tuple {
    ($F:ident $f:ident $fi:tt $(, $A:ident $a:ident $ai:tt)* ; $L:ident $l:ident $li:tt) => {
        impl<$F: Key, $($A: Key,)* $L: Key> Value for ($F, $($A,)* $L) {
            type SelfType<'a>
                = ($F::SelfType<'a>, $($A::SelfType<'a>,)* $L::SelfType<'a>)
            where
                Self: 'a;
            type Decoded<'a>
                = ($F::Nested<'a>, $($A::Nested<'a>,)* $L::Decoded<'a>)
            where
                Self: 'a;
            type AsBytes<'a>
                = Vec<u8>
            where
                Self: 'a;

            fn as_bytes<'a, 'b: 'a>(value: &'a Self::SelfType<'b>) -> Vec<u8>
            where
                Self: 'b,
            {
                let mut out = Vec::new();
                $F::encode_nested(&value.$fi, &mut out);
                $($A::encode_nested(&value.$ai, &mut out);)*
                out.extend_from_slice($L::as_bytes(&value.$li).as_ref());
                out
            }

            fn from_bytes<'a>(bytes: &'a [u8]) -> Result<Self::Decoded<'a>, DecodeError>
            where
                Self: 'a,
            {
                let ($f, rest) = $F::decode_nested(bytes)?;
                $(let ($a, rest) = $A::decode_nested(rest)?;)*
                let $l = $L::from_bytes(rest)?;
                Ok(($f, $($a,)* $l))
            }
        }

        impl<$F: Key, $($A: Key,)* $L: Key> Key for ($F, $($A,)* $L) {
            type Nested<'a>
                = ($F::Nested<'a>, $($A::Nested<'a>,)* $L::Nested<'a>)
            where
                Self: 'a;

            fn encode_nested(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                $F::encode_nested(&value.$fi, out);
                $($A::encode_nested(&value.$ai, out);)*
                $L::encode_nested(&value.$li, out);
            }

            fn decode_nested<'a>(
                bytes: &'a [u8],
            ) -> Result<(Self::Nested<'a>, &'a [u8]), DecodeError>
            where
                Self: 'a,
            {
                let ($f, rest) = $F::decode_nested(bytes)?;
                $(let ($a, rest) = $A::decode_nested(rest)?;)*
                let ($l, rest) = $L::decode_nested(rest)?;
                Ok((($f, $($a,)* $l), rest))
            }
        }

        /// A tuple's prefix is its first element: `range_prefix(x)` visits every key
        /// whose first element equals `x`.
        impl<$F: Key, $($A: Key,)* $L: Key> PrefixKey for ($F, $($A,)* $L) {
            type Prefix = $F;

            fn encode_prefix(prefix: &$F::SelfType<'_>, out: &mut Vec<u8>) {
                $F::encode_nested(prefix, out);
            }
        }
    };
}

tuple!(A a 0; B b 1);
tuple!(A a 0, B b 1; C c 2);
tuple!(A a 0, B b 1, C c 2; D d 3);
tuple!(A a 0, B b 1, C c 2, D d 3; E e 4);
tuple!(A a 0, B b 1, C c 2, D d 3, E e 4; G g 5);

/// `None` sorts before every `Some`; a tag byte (0 or 1) comes first.
impl<T: Key> Value for Option<T> {
    type SelfType<'a>
        = Option<T::SelfType<'a>>
    where
        Self: 'a;
    type Decoded<'a>
        = Option<T::Decoded<'a>>
    where
        Self: 'a;
    type AsBytes<'a>
        = Vec<u8>
    where
        Self: 'a;

    fn as_bytes<'a, 'b: 'a>(value: &'a Option<T::SelfType<'b>>) -> Vec<u8>
    where
        Self: 'b,
    {
        match value {
            None => vec![0],
            Some(v) => {
                let open_file = T::as_bytes(v);
                let mut out = Vec::with_capacity(1 + open_file.as_ref().len());
                out.push(1);
                out.extend_from_slice(open_file.as_ref());
                out
            }
        }
    }

    fn from_bytes<'a>(bytes: &'a [u8]) -> Result<Option<T::Decoded<'a>>, DecodeError>
    where
        Self: 'a,
    {
        match bytes.split_first() {
            Some((0, [])) => Ok(None),
            Some((1, rest)) => T::from_bytes(rest).map(Some),
            _ => Err(DecodeError::new(
                "Option",
                bytes.len(),
                "expected tag 0 alone or tag 1 and a value",
            )),
        }
    }
}

impl<T: Key> Key for Option<T> {
    type Nested<'a>
        = Option<T::Nested<'a>>
    where
        Self: 'a;

    fn encode_nested(value: &Option<T::SelfType<'_>>, out: &mut Vec<u8>) {
        match value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                T::encode_nested(v, out);
            }
        }
    }

    fn decode_nested<'a>(bytes: &'a [u8]) -> Result<(Option<T::Nested<'a>>, &'a [u8]), DecodeError>
    where
        Self: 'a,
    {
        match bytes.split_first() {
            Some((0, rest)) => Ok((None, rest)),
            Some((1, rest)) => T::decode_nested(rest).map(|(v, rest)| (Some(v), rest)),
            _ => Err(DecodeError::new(
                "Option",
                bytes.len(),
                "expected tag 0 or 1",
            )),
        }
    }
}
