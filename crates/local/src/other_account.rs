//! A stream another account shares, as Kinesis shows it to the caller.
//!
//! Kinesis looks a `StreamName` up in the caller's own account and region.
//! A stream that another account shares through a resource policy is
//! reached by its `StreamARN` only (Kinesis Data Streams developer guide,
//! "Share access using resource-based policies"). So in this mode:
//!
//! - a request naming the stream by its name is answered
//!   `ResourceNotFoundException`, as Kinesis answers it;
//! - a request naming it by its ARN is forwarded, with the ARN written as
//!   the name for the operations where local servers read only the name
//!   (what the server is asked is the same either way).

use crate::LocalError;
use std::sync::atomic::{AtomicU64, Ordering};

/// Operations that name a stream by `StreamName` or `StreamARN` and that
/// local servers may read by name only.
const NAMED_BY_EITHER: &[&str] = &[
    "DescribeStream",
    "DescribeStreamSummary",
    "ListShards",
    "GetShardIterator",
    "PutRecord",
    "PutRecords",
];

/// What becomes of one Kinesis request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Addressed {
    /// Forwarded; with a new body when the ARN was rewritten.
    Forward(Option<Vec<u8>>),
    /// Answered `ResourceNotFoundException` with this message.
    NotFound(String),
}

/// The shared stream and what the proxy saw of it.
#[derive(Debug)]
pub(crate) struct OtherAccount {
    arn: String,
    name: String,
    by_arn: AtomicU64,
    by_name: AtomicU64,
}

impl OtherAccount {
    /// The stream `arn` (`arn:...:kinesis:<region>:<account>:stream/<name>`).
    pub(crate) fn new(arn: &str) -> Result<Self, LocalError> {
        let name = arn
            .split_once(":stream/")
            .map(|(_, name)| name)
            .filter(|name| !name.is_empty() && !name.contains('/'))
            .ok_or_else(|| LocalError::Start(format!("{arn:?} is not a stream ARN")))?;
        Ok(OtherAccount {
            arn: arn.to_owned(),
            name: name.to_owned(),
            by_arn: AtomicU64::new(0),
            by_name: AtomicU64::new(0),
        })
    }

    /// What becomes of the request to `target` (its `x-amz-target`) with
    /// `body`.
    pub(crate) fn address(&self, target: &str, body: &[u8]) -> Addressed {
        let operation = target.rsplit('.').next().unwrap_or(target);
        let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_slice(body) else {
            return Addressed::Forward(None);
        };
        if fields.get("StreamName").and_then(|v| v.as_str()) == Some(self.name.as_str()) {
            self.by_name.fetch_add(1, Ordering::SeqCst);
            return Addressed::NotFound(format!(
                "Stream {} under the caller's account not found.",
                self.name
            ));
        }
        if fields.get("StreamARN").and_then(|v| v.as_str()) != Some(self.arn.as_str()) {
            return Addressed::Forward(None);
        }
        self.by_arn.fetch_add(1, Ordering::SeqCst);
        if NAMED_BY_EITHER.contains(&operation) {
            fields.remove("StreamARN");
            fields.insert("StreamName".to_owned(), self.name.clone().into());
        } else if operation == "GetRecords" {
            // The iterator names the stream; the ARN only routes the request.
            fields.remove("StreamARN");
        } else {
            return Addressed::Forward(None);
        }
        let body = serde_json::to_vec(&fields).expect("a JSON object serializes");
        Addressed::Forward(Some(body))
    }

    /// Requests that named the stream by ARN and by name so far.
    pub(crate) fn counts(&self) -> SharedStreamCounts {
        SharedStreamCounts {
            by_arn: self.by_arn.load(Ordering::SeqCst),
            by_name: self.by_name.load(Ordering::SeqCst),
        }
    }
}

/// What a proxy in front of a shared stream saw (see
/// [`crate::FaultProxy::share_from_other_account`]), beside its
/// [`crate::FaultCounts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedStreamCounts {
    /// Requests that named the stream by its ARN (forwarded).
    pub by_arn: u64,
    /// Requests that named it by its name (answered not found).
    pub by_name: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARN: &str = "arn:aws:kinesis:us-east-1:000000000000:stream/shared";

    fn body(json: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json).unwrap()
    }

    #[test]
    fn by_name_is_not_found_and_by_arn_reaches_the_stream() {
        let other = OtherAccount::new(ARN).unwrap();
        let by_name = body(serde_json::json!({"StreamName": "shared"}));
        assert!(matches!(
            other.address("Kinesis_20131202.ListShards", &by_name),
            Addressed::NotFound(_)
        ));
        let by_arn = body(serde_json::json!({"StreamARN": ARN, "ShardId": "s"}));
        let Addressed::Forward(Some(rewritten)) =
            other.address("Kinesis_20131202.GetShardIterator", &by_arn)
        else {
            panic!("rewritten");
        };
        let rewritten: serde_json::Value = serde_json::from_slice(&rewritten).unwrap();
        assert_eq!(
            rewritten,
            serde_json::json!({"StreamName": "shared", "ShardId": "s"})
        );
        let get = body(serde_json::json!({"StreamARN": ARN, "ShardIterator": "it"}));
        let Addressed::Forward(Some(get)) = other.address("Kinesis_20131202.GetRecords", &get)
        else {
            panic!("rewritten");
        };
        assert_eq!(get, body(serde_json::json!({"ShardIterator": "it"})));
        let register = body(serde_json::json!({"StreamARN": ARN, "ConsumerName": "c"}));
        assert_eq!(
            other.address("Kinesis_20131202.RegisterStreamConsumer", &register),
            Addressed::Forward(None)
        );
        let unrelated = body(serde_json::json!({"StreamName": "mine"}));
        assert_eq!(
            other.address("Kinesis_20131202.ListShards", &unrelated),
            Addressed::Forward(None)
        );
        assert_eq!(
            other.counts(),
            SharedStreamCounts {
                by_arn: 3,
                by_name: 1
            }
        );
    }
}
