//! Reading `--json` outputs in the tests: serde_json, plus the two checks a test needs that
//! `serde_json::Value` does not make: a repeated key is an error (Value keeps the last), and a
//! missing key fails the test (`value["key"]` is `null`).

use std::collections::HashSet;
use std::fmt;

use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Parse `text` as one JSON value; invalid JSON or a key repeated in an object is an error.
pub fn parse(text: &str) -> Result<Value, String> {
    serde_json::from_str::<NoRepeatedKeys>(text).map_err(|e| e.to_string())?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// Accessors that fail the test with the value shown when it does not have the shape the
/// test expects.
pub trait Get {
    /// The value of `key`; panics if this is not an object or has no such key.
    fn field(&self, key: &str) -> &Value;
    /// Whether this is an object with `key`.
    fn has(&self, key: &str) -> bool;
    /// A number, as f64.
    fn num(&self) -> f64;
    /// A number written as an unsigned integer (no fraction, no exponent).
    fn u64(&self) -> u64;
    /// A string.
    fn str(&self) -> &str;
    /// An array.
    fn arr(&self) -> &[Value];
}

impl Get for Value {
    fn field(&self, key: &str) -> &Value {
        match self {
            Value::Object(m) => m
                .get(key)
                .unwrap_or_else(|| panic!("no key {key:?} in {self}")),
            _ => panic!("not an object: {self}"),
        }
    }
    fn has(&self, key: &str) -> bool {
        matches!(self, Value::Object(m) if m.contains_key(key))
    }
    fn num(&self) -> f64 {
        self.as_f64()
            .unwrap_or_else(|| panic!("not a number: {self}"))
    }
    fn u64(&self) -> u64 {
        self.as_u64()
            .unwrap_or_else(|| panic!("not an unsigned integer: {self}"))
    }
    fn str(&self) -> &str {
        self.as_str()
            .unwrap_or_else(|| panic!("not a string: {self}"))
    }
    fn arr(&self) -> &[Value] {
        self.as_array()
            .unwrap_or_else(|| panic!("not an array: {self}"))
    }
}

/// Any JSON value whose objects have no key twice.
struct NoRepeatedKeys;

impl<'de> Deserialize<'de> for NoRepeatedKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoRepeatedKeys)
    }
}

impl<'de> Visitor<'de> for NoRepeatedKeys {
    type Value = NoRepeatedKeys;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: Error>(self) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_bool<E: Error>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_u64<E: Error>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_i64<E: Error>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_f64<E: Error>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_str<E: Error>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Self, A::Error> {
        while items.next_element::<NoRepeatedKeys>()?.is_some() {}
        Ok(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<Self, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = fields.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(A::Error::custom(format!("duplicate key {key:?}")));
            }
            fields.next_value::<NoRepeatedKeys>()?;
        }
        Ok(self)
    }
}

#[test]
fn parser_accepts_and_rejects() {
    let v = parse(r#"{"a":[1,2.5,-3e2],"b":null,"c":"x\"\u0001","d":true}"#).unwrap();
    assert_eq!(v.field("a").arr().len(), 3);
    assert_eq!(v.field("c").str(), "x\"\u{1}");
    for bad in [
        "{",
        "{\"a\":}",
        "[1,]",
        "{\"a\":1}x",
        "\"\n\"",
        "nul",
        "{\"a\":1,\"a\":2}",
        "[{\"b\":{\"a\":1,\"a\":1}}]",
    ] {
        assert!(parse(bad).is_err(), "{bad:?} parsed");
    }
}
