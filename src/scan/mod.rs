//! A scanner of JSON text for the few fields a processor reads: it finds
//! an object's fields and the spans of their values without parsing the
//! values (strings are skipped with `memchr`). [`fields`] and
//! [`nested_fields`] do not validate: they are for text already validated
//! (an event the processor has parsed). An event's records are found in
//! the pass that checks its JSON (`scan_checked`), with the same object
//! reader. Anything a scan does not expect (an escaped key, a repeated
//! field, a value of another type, text that ends early) makes it answer
//! `None`, so the caller falls back to serde and its errors.

mod checked;
#[cfg(feature = "esm")]
pub(crate) use checked::event_records;

use checked::{valid_string_end, valid_value_end};
use memchr::memchr2;
use std::borrow::Cow;

/// The values of some fields of an object, each a span of its text (`None`
/// if absent), in the order they were asked for.
pub(crate) type Spans<'a, const N: usize> = [Option<&'a str>; N];

/// The values of the fields `names` of the JSON object `text` (each a span
/// of `text`, `None` if absent), or `None` if `text` is not an object this
/// scanner reads plainly: an escaped key, a field named twice.
pub(crate) fn fields<'a, const N: usize>(text: &'a str, names: [&str; N]) -> Option<Spans<'a, N>> {
    let (found, _) = nested_fields(text, names, "", [])?;
    Some(found)
}

/// As [`fields`], and in the same pass the fields `inner_names` of the
/// object under the field `inner` (`None` if there is no such field).
pub(crate) fn nested_fields<'a, const N: usize, const M: usize>(
    text: &'a str,
    names: [&str; N],
    inner: &str,
    inner_names: [&str; M],
) -> Option<(Spans<'a, N>, Option<Spans<'a, M>>)> {
    nested_fields_reading(text, names, inner, inner_names, |_, _| None)
}

/// As [`nested_fields`]; `read(key, at)` may read a field's value of the
/// inner object itself (where the scanner finds it, instead of skipping
/// it) and say where it ends (`None`: the scanner skips it).
pub(crate) fn nested_fields_reading<'a, const N: usize, const M: usize>(
    text: &'a str,
    names: [&str; N],
    inner: &str,
    inner_names: [&str; M],
    mut read: impl FnMut(&str, usize) -> Option<usize>,
) -> Option<(Spans<'a, N>, Option<Spans<'a, M>>)> {
    let b = text.as_bytes();
    let mut nested = None;
    let mut twice = false;
    let (found, end) = object::<false, N>(text, skip_ws(b, 0), names, |key, i| {
        if M == 0 || key != inner {
            return None;
        }
        twice |= nested.is_some();
        let (found, end) = object::<false, M>(text, i, inner_names, &mut read)?;
        nested = Some(found);
        Some(end)
    })?;
    (!twice && skip_ws(b, end) == b.len()).then_some((found, nested))
}

/// The fields `names` of the object that starts at `i`, and its end;
/// `nested(key, at)` may read a field's value itself and say where it ends.
/// With `VALID`, the keys and the values skipped are checked to be valid
/// JSON (what `nested` reads is its own to check).
pub(super) fn object<'a, const VALID: bool, const N: usize>(
    text: &'a str,
    mut i: usize,
    names: [&str; N],
    mut nested: impl FnMut(&str, usize) -> Option<usize>,
) -> Option<(Spans<'a, N>, usize)> {
    let b = text.as_bytes();
    let mut found: Spans<'a, N> = [None; N];
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Some((found, i + 1));
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = if VALID {
            valid_string_end(b, i)?
        } else {
            string_end(b, i)?
        };
        let key = &text[i + 1..key_end - 1];
        if key.contains('\\') {
            return None;
        }
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        let end = match nested(key, i) {
            Some(end) => end,
            None if VALID => valid_value_end(b, i)?,
            None => value_end(b, i)?,
        };
        if let Some(slot) = names.iter().position(|n| *n == key) {
            if found[slot].is_some() {
                return None;
            }
            found[slot] = Some(&text[i..end]);
        }
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return Some((found, i + 1)),
            _ => return None,
        }
    }
}

/// A string value's text (unescaped if it has escapes); `None` if `value`
/// is not a string.
pub(crate) fn string(value: &str) -> Option<Cow<'_, str>> {
    let inner = value.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(value).ok().map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

/// An optional string: absent or `null` is `Some(None)`; `None` if it is
/// something else.
pub(crate) fn optional_string(value: Option<&str>) -> Option<Option<Cow<'_, str>>> {
    match value {
        None | Some("null") => Some(None),
        Some(v) => string(v).map(Some),
    }
}

/// An optional number: absent or `null` is `Some(None)`; `None` if it is
/// something else.
#[cfg(feature = "esm")]
pub(crate) fn optional_number(value: Option<&str>) -> Option<Option<f64>> {
    match value {
        None | Some("null") => Some(None),
        Some(v) if v.starts_with(|c: char| c == '-' || c.is_ascii_digit()) => {
            v.parse().ok().map(Some)
        }
        Some(_) => None,
    }
}

/// Where the text after `i` has no more JSON whitespace.
pub(crate) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = b.get(i) {
        i += 1;
    }
    i
}

/// The end (one past the closing quote) of the string that starts at `i`:
/// the first bytes one by one (most strings of an event are short), the
/// rest with `memchr`.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    let short = b.len().min(j + 32);
    while j < short {
        match b[j] {
            b'"' => return Some(j + 1),
            b'\\' => j += 2,
            _ => j += 1,
        }
    }
    loop {
        let k = j + memchr2(b'"', b'\\', b.get(j..)?)?;
        if b[k] == b'\\' {
            j = k + 2;
        } else {
            return Some(k + 1);
        }
    }
}

/// The end of the value that starts at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while let Some(c) = b.get(j) {
                if matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                    break;
                }
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_fields_and_their_spans() {
        let text = r#" { "a" : "x\"y", "skip": {"k": ["}", {"z": "\\"}]}, "n": -1.5e3, "o": {"b": [1, 2]}, "nil": null } "#;
        let [a, n, o, nil, missing] = fields(text, ["a", "n", "o", "nil", "missing"]).unwrap();
        assert_eq!(a, Some(r#""x\"y""#));
        assert_eq!(string(a.unwrap()).unwrap(), "x\"y");
        assert_eq!(optional_number(n), Some(Some(-1500.0)));
        assert_eq!(o, Some(r#"{"b": [1, 2]}"#));
        assert_eq!(optional_string(nil), Some(None));
        assert_eq!(missing, None);
        assert_eq!(fields("{}", ["a"]), Some([None]));
        let (outer, inner) =
            nested_fields(r#"{"x": 1, "in": {"y": "2", "z": 3}}"#, ["x"], "in", ["y"]).unwrap();
        assert_eq!((outer, inner), ([Some("1")], Some([Some(r#""2""#)])));
    }

    /// Whatever it does not read plainly, it leaves to serde.
    #[test]
    fn answers_none_for_what_it_does_not_expect() {
        for text in [
            r#"{"a": 1, "a": 2}"#,
            r#"{"\u0061": 1}"#,
            r#"{"a": 1"#,
            r#"{"a" 1}"#,
            r#"{"a": 1} x"#,
            r#"["a"]"#,
            r#"{"a": "unterminated}"#,
            "",
        ] {
            assert_eq!(fields(text, ["a"]), None, "{text}");
        }
        let twice = r#"{"in": {"y": 1}, "in": {"y": 2}}"#;
        assert_eq!(nested_fields(twice, [], "in", ["y"]), None);
        assert_eq!(
            nested_fields(r#"{"in": [1]}"#, [], "in", ["y"]),
            Some(([], None))
        );
        assert_eq!(string("1"), None);
        assert_eq!(optional_number(Some("\"1\"")), None);
        assert_eq!(optional_string(Some("1")), None);
    }
}
