//! A small JSON writer (the harness has no serde): values built as a tree, printed with
//! two-space indentation. Non-finite numbers print as `null`.

use std::fmt::Write;

/// A JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number (integers up to 2^53 print exactly).
    Num(f64),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object, keys in insertion order.
    Obj(Vec<(String, Json)>),
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::Str(s.to_string())
    }
}
impl From<String> for Json {
    fn from(s: String) -> Json {
        Json::Str(s)
    }
}
impl From<f64> for Json {
    fn from(x: f64) -> Json {
        Json::Num(x)
    }
}
impl From<u64> for Json {
    fn from(x: u64) -> Json {
        Json::Num(x as f64)
    }
}
impl From<usize> for Json {
    fn from(x: usize) -> Json {
        Json::Num(x as f64)
    }
}
impl From<bool> for Json {
    fn from(b: bool) -> Json {
        Json::Bool(b)
    }
}
impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(o: Option<T>) -> Json {
        o.map_or(Json::Null, Into::into)
    }
}

/// Build an object from (key, value) pairs.
pub fn obj<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Json)>) -> Json {
    Json::Obj(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

/// A JSON string literal for `s`, quotes included.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A number as JSON: integers without a fraction, others with up to 6 significant
/// decimals, non-finite as `null`.
pub fn number(x: f64) -> String {
    if !x.is_finite() {
        "null".to_string()
    } else if x == x.trunc() && x.abs() < 9.0e15 {
        format!("{}", x as i64)
    } else {
        let s = format!("{x:.6}");
        let s = s.trim_end_matches('0');
        s.trim_end_matches('.').to_string()
    }
}

impl Json {
    /// Pretty-printed text.
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out.push('\n');
        out
    }

    fn write(&self, out: &mut String, indent: usize) {
        let pad = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Num(x) => out.push_str(&number(*x)),
            Json::Str(s) => out.push_str(&quote(s)),
            Json::Arr(items) if items.is_empty() => out.push_str("[]"),
            Json::Obj(items) if items.is_empty() => out.push_str("{}"),
            Json::Arr(items) => {
                // Arrays of scalars and of flat objects stay on one line each.
                out.push_str("[\n");
                for (i, v) in items.iter().enumerate() {
                    pad(out, indent + 2);
                    if v.is_flat() {
                        out.push_str(&v.compact());
                    } else {
                        v.write(out, indent + 2);
                    }
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                pad(out, indent);
                out.push(']');
            }
            Json::Obj(items) => {
                out.push_str("{\n");
                for (i, (k, v)) in items.iter().enumerate() {
                    pad(out, indent + 2);
                    out.push_str(&quote(k));
                    out.push_str(": ");
                    v.write(out, indent + 2);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                pad(out, indent);
                out.push('}');
            }
        }
    }

    /// Whether the value has no nested array or object.
    fn is_flat(&self) -> bool {
        match self {
            Json::Arr(v) => v.iter().all(|x| !matches!(x, Json::Arr(_) | Json::Obj(_))),
            Json::Obj(v) => v
                .iter()
                .all(|(_, x)| !matches!(x, Json::Arr(_) | Json::Obj(_))),
            _ => true,
        }
    }

    /// One-line text.
    pub fn compact(&self) -> String {
        match self {
            Json::Arr(items) => {
                let parts: Vec<String> = items.iter().map(Json::compact).collect();
                format!("[{}]", parts.join(", "))
            }
            Json::Obj(items) => {
                let parts: Vec<String> = items
                    .iter()
                    .map(|(k, v)| format!("{}: {}", quote(k), v.compact()))
                    .collect();
                format!("{{{}}}", parts.join(", "))
            }
            other => {
                let mut s = String::new();
                other.write(&mut s, 0);
                s
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_strings() {
        assert_eq!(quote("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(quote("µs"), "\"µs\"");
    }

    #[test]
    fn prints_numbers() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(1234567.0), "1234567");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(1.0 / 3.0), "0.333333");
        assert_eq!(number(f64::NAN), "null");
        assert_eq!(number(f64::INFINITY), "null");
        assert_eq!(number(-2.5), "-2.5");
    }

    #[test]
    fn prints_nested_values() {
        let v = obj([
            ("a", Json::from(1u64)),
            (
                "b",
                Json::Arr(vec![obj([("x", Json::from("y"))]), Json::Null]),
            ),
            ("c", Json::Obj(vec![])),
            ("d", Json::from(None::<f64>)),
        ]);
        let text = v.pretty();
        assert_eq!(
            text,
            "{\n  \"a\": 1,\n  \"b\": [\n    {\"x\": \"y\"},\n    null\n  ],\n  \"c\": {},\n  \"d\": null\n}\n"
        );
    }
}
