//! What a record's error says in the logs: the values a decoder quoted from
//! the payload are left out (a payload may hold personal data, and log
//! lines outlive it), the kind of error and the names of the fields and
//! types it is about are kept. The full text stays in the record's failure
//! and its parked copy; `ProcessingOptions::log_values` puts it in the logs
//! too.
//!
//! - A string value, quoted (`invalid type: string "ann@example.com"`),
//!   becomes `"…"`; a value in backticks (`invalid value: integer `-1``,
//!   `unknown variant `x``) becomes `` `…` ``.
//! - A name in backticks after `field` (`missing field `id``), or in what
//!   was expected (`expected one of `a`, `b``), is kept.

use crate::processing::outcome::RecordError;
use std::borrow::Cow;
use std::fmt;

/// `error` as a log line shows it: values left out unless `values`.
pub(crate) struct LoggedError<'a> {
    pub(crate) error: &'a RecordError,
    pub(crate) values: bool,
}

impl fmt::Display for LoggedError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.error.to_string();
        if self.values {
            return f.write_str(&text);
        }
        match self.error {
            // Texts a decoder wrote about the payload.
            RecordError::Payload { .. }
            | RecordError::Malformed { .. }
            | RecordError::Aggregate { .. } => f.write_str(&without_values(&text)),
            _ => f.write_str(&text),
        }
    }
}

/// `text` with the values it quotes left out (see the module docs).
pub(crate) fn without_values(text: &str) -> Cow<'_, str> {
    if !text.contains(['"', '`']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['"', '`']) {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let quote = from.as_bytes()[0] as char;
        let Some(len) = quoted_len(&from[1..], quote) else {
            // An unclosed quote: the rest could be a value.
            out.push(quote);
            out.push('…');
            return Cow::Owned(out);
        };
        let inner = &from[1..1 + len];
        let keep = quote == '`' && names_a_field_or_type(&out);
        out.push(quote);
        out.push_str(if keep { inner } else { "…" });
        out.push(quote);
        rest = &from[len + 2..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The length of a quoted text up to its closing `quote` (a `\"` inside a
/// double-quoted one does not close it).
fn quoted_len(text: &str, quote: char) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            '\\' if quote == '"' && !escaped => escaped = true,
            c if c == quote && !escaped => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

/// Whether a backtick quote that follows `before` names a field or what
/// was expected, not a value.
fn names_a_field_or_type(before: &str) -> bool {
    before.ends_with("field ") || before.contains("expected")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages as serde_json and serde write them (its `de::Error`
    /// texts), and as shardkeeper's own decoders write them.
    #[test]
    fn values_are_left_out_and_names_kept() {
        for (text, logged) in [
            (
                r#"invalid type: string "ann@example.com", expected u32 at line 1 column 28"#,
                r#"invalid type: string "…", expected u32 at line 1 column 28"#,
            ),
            (
                "invalid value: integer `-1`, expected u32 at line 1 column 9",
                "invalid value: integer `…`, expected u32 at line 1 column 9",
            ),
            (
                "missing field `id` at line 1 column 2",
                "missing field `id` at line 1 column 2",
            ),
            (
                "unknown variant `Ann Smith`, expected `paid` or `new`",
                "unknown variant `…`, expected `paid` or `new`",
            ),
            (
                r#"approximateArrivalTimestamp "a \"quoted\" secret" is not a number"#,
                r#"approximateArrivalTimestamp "…" is not a number"#,
            ),
            (r#"N "12ab" is not a number"#, r#"N "…" is not a number"#),
            (
                "expected value at line 1 column 1",
                "expected value at line 1 column 1",
            ),
            (r#"broken "tail"#, r#"broken "…"#),
        ] {
            assert_eq!(without_values(text), logged, "{text}");
        }
    }

    #[test]
    fn only_decoder_texts_are_redacted_and_values_can_be_asked_for() {
        let payload = RecordError::payload("1", r#"invalid type: string "ann", expected u32"#);
        let logged = |values| {
            LoggedError {
                error: &payload,
                values,
            }
            .to_string()
        };
        assert!(!logged(false).contains("ann"), "{}", logged(false));
        assert!(logged(true).contains("\"ann\""));
        // The handler's own text is the handler's to choose.
        let handler = RecordError::Handler {
            sequence_number: "1".into(),
            sub_sequence: 0,
            error: r#"customer "ann" unknown"#.into(),
        };
        let shown = LoggedError {
            error: &handler,
            values: false,
        }
        .to_string();
        assert!(shown.contains("\"ann\""));
    }
}
