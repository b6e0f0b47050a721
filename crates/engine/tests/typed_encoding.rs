//! Typed keys sort like their values, round-trip, and never panic on bytes they did not write.
//!
//! Trees compare keys with memcmp, so every `Key` encoding must put bytes in value order:
//! for each key type (tuples of mixed types included) the property is
//! `a.cmp(&b) == encode(a).cmp(&encode(b))`.

use std::borrow::Cow;
use std::cmp::Ordering;

use larch_engine::{Key, Value};
use proptest::prelude::*;

/// Text over a small alphabet that includes NUL and 0x01 (the escape's bytes), so that
/// prefixes, escapes and terminators collide often.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just('\0'),
            Just('\u{1}'),
            Just('a'),
            Just('b'),
            Just('é'),
            Just('\u{ff}'),
            any::<char>()
        ],
        0..5,
    )
    .prop_map(String::from_iter)
}

/// Bytes weighted towards 0x00, 0x01 and 0xff.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![Just(0u8), Just(1u8), Just(0xffu8), Just(b'a'), any::<u8>()],
        0..6,
    )
}

fn enc<K: Key>(k: &K::SelfType<'_>) -> Vec<u8> {
    K::as_bytes(k).as_ref().to_vec()
}

fn nested<K: Key>(k: &K::SelfType<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    K::encode_nested(k, &mut out);
    out
}

/// `a` and `b` in value order (`ord`) and their encodings agree, as whole keys and nested.
fn same_order<K: Key>(ord: Ordering, a: &K::SelfType<'_>, b: &K::SelfType<'_>) {
    assert_eq!(enc::<K>(a).cmp(&enc::<K>(b)), ord, "whole-key order");
    assert_eq!(nested::<K>(a).cmp(&nested::<K>(b)), ord, "nested order");
}

/// Decoding bytes of any shape returns, never panics; nested decoding never reads past the
/// end.
fn no_panic<K: Key>(bytes: &[u8]) {
    let _ = K::from_bytes(bytes);
    if let Ok((_, rest)) = K::decode_nested(bytes) {
        assert!(rest.len() <= bytes.len());
    }
}

macro_rules! order_and_round_trip {
    ($name:ident, $t:ty, $strategy:expr) => {
        proptest! {
            #[test]
            fn $name(a in $strategy, b in $strategy) {
                same_order::<$t>(a.cmp(&b), &a, &b);
                prop_assert_eq!(<$t>::from_bytes(&enc::<$t>(&a)), Ok(a));
                let n = nested::<$t>(&a);
                prop_assert_eq!(<$t>::decode_nested(&n), Ok((a, &[][..])));
            }
        }
    };
}

order_and_round_trip!(u8_sorts_numerically, u8, any::<u8>());
order_and_round_trip!(u16_sorts_numerically, u16, any::<u16>());
order_and_round_trip!(u32_sorts_numerically, u32, any::<u32>());
order_and_round_trip!(u64_sorts_numerically, u64, any::<u64>());
order_and_round_trip!(u128_sorts_numerically, u128, any::<u128>());
order_and_round_trip!(i8_sorts_numerically, i8, any::<i8>());
order_and_round_trip!(i16_sorts_numerically, i16, any::<i16>());
order_and_round_trip!(i32_sorts_numerically, i32, any::<i32>());
order_and_round_trip!(i64_sorts_numerically, i64, any::<i64>());
order_and_round_trip!(i128_sorts_numerically, i128, any::<i128>());
order_and_round_trip!(bool_sorts_false_first, bool, any::<bool>());
order_and_round_trip!(arrays_sort_bytewise, [u8; 3], any::<[u8; 3]>());

proptest! {
    #[test]
    fn floats_sort_in_total_order(a in any::<f64>(), b in any::<f64>(), c in any::<f32>(), d in any::<f32>()) {
        same_order::<f64>(a.total_cmp(&b), &a, &b);
        same_order::<f32>(c.total_cmp(&d), &c, &d);
        prop_assert_eq!(f64::from_bytes(&enc::<f64>(&a)).map(f64::to_bits), Ok(a.to_bits()));
        prop_assert_eq!(f32::from_bytes(&enc::<f32>(&c)).map(f32::to_bits), Ok(c.to_bits()));
    }

    #[test]
    fn text_sorts_like_str_and_reads_back_borrowed(a in text(), b in text()) {
        same_order::<&str>(a.cmp(&b), &a.as_str(), &b.as_str());
        same_order::<String>(a.cmp(&b), &a.as_str(), &b.as_str());
        let e = enc::<&str>(&a.as_str());
        prop_assert_eq!(e.as_slice(), a.as_bytes()); // whole keys are the bytes, unescaped
        prop_assert_eq!(<&str>::from_bytes(&e), Ok(a.as_str()));
        prop_assert_eq!(String::from_bytes(&e), Ok(a.clone()));
        let n = nested::<&str>(&a.as_str());
        let (back, rest) = <&str>::decode_nested(&n).unwrap();
        prop_assert!(rest.is_empty());
        prop_assert_eq!(&back, &a);
        // Only an escaped NUL forces a copy.
        prop_assert_eq!(matches!(back, Cow::Borrowed(_)), !a.contains('\0'));
    }

    #[test]
    fn bytes_sort_bytewise_and_round_trip(a in bytes(), b in bytes()) {
        same_order::<&[u8]>(a.cmp(&b), &a.as_slice(), &b.as_slice());
        same_order::<Vec<u8>>(a.cmp(&b), &a.as_slice(), &b.as_slice());
        prop_assert_eq!(<&[u8]>::from_bytes(&a), Ok(a.as_slice()));
        prop_assert_eq!(Vec::<u8>::from_bytes(&a), Ok(a.clone()));
        let n = nested::<Vec<u8>>(&a.as_slice());
        prop_assert_eq!(Vec::<u8>::decode_nested(&n), Ok((a.clone(), &[][..])));
    }

    #[test]
    fn options_sort_none_first(a in proptest::option::of(text()), b in proptest::option::of(text())) {
        let (ra, rb) = (a.as_deref(), b.as_deref());
        same_order::<Option<&str>>(ra.cmp(&rb), &ra, &rb);
        let back = Option::<String>::from_bytes(&enc::<Option<&str>>(&ra));
        prop_assert_eq!(back, Ok(a.clone()));
    }

    #[test]
    fn pairs_of_text_sort_element_by_element(a in (text(), text()), b in (text(), text())) {
        let ra = (a.0.as_str(), a.1.as_str());
        let rb = (b.0.as_str(), b.1.as_str());
        same_order::<(&str, &str)>(ra.cmp(&rb), &ra, &rb);
        let e = enc::<(&str, &str)>(&ra);
        let (first, last) = <(&str, &str)>::from_bytes(&e).unwrap();
        prop_assert_eq!((first.as_ref(), last), ra);
        prop_assert_eq!(<(String, String)>::from_bytes(&e), Ok(a.clone()));
    }

    #[test]
    fn mixed_triples_sort_element_by_element(
        a in (any::<u16>(), bytes(), any::<i32>()),
        b in (any::<u16>(), bytes(), any::<i32>()),
    ) {
        let ra = (a.0, a.1.as_slice(), a.2);
        let rb = (b.0, b.1.as_slice(), b.2);
        same_order::<(u16, &[u8], i32)>(ra.cmp(&rb), &ra, &rb);
        let back = <(u16, Vec<u8>, i32)>::from_bytes(&enc::<(u16, &[u8], i32)>(&ra));
        prop_assert_eq!(back, Ok(a.clone()));
    }

    #[test]
    fn quads_with_text_bytes_and_options_sort_element_by_element(
        a in (any::<bool>(), text(), proptest::option::of(bytes()), any::<i8>()),
        b in (any::<bool>(), text(), proptest::option::of(bytes()), any::<i8>()),
    ) {
        let ra = (a.0, a.1.as_str(), a.2.as_deref(), a.3);
        let rb = (b.0, b.1.as_str(), b.2.as_deref(), b.3);
        same_order::<(bool, &str, Option<&[u8]>, i8)>(ra.cmp(&rb), &ra, &rb);
        let e = enc::<(bool, &str, Option<&[u8]>, i8)>(&ra);
        let back = <(bool, String, Option<Vec<u8>>, i8)>::from_bytes(&e);
        prop_assert_eq!(back, Ok(a.clone()));
    }

    #[test]
    fn six_tuples_sort_element_by_element(
        a in (text(), any::<u8>(), bytes(), any::<i64>(), any::<[u8; 2]>(), text()),
        b in (text(), any::<u8>(), bytes(), any::<i64>(), any::<[u8; 2]>(), text()),
    ) {
        let ra = (a.0.as_str(), a.1, a.2.as_slice(), a.3, a.4, a.5.as_str());
        let rb = (b.0.as_str(), b.1, b.2.as_slice(), b.3, b.4, b.5.as_str());
        type K6 = (&'static str, u8, &'static [u8], i64, [u8; 2], &'static str);
        same_order::<K6>(ra.cmp(&rb), &ra, &rb);
        let back = <(String, u8, Vec<u8>, i64, [u8; 2], String)>::from_bytes(&enc::<K6>(&ra));
        prop_assert_eq!(back, Ok(a.clone()));
    }

    #[test]
    fn nested_tuples_encode_like_flat_ones(a in (text(), any::<u32>(), bytes())) {
        let flat = enc::<(&str, u32, &[u8])>(&(a.0.as_str(), a.1, a.2.as_slice()));
        let pair = enc::<((&str, u32), &[u8])>(&((a.0.as_str(), a.1), a.2.as_slice()));
        prop_assert_eq!(flat, pair);
    }

    #[test]
    fn decoding_garbage_never_panics(g in prop::collection::vec(any::<u8>(), 0..24)) {
        no_panic::<u8>(&g);
        no_panic::<i64>(&g);
        no_panic::<u128>(&g);
        no_panic::<f32>(&g);
        no_panic::<bool>(&g);
        no_panic::<()>(&g);
        no_panic::<[u8; 4]>(&g);
        no_panic::<&str>(&g);
        no_panic::<String>(&g);
        no_panic::<&[u8]>(&g);
        no_panic::<Vec<u8>>(&g);
        no_panic::<Option<&str>>(&g);
        no_panic::<(&str, &str)>(&g);
        no_panic::<(String, u16, &[u8])>(&g);
        no_panic::<(bool, Option<String>, i8, Vec<u8>)>(&g);
        no_panic::<((&str, u8), (Vec<u8>, String))>(&g);
        no_panic::<(u8, u8, u8, u8, u8, &str)>(&g);
    }
}

#[test]
fn a_shorter_first_element_sorts_first_whatever_follows() {
    let a = enc::<(&str, &str)>(&("a", "b"));
    let b = enc::<(&str, &str)>(&("ab", ""));
    let c = enc::<(&str, &str)>(&("a\0", ""));
    assert!(a < c && c < b, "(a, b) < (a\\0, ) < (ab, )");
    // A NUL inside text is escaped, so it cannot end the element early.
    assert_eq!(nested::<&str>(&"a\0"), b"a\0\xff\0\x01");
}

#[test]
fn whole_keys_of_bytes_and_text_are_the_bytes_unchanged() {
    assert_eq!(enc::<&[u8]>(&&b"\0\xff"[..]), b"\0\xff");
    assert_eq!(enc::<&str>(&"é"), "é".as_bytes());
    assert_eq!(enc::<(u8, &str)>(&(1, "x\0")), b"\x01x\0");
}

#[test]
fn wrong_lengths_and_invalid_text_are_errors() {
    assert!(u64::from_bytes(&[0; 7]).is_err());
    assert!(u64::from_bytes(&[0; 9]).is_err());
    assert!(bool::from_bytes(&[2]).is_err());
    assert!(<()>::from_bytes(&[0]).is_err());
    assert!(<&str>::from_bytes(&[0xc3]).is_err());
    assert!(<(&str, u8)>::from_bytes(b"abc").is_err(), "no terminator");
    assert!(
        <(&str, u8)>::from_bytes(b"a\0\x02\x05").is_err(),
        "bad escape"
    );
    assert!(
        <(u32, u8)>::from_bytes(&[0, 0, 1]).is_err(),
        "element cut short"
    );
    assert!(
        Option::<u8>::from_bytes(&[0, 1]).is_err(),
        "None with bytes after"
    );
    assert!(Option::<u8>::from_bytes(&[2, 1]).is_err(), "unknown tag");
}
