//! JSON checked as it is scanned: an event's records found in the pass
//! that checks the whole event is valid JSON, as `serde_json` checks the
//! values it skips ([`event_records`]). Text that is not valid JSON, or
//! not of the shape expected, makes it answer `None`, so the caller falls
//! back to serde and its errors.

use super::skip_ws;
#[cfg(feature = "esm")]
use super::{object, Spans};

/// One record of an event read by [`event_records`]: its text, the spans
/// of its fields, and those of the fields of its inner object (if any).
#[cfg(feature = "esm")]
pub(crate) type RecordSpans<'a, const N: usize, const M: usize> =
    (&'a str, Spans<'a, N>, Option<Spans<'a, M>>);

/// The records of an event, the JSON object `text` whose field `Records`
/// is a list of objects: each record's text, the fields `names` of it and
/// the fields `inner_names` of its object under `inner`, as
/// [`nested_fields`] finds them. Unlike [`nested_fields`], the whole text
/// is checked to be valid JSON in the same pass (its UTF-8 is the
/// caller's to check). `None` if it is not valid JSON, not of that shape
/// (no `Records`, or twice), or not read plainly (a key with an escape, a
/// record naming one of those fields twice): serde then reads the event
/// and says what is wrong.
#[cfg(feature = "esm")]
pub(crate) fn event_records<'a, const N: usize, const M: usize>(
    text: &'a str,
    names: [&str; N],
    inner: &str,
    inner_names: [&str; M],
) -> Option<Vec<RecordSpans<'a, N, M>>> {
    let b = text.as_bytes();
    let mut records = None;
    let mut plain = true;
    let (_, end) = object::<true, 0>(text, skip_ws(b, 0), [], |key, at| {
        if key != "Records" {
            return None;
        }
        plain &= records.is_none();
        let (list, end) = record_list(text, at, names, inner, inner_names)?;
        records = Some(list);
        Some(end)
    })?;
    (plain && skip_ws(b, end) == b.len()).then_some(())?;
    records
}

/// The records of the list that starts at `i`, and its end.
#[cfg(feature = "esm")]
fn record_list<'a, const N: usize, const M: usize>(
    text: &'a str,
    mut i: usize,
    names: [&str; N],
    inner: &str,
    inner_names: [&str; M],
) -> Option<(Vec<RecordSpans<'a, N, M>>, usize)> {
    let b = text.as_bytes();
    let mut records = Vec::new();
    if b.get(i) != Some(&b'[') {
        return None;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b']') {
        return Some((records, i + 1));
    }
    loop {
        let start = i;
        let mut nested = None;
        let mut twice = false;
        let (found, end) = object::<true, N>(text, i, names, |key, at| {
            if M == 0 || key != inner {
                return None;
            }
            twice |= nested.is_some();
            let (found, end) = object::<true, M>(text, at, inner_names, |_, _| None)?;
            nested = Some(found);
            Some(end)
        })?;
        if twice {
            return None;
        }
        records.push((&text[start..end], found, nested));
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b']') => return Some((records, i + 1)),
            _ => return None,
        }
    }
}

/// The end of the string that starts at `i`, checked as `serde_json`
/// checks a string it skips: no control characters, and only JSON's
/// escapes (a `\u` escape is four hex digits; what they encode is not
/// checked).
pub(super) fn valid_string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match *b.get(j)? {
            b'"' => return Some(j + 1),
            b'\\' => match *b.get(j + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => j += 2,
                b'u' => {
                    let hex = b.get(j + 2..j + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    j += 6;
                }
                _ => return None,
            },
            0..=0x1f => return None,
            _ => j += 1,
        }
    }
}

/// The end of the number that starts at `i`, checked against JSON's
/// grammar: an optional minus, an integer without leading zeros, an
/// optional fraction, an optional exponent.
fn valid_number_end(b: &[u8], mut i: usize) -> Option<usize> {
    let digits = |b: &[u8], mut i: usize| {
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i > start).then_some(i)
    };
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    i = match b.get(i)? {
        b'0' => i + 1,
        b'1'..=b'9' => digits(b, i)?,
        _ => return None,
    };
    if b.get(i) == Some(&b'.') {
        i = digits(b, i + 1)?;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        i = digits(b, i)?;
    }
    Some(i)
}

/// The end of the value that starts at `i`, checked to be valid JSON (as
/// `serde_json` checks a value it skips). Nesting is kept on a list, not
/// on the call stack, so any depth is read.
pub(super) fn valid_value_end(b: &[u8], mut i: usize) -> Option<usize> {
    // The closing bracket of each container open around `i`.
    let mut open: Vec<u8> = Vec::new();
    loop {
        // A value starts at `i`.
        i = match *b.get(i)? {
            b'"' => valid_string_end(b, i)?,
            b'-' | b'0'..=b'9' => valid_number_end(b, i)?,
            b't' => literal_end(b, i, b"true")?,
            b'f' => literal_end(b, i, b"false")?,
            b'n' => literal_end(b, i, b"null")?,
            bracket @ (b'{' | b'[') => {
                let close = if bracket == b'{' { b'}' } else { b']' };
                let first = skip_ws(b, i + 1);
                if b.get(first) == Some(&close) {
                    first + 1
                } else {
                    open.push(close);
                    i = if close == b'}' {
                        valid_key_end(b, first)?
                    } else {
                        first
                    };
                    continue;
                }
            }
            _ => return None,
        };
        // After a value: a separator and the next value, or the end of
        // its container(s).
        loop {
            let Some(&close) = open.last() else {
                return Some(i);
            };
            i = skip_ws(b, i);
            match *b.get(i)? {
                b',' => {
                    let next = skip_ws(b, i + 1);
                    i = if close == b'}' {
                        valid_key_end(b, next)?
                    } else {
                        next
                    };
                    break;
                }
                c if c == close => {
                    open.pop();
                    i += 1;
                }
                _ => return None,
            }
        }
    }
}

/// After the key of an object's entry that starts at `i` and its colon:
/// where the value starts.
fn valid_key_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let end = skip_ws(b, valid_string_end(b, i)?);
    (b.get(end) == Some(&b':')).then(|| skip_ws(b, end + 1))
}

/// The end of `literal` if the text at `i` is it.
fn literal_end(b: &[u8], i: usize, literal: &[u8]) -> Option<usize> {
    let end = i + literal.len();
    (b.get(i..end) == Some(literal)).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// True if serde_json reads `text` as one JSON value.
    fn serde_accepts(text: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    }

    /// The checked skip accepts a value exactly where serde_json does.
    #[test]
    fn a_value_is_valid_exactly_where_serde_json_reads_it() {
        let cases = [
            r#"{"a": [1, -0.5e+3, 2E7, 0, true, false, null, "x\"\\\/\b\f\n\r\t\u00e9"], "b": {}}"#,
            r#"[[], {}, [[{"k": [{"l": {}}]}]]]"#,
            "\"\u{e9}\u{1F600}\"",
            r#""\uD800""#,
            "-0",
            "01",
            "1.",
            ".5",
            "1e",
            "1e+",
            "-",
            "+1",
            "[1,]",
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{a: 1}"#,
            "[1 2]",
            "tru",
            "nul",
            "\"\t\"",
            r#""\x""#,
            r#""\u12G4""#,
            r#""\u12""#,
            "[",
            "]",
            r#"{"a": [}"#,
            "\"unterminated",
        ];
        for text in cases {
            let checked = valid_value_end(text.as_bytes(), 0) == Some(text.len());
            assert_eq!(checked, serde_accepts(text), "{text}");
        }
        // Deep nesting is read without recursion.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(valid_value_end(deep.as_bytes(), 0), Some(deep.len()));
    }

    const EVENT: &str = r#"{"Records": [
        {"eventID": "1", "dynamodb": {"Keys": {"k": {"S": "a"}}, "SequenceNumber": "10",
         "NewImage": {"n": {"N": "-1.5e3"}, "l": {"L": [{"BOOL": true}, {"NULL": true}]}}},
         "eventSourceARN": "arn"},
        {"eventID": "2", "dynamodb": {"SequenceNumber": "11"}, "userIdentity": null}
    ], "other": [1, {"x": "y"}]}"#;

    #[test]
    fn an_event_s_records_and_their_fields_are_found() {
        let records =
            event_records(EVENT, ["eventSourceARN"], "dynamodb", ["SequenceNumber"]).unwrap();
        assert_eq!(records.len(), 2);
        assert!(records[0].0.starts_with(r#"{"eventID": "1""#));
        assert!(records[0].0.ends_with(r#""eventSourceARN": "arn"}"#));
        assert_eq!(records[0].1, [Some(r#""arn""#)]);
        assert_eq!(records[0].2, Some([Some(r#""10""#)]));
        assert_eq!(records[1].1, [None]);
        assert_eq!(records[1].2, Some([Some(r#""11""#)]));
        // An inner object read not plainly is left to serde, record by record.
        for inner in [
            r#"{"Records": [{"dynamodb": {"SequenceNumber": "1", "SequenceNumber": "2"}}]}"#,
            r#"{"Records": [{"dynamodb": {"Sequence\u004eumber": "1"}}]}"#,
        ] {
            let records = event_records(inner, ["a"], "dynamodb", ["SequenceNumber"]).unwrap();
            assert_eq!((records.len(), records[0].2), (1, None), "{inner}");
        }
        let empty = event_records(r#"{"Records": []}"#, ["a"], "b", ["c"]).unwrap();
        assert!(empty.is_empty());
        for not_plain in [
            r#"{"Records": [], "Records": []}"#,
            r#"{"records": []}"#,
            r#"{"Records": [1]}"#,
            r#"{"Records": null}"#,
            r#"[[]]"#,
            r#"{"Records": [{"dynamodb": {}, "dynamodb": {}}]}"#,
            r#"{"Records": [{"dynamo\u0064b": {"SequenceNumber": "1"}}]}"#,
        ] {
            let found = event_records(not_plain, ["a"], "dynamodb", ["SequenceNumber"]);
            assert!(found.is_none(), "{not_plain}");
        }
    }

    /// Every one-byte change of an event that the scanner still reads is
    /// an event serde_json reads too: the scanner never lets through text
    /// that is not JSON.
    #[test]
    fn an_event_it_reads_is_always_valid_json() {
        let bytes = EVENT.as_bytes();
        let mut read = 0;
        for at in 0..bytes.len() {
            for change in [
                None,
                Some(b'"'),
                Some(b','),
                Some(b'}'),
                Some(b']'),
                Some(b'1'),
                Some(b'\\'),
                Some(0x01),
                Some(b'e'),
            ] {
                let mut changed = bytes.to_vec();
                match change {
                    None => {
                        changed.remove(at);
                    }
                    Some(c) => changed[at] = c,
                }
                let Ok(text) = std::str::from_utf8(&changed) else {
                    continue;
                };
                if event_records(text, ["eventSourceARN"], "dynamodb", ["SequenceNumber"]).is_some()
                {
                    read += 1;
                    assert!(serde_accepts(text), "{text}");
                }
            }
        }
        assert!(read > 100, "{read}");
    }
}
