//! Hex encoding for keys and values on the command line and in dump/load streams.
//!
//! Not the `hex` crate: its decode error names the bad character's 0-based position, reports
//! an odd length before a bad character (`6g7` would say "odd", not where the `g` is), and
//! shows a non-ASCII byte as the Latin-1 character of that value. `larch load` and `--hex`
//! name the character a user should fix, 1-based and as a byte value when not printable;
//! wrapping the crate to say that would be as long as this file.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Append the lowercase hex of `bytes` to `out` (dump writes millions of these, so no
/// per-record String).
pub fn encode_into(bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[(b >> 4) as usize]);
        out.push(DIGITS[(b & 15) as usize]);
    }
}

/// Lowercase hex of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len() * 2);
    encode_into(bytes, &mut out);
    // Only ASCII digits were pushed.
    String::from_utf8_lossy(&out).into_owned()
}

fn digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decode hex of either case. The error says which character is wrong, 1-based, so a user
/// can find it in a long line.
pub fn decode(text: &[u8]) -> Result<Vec<u8>, String> {
    if let Some(i) = text.iter().position(|&c| digit(c).is_none()) {
        let c = text[i];
        let shown = if c.is_ascii_graphic() {
            format!("{:?}", c as char)
        } else {
            format!("byte 0x{c:02x}")
        };
        return Err(format!("{shown} at character {} is not a hex digit", i + 1));
    }
    if text.len() % 2 != 0 {
        return Err(format!("odd number of hex digits ({})", text.len()));
    }
    Ok(text
        .chunks_exact(2)
        .map(|p| (digit(p[0]).unwrap_or(0) << 4) | digit(p[1]).unwrap_or(0))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let h = encode(&all);
        assert_eq!(h.len(), 512);
        assert_eq!(decode(h.as_bytes()).unwrap(), all);
        assert_eq!(decode(h.to_uppercase().as_bytes()).unwrap(), all);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(decode(b"abc").unwrap_err().contains("odd"));
        assert!(decode(b"zz").unwrap_err().contains("'z' at character 1"));
        assert!(decode(b"0\t").unwrap_err().contains("0x09 at character 2"));
        assert_eq!(decode(b"").unwrap(), Vec::<u8>::new());
    }
}
