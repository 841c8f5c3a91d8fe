//! RESP on a lane's own connection ([`crate::direct`]): where one answer ends, the common
//! answers read without redis-rs's general parser, and a call's words written without a
//! `redis::Cmd`.
//!
//! An acquire and a release of a plain lane each answer one integer; redis-rs's parser (a
//! general, resumable `combine` parser) spent about as much on reading those answers as the
//! replica spends on the rest of the call's reply path (docs/performance.md, session 12).
//!
//! # Invariants
//!
//! - [`write_array`] and [`write_bulk`] write exactly what redis-rs packs for the same words:
//!   `*<n>\r\n` then `$<len>\r\n<bytes>\r\n` per word (tested with the protocol's calls).
//! - [`parse_common`] answers either exactly the `Value` redis-rs's parser answers for the same
//!   bytes, or `None` (then the caller asks redis-rs): it reads integers in canonical form, bulk
//!   strings and arrays of them, at most [`MAX_DEPTH`] deep, nothing else (simple strings,
//!   errors, nulls and RESP3 types all go to redis-rs).

use redis::Value;

use crate::error::CoordError;

/// How deep [`parse_common`] reads nested arrays (the functions' answers are one level deep).
pub const MAX_DEPTH: usize = 4;

/// Where one RESP value starting at `at` ends (the index after it), `Ok(None)` while it is
/// incomplete. RESP2 and RESP3 types.
pub fn value_end(buf: &[u8], at: usize) -> Result<Option<usize>, CoordError> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some(line) = buf
        .get(at + 1..)
        .and_then(|rest| rest.windows(2).position(|w| w == b"\r\n"))
    else {
        return Ok(None);
    };
    let header = &buf[at + 1..at + 1 + line];
    let next = at + 1 + line + 2;
    let number = || -> Result<i64, CoordError> {
        std::str::from_utf8(header)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| CoordError::Protocol("RESP length".into()))
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(Some(next)),
        b'$' | b'!' | b'=' => {
            let n = number()?;
            if n < 0 {
                return Ok(Some(next));
            }
            let end = next + usize::try_from(n).unwrap_or(usize::MAX / 2) + 2;
            Ok((buf.len() >= end).then_some(end))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = number()?;
            if n < 0 {
                return Ok(Some(next));
            }
            let count = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut end = next;
            for _ in 0..count {
                match value_end(buf, end)? {
                    Some(e) => end = e,
                    None => return Ok(None),
                }
            }
            Ok(Some(end))
        }
        other => Err(CoordError::Protocol(format!("RESP type {other}"))),
    }
}

/// The value of `bytes`, one whole answer (as [`value_end`] framed it), when it is an integer,
/// a bulk string or an array of those; `None` for anything else (ask redis-rs).
pub fn parse_common(bytes: &[u8]) -> Option<Value> {
    let (value, end) = parse_at(bytes, 0, 0)?;
    (end == bytes.len()).then_some(value)
}

/// The line starting at `at` (without its `\r\n`) and the index after it.
fn line(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = bytes.get(at..)?;
    let n = rest.iter().position(|&b| b == b'\r')?;
    (rest.get(n + 1) == Some(&b'\n')).then(|| (&rest[..n], at + n + 2))
}

/// A canonical decimal (`-` then 1 to 18 digits): always in `i64`, read as `str::parse` reads it.
fn canonical(digits: &[u8]) -> Option<i64> {
    let (negative, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude = digits
        .iter()
        .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
    Some(if negative { -magnitude } else { magnitude })
}

fn parse_at(bytes: &[u8], at: usize, depth: usize) -> Option<(Value, usize)> {
    let kind = *bytes.get(at)?;
    let (header, next) = line(bytes, at + 1)?;
    match kind {
        b':' => Some((Value::Int(canonical(header)?), next)),
        b'$' => {
            let len = usize::try_from(canonical(header)?).ok()?;
            let data = bytes.get(next..next.checked_add(len)?)?;
            let end = next + len;
            (bytes.get(end..end + 2)? == b"\r\n")
                .then(|| (Value::BulkString(data.to_vec()), end + 2))
        }
        b'*' if depth < MAX_DEPTH => {
            let count = usize::try_from(canonical(header)?).ok()?;
            // Never more items than bytes left (a corrupt count allocates nothing).
            if count > bytes.len() - next {
                return None;
            }
            let mut items = Vec::with_capacity(count);
            let mut end = next;
            for _ in 0..count {
                let (item, after) = parse_at(bytes, end, depth + 1)?;
                items.push(item);
                end = after;
            }
            Some((Value::Array(items), end))
        }
        _ => None,
    }
}

/// Appends the header of a command of `words` words.
pub fn write_array(out: &mut Vec<u8>, words: usize) {
    out.push(b'*');
    write_decimal(out, words);
    out.extend_from_slice(b"\r\n");
}

/// Appends one word.
pub fn write_bulk(out: &mut Vec<u8>, word: &[u8]) {
    out.push(b'$');
    write_decimal(out, word.len());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(word);
    out.extend_from_slice(b"\r\n");
}

/// Appends one word that is a count (as redis-rs writes a `usize` argument: its decimal).
pub fn write_bulk_count(out: &mut Vec<u8>, n: usize) {
    let mut digits = [0u8; 20];
    let text = decimal(&mut digits, n as u64);
    write_bulk(out, text.as_bytes());
}

fn write_decimal(out: &mut Vec<u8>, n: usize) {
    let mut digits = [0u8; 20];
    out.extend_from_slice(decimal(&mut digits, n as u64).as_bytes());
}

/// `n` in decimal, in the tail of `digits` (what `n.to_string()` writes).
pub fn decimal(digits: &mut [u8; 20], n: u64) -> &str {
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    // ASCII digits only.
    std::str::from_utf8(&digits[at..]).unwrap_or("0")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_resp_value_is_complete_only_with_all_its_bytes() {
        let whole = b"*3\r\n:17\r\n$5\r\nhello\r\n*2\r\n+OK\r\n-ERR x\r\n";
        for cut in 0..whole.len() {
            assert_eq!(value_end(&whole[..cut], 0).unwrap(), None, "cut at {cut}");
        }
        assert_eq!(value_end(whole, 0).unwrap(), Some(whole.len()));
        assert_eq!(value_end(b"$-1\r\n", 0).unwrap(), Some(5));
        assert_eq!(value_end(b"*0\r\n", 0).unwrap(), Some(4));
        assert!(value_end(b"?x\r\n", 0).is_err());
    }

    #[test]
    fn the_functions_answers_are_read_as_redis_rs_reads_them() {
        let answers: [&[u8]; 12] = [
            b":1733112000123\r\n",
            b":-1\r\n",
            b":0\r\n",
            b"*5\r\n$5\r\ndefer\r\n$11\r\nconcurrency\r\n:2\r\n:-1\r\n:1733112000123\r\n",
            b"*2\r\n:1733112000123\r\n:0\r\n",
            b"*3\r\n:1733112000123\r\n:1733112001623\r\n$1\r\nh\r\n",
            b"*0\r\n",
            b"$0\r\n\r\n",
            b"$4\r\na\r\nb\r\n",
            b"*2\r\n*1\r\n:5\r\n$2\r\nxy\r\n",
            b":9223372036854775807\r\n",
            b":-9223372036854775808\r\n",
        ];
        for bytes in answers {
            let expected = redis::parse_redis_value(bytes).unwrap();
            match parse_common(bytes) {
                Some(value) => assert_eq!(value, expected, "{:?}", String::from_utf8_lossy(bytes)),
                // Only the 19-digit extremes go to redis-rs.
                None => assert!(bytes.len() > 20, "{:?}", String::from_utf8_lossy(bytes)),
            }
        }
        // Left to redis-rs: simple strings (`+OK` is `Okay`), errors, nulls, RESP3, non-canonical
        // numbers, trailing bytes.
        let others: [&[u8]; 9] = [
            b"+OK\r\n",
            b"+c\r\n",
            b"-ERR Function not found\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"_\r\n",
            b": 5\r\n",
            b":+5\r\n",
            b":5\r\n:6\r\n",
        ];
        for bytes in others {
            assert_eq!(
                parse_common(bytes),
                None,
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    /// A value of the kinds `parse_common` reads, and its RESP.
    fn common() -> impl Strategy<Value = Vec<u8>> {
        let leaf = prop_oneof![
            any::<i64>().prop_map(|i| format!(":{i}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..12).prop_map(|bytes| {
                let mut out = format!("${}\r\n", bytes.len()).into_bytes();
                out.extend(bytes);
                out.extend(b"\r\n");
                out
            }),
        ];
        leaf.prop_recursive(5, 32, 6, |inner| {
            proptest::collection::vec(inner, 0..6).prop_map(|items| {
                let mut out = format!("*{}\r\n", items.len()).into_bytes();
                for item in items {
                    out.extend(item);
                }
                out
            })
        })
    }

    proptest! {
        #[test]
        fn decimal_writes_what_to_string_writes(n in any::<u64>()) {
            let mut digits = [0u8; 20];
            prop_assert_eq!(decimal(&mut digits, n), n.to_string());
        }

        /// Whatever `parse_common` reads, it reads as redis-rs does; what it leaves, redis-rs
        /// reads instead (so nothing is misread): over random answers and random cuts and
        /// corruptions of them.
        #[test]
        fn parse_common_answers_what_redis_rs_answers_or_nothing(
            bytes in common(),
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let whole = redis::parse_redis_value(&bytes).unwrap();
            if let Some(value) = parse_common(&bytes) {
                prop_assert_eq!(value, whole);
            }
            let cut = &bytes[..cut.index(bytes.len())];
            if let Some(value) = parse_common(cut) {
                prop_assert_eq!(Some(value), redis::parse_redis_value(cut).ok());
            }
            let mut corrupt = bytes.clone();
            corrupt[flip.index(bytes.len())] = byte;
            if let Some(value) = parse_common(&corrupt) {
                prop_assert_eq!(Some(value), redis::parse_redis_value(&corrupt).ok());
            }
        }
    }
}
