//! How `--json` outputs are written: serde_json's compact form, one object on one line, with
//! two spellings kept from before serde so that the output stays byte for byte what scripts
//! have been reading: floats as Rust's `Display` writes them (`0`, not `0.0`; never an
//! exponent), and U+0008 and U+000C as `\u0008` and `\u000c` (serde_json: `\b`, `\f`).
//! NaN and infinities are `null` (serde_json's rule, and the CLI's before it).

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::{CharEscape, CompactFormatter, Formatter, Serializer};

/// serde_json's [`CompactFormatter`] with the two spellings above.
struct Spelling;

impl Formatter for Spelling {
    fn write_f64<W: ?Sized + Write>(&mut self, w: &mut W, x: f64) -> io::Result<()> {
        // Only finite values get here.
        write!(w, "{x}")
    }

    fn write_char_escape<W: ?Sized + Write>(&mut self, w: &mut W, e: CharEscape) -> io::Result<()> {
        match e {
            CharEscape::Backspace => w.write_all(b"\\u0008"),
            CharEscape::FormFeed => w.write_all(b"\\u000c"),
            e => CompactFormatter.write_char_escape(w, e),
        }
    }
}

/// Write `value` as one line of JSON.
pub fn write_line(out: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    value.serialize(&mut Serializer::with_formatter(&mut *out, Spelling))?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Sample {
        s: &'static str,
        n: u64,
        f: f64,
        whole: f64,
        tiny: f64,
        nan: f64,
        none: Option<u64>,
        a: Vec<&'static str>,
    }

    #[test]
    fn writes_the_spellings_scripts_have_been_reading() {
        let v = Sample {
            s: "a\"b\\c\nd\u{1}\u{8}\u{c}\té",
            n: 7,
            f: 0.5,
            whole: 3.0,
            tiny: 1e-7,
            nan: f64::NAN,
            none: None,
            a: vec!["x", "y"],
        };
        let mut out = Vec::new();
        write_line(&mut out, &v).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            concat!(
                r#"{"s":"a\"b\\c\nd\u0001\u0008\u000c\té","n":7,"f":0.5,"whole":3,"#,
                r#""tiny":0.0000001,"nan":null,"none":null,"a":["x","y"]}"#,
                "\n"
            )
        );
    }
}
