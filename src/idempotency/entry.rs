//! An idempotency entry as read: absent, claimed in progress, or completed.

use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

/// The entry's state.
pub(crate) const ATTR_STATUS: &str = "status";
/// Until when (epoch milliseconds) an in-progress claim holds.
pub(crate) const ATTR_UNTIL: &str = "in_progress_until";
/// The token of the claim or completion that wrote the entry.
pub(crate) const ATTR_CLAIM: &str = "claim";
/// The hash of the validated part of the payload.
pub(crate) const ATTR_HASH: &str = "payload_hash";
/// The handler's result, JSON.
pub(crate) const ATTR_RESULT: &str = "result";
/// The sequence number of the record that completed the entry.
pub(crate) const ATTR_SEQUENCE: &str = "sequence";
/// `status` of a claim.
pub(crate) const IN_PROGRESS: &str = "INPROGRESS";
/// `status` of a completion.
pub(crate) const COMPLETED: &str = "COMPLETED";

/// An entry as read at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// None stored, or one expired, or a claim whose time ran out: free.
    Absent,
    /// Claimed, and the claim still holds.
    InProgress {
        /// The claim's token.
        token: String,
        /// Until when the claim holds (epoch milliseconds).
        until_ms: u64,
    },
    /// Completed.
    Completed {
        /// The token that completed it.
        token: String,
        /// The hash of the validated part of the payload, if validated.
        hash: Option<String>,
        /// The handler's result, JSON.
        result: String,
    },
}

impl Entry {
    /// The entry `item` is at `now_ms`.
    pub(crate) fn of(item: &HashMap<String, AttributeValue>, now_ms: u64) -> Entry {
        let s = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let n = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<u64>().ok())
        };
        let expires_s = n(crate::state::TTL_ATTRIBUTE).unwrap_or(u64::MAX);
        if expires_s < now_ms / 1000 {
            return Entry::Absent;
        }
        let token = s(ATTR_CLAIM).unwrap_or_default();
        match s(ATTR_STATUS).as_deref() {
            Some(COMPLETED) => Entry::Completed {
                token,
                hash: s(ATTR_HASH),
                result: s(ATTR_RESULT).unwrap_or_else(|| "null".to_owned()),
            },
            Some(IN_PROGRESS) => match n(ATTR_UNTIL) {
                Some(until_ms) if until_ms >= now_ms => Entry::InProgress { token, until_ms },
                _ => Entry::Absent,
            },
            _ => Entry::Absent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn n(v: u64) -> AttributeValue {
        AttributeValue::N(v.to_string())
    }

    #[test]
    fn an_expired_entry_or_a_claim_past_its_time_is_free() {
        let now = 10_000_000;
        let completed = item(&[
            (ATTR_STATUS, s(COMPLETED)),
            ("expires_ttl", n(now / 1000 - 1)),
        ]);
        assert_eq!(Entry::of(&completed, now), Entry::Absent);
        let claim = item(&[
            (ATTR_STATUS, s(IN_PROGRESS)),
            (ATTR_CLAIM, s("t")),
            ("expires_ttl", n(now / 1000 + 60)),
            (ATTR_UNTIL, n(now - 1)),
        ]);
        assert_eq!(Entry::of(&claim, now), Entry::Absent);
        let live = item(&[
            (ATTR_STATUS, s(IN_PROGRESS)),
            (ATTR_CLAIM, s("t")),
            ("expires_ttl", n(now / 1000 + 60)),
            (ATTR_UNTIL, n(now + 5)),
        ]);
        assert_eq!(
            Entry::of(&live, now),
            Entry::InProgress {
                token: "t".into(),
                until_ms: now + 5
            }
        );
    }

    #[test]
    fn a_completion_reads_back_its_token_hash_and_result() {
        let done = item(&[
            (ATTR_STATUS, s(COMPLETED)),
            (ATTR_CLAIM, s("t")),
            (ATTR_HASH, s("h")),
            (ATTR_RESULT, s("{\"a\":1}")),
            ("expires_ttl", n(u64::MAX / 2000)),
        ]);
        assert_eq!(
            Entry::of(&done, 5),
            Entry::Completed {
                token: "t".into(),
                hash: Some("h".into()),
                result: "{\"a\":1}".into()
            }
        );
    }
}
