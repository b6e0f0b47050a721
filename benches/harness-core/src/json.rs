//! How results.json is written: serde_json's pretty layout (two-space indent) with what the
//! file has always looked like, so that runs stay comparable line by line:
//! - an object or array that is an element of an array is written on one line,
//!   `{"engine": "larch", "setup": ...}`: one line per row of `rows` and `details`;
//! - numbers have at most six decimals, and whole ones no fraction (`10`, not `10.0`);
//! - U+0008 and U+000C are escaped as `\u0008` and `\u000c` (serde_json: `\b`, `\f`).
//!
//! NaN and infinities are `null` (serde_json's rule).

use std::io::{self, Write};

use serde::{Serialize, Serializer};
use serde_json::ser::{CharEscape, CompactFormatter, Formatter, PrettyFormatter};

/// `value` as results.json text, ending in a newline.
pub fn pretty(value: &impl Serialize) -> String {
    let mut out = Vec::new();
    let layout = Layout {
        pretty: PrettyFormatter::new(),
        open: Vec::new(),
        one_line_from: None,
    };
    value
        .serialize(&mut serde_json::Serializer::with_formatter(
            &mut out, layout,
        ))
        .expect("serializing to memory cannot fail: every map key is a string");
    out.push(b'\n');
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// A number as results.json writes it: integers without a fraction, others with up to 6
/// decimals (trailing zeros dropped). Only called with finite numbers.
fn number(x: f64) -> String {
    if x == x.trunc() && x.abs() < 9.0e15 {
        format!("{}", x as i64)
    } else {
        let s = format!("{x:.6}");
        let s = s.trim_end_matches('0');
        s.trim_end_matches('.').to_string()
    }
}

/// (key, value) pairs written as a JSON object, in their order (for keys known only at run
/// time, such as engine labels and the settings each engine describes).
#[derive(Clone, Debug, Default)]
pub struct Pairs<K, V>(pub Vec<(K, V)>);

impl<K: Serialize, V: Serialize> Serialize for Pairs<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// [`PrettyFormatter`] with the one-line elements, the numbers and the escapes above.
struct Layout {
    pretty: PrettyFormatter<'static>,
    /// For each array or object being written, whether it is an array.
    open: Vec<bool>,
    /// While writing an element on one line: the depth of the array it is an element of.
    one_line_from: Option<usize>,
}

impl Layout {
    fn one_line(&self) -> bool {
        self.one_line_from.is_some()
    }

    /// An array or object begins: on one line if it is an element of an array.
    fn open(&mut self, is_array: bool) {
        if self.one_line_from.is_none() && self.open.last() == Some(&true) {
            self.one_line_from = Some(self.open.len());
        }
        self.open.push(is_array);
    }

    /// An array or object ends; whether it was written on one line.
    fn close(&mut self) -> bool {
        self.open.pop();
        let one_line = self.one_line();
        if self.one_line_from == Some(self.open.len()) {
            self.one_line_from = None;
        }
        one_line
    }
}

/// Before an element or a key written on one line: `, ` between them.
fn separate<W: ?Sized + Write>(w: &mut W, first: bool) -> io::Result<()> {
    if first {
        Ok(())
    } else {
        w.write_all(b", ")
    }
}

impl Formatter for Layout {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(true);
        if self.one_line() {
            w.write_all(b"[")
        } else {
            self.pretty.begin_array(w)
        }
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.close() {
            w.write_all(b"]")
        } else {
            self.pretty.end_array(w)
        }
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if self.one_line() {
            separate(w, first)
        } else {
            self.pretty.begin_array_value(w, first)
        }
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.one_line() {
            Ok(())
        } else {
            self.pretty.end_array_value(w)
        }
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(false);
        if self.one_line() {
            w.write_all(b"{")
        } else {
            self.pretty.begin_object(w)
        }
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.close() {
            w.write_all(b"}")
        } else {
            self.pretty.end_object(w)
        }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if self.one_line() {
            separate(w, first)
        } else {
            self.pretty.begin_object_key(w, first)
        }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.one_line() {
            Ok(())
        } else {
            self.pretty.end_object_value(w)
        }
    }

    fn write_f64<W: ?Sized + Write>(&mut self, w: &mut W, x: f64) -> io::Result<()> {
        w.write_all(number(x).as_bytes())
    }

    fn write_char_escape<W: ?Sized + Write>(&mut self, w: &mut W, e: CharEscape) -> io::Result<()> {
        match e {
            CharEscape::Backspace => w.write_all(b"\\u0008"),
            CharEscape::FormFeed => w.write_all(b"\\u000c"),
            e => CompactFormatter.write_char_escape(w, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escapes_strings() {
        assert_eq!(
            pretty(&"a\"b\\c\nd\u{1}\u{8}\u{c}"),
            "\"a\\\"b\\\\c\\nd\\u0001\\u0008\\u000c\"\n"
        );
        assert_eq!(pretty(&"µs"), "\"µs\"\n");
    }

    #[test]
    fn prints_numbers() {
        let p = |x: f64| pretty(&x).trim_end().to_string();
        assert_eq!(p(3.0), "3");
        assert_eq!(p(1234567.0), "1234567");
        assert_eq!(p(0.25), "0.25");
        assert_eq!(p(1.0 / 3.0), "0.333333");
        assert_eq!(p(f64::NAN), "null");
        assert_eq!(p(f64::INFINITY), "null");
        assert_eq!(p(-2.5), "-2.5");
        assert_eq!(pretty(&u64::MAX), "18446744073709551615\n");
    }

    #[test]
    fn prints_nested_values() {
        // json! keeps key order here: the crate enables serde_json's preserve_order.
        let v = json!({
            "a": 1,
            "b": [{"x": "y", "z": [1, 2]}, [3, {}], null],
            "c": {},
            "d": null,
            "e": Pairs(vec![("k2", 2), ("k1", 1)]),
            "f": [],
        });
        assert_eq!(
            pretty(&v),
            "{\n  \"a\": 1,\n  \"b\": [\n    {\"x\": \"y\", \"z\": [1, 2]},\n    [3, {}],\n    null\n  ],\n  \"c\": {},\n  \"d\": null,\n  \"e\": {\n    \"k2\": 2,\n    \"k1\": 1\n  },\n  \"f\": []\n}\n"
        );
    }
}
