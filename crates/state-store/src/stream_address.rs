//! How Kinesis requests name the stream: by name, or by ARN.
//!
//! - A name is resolved by Kinesis in the caller's own account and region.
//! - An ARN names a stream of any account, which is how a stream shared by
//!   another account's resource policy is read (Kinesis Data Streams
//!   developer guide, "Share access using resource-based policies").
//!
//! The group's state is keyed by the stream's name either way, so a group
//! that moves from the name to the ARN of the same stream keeps its state.
//! [`ForStream`] puts whichever the address has on a request.

use crate::error::{Result, StateError};
use crate::names::StreamName;
use std::fmt;

/// The ARN of a Kinesis data stream,
/// `arn:<partition>:kinesis:<region>:<account>:stream/<name>`, validated
/// against the pattern the Kinesis API documents for `StreamARN`
/// (`arn:aws.*:kinesis:.*:\d{12}:.*stream/\S+`, at most 2,048 characters).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamArn {
    text: String,
    region: std::ops::Range<usize>,
    account: std::ops::Range<usize>,
    name: StreamName,
}

const FIELD: &str = "stream ARN";
const MAX_ARN: usize = 2048;

impl StreamArn {
    /// Validates `text` as a Kinesis stream ARN.
    pub fn new(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            StateError::validation(
                FIELD,
                format!("{text:?}: {why}; expected arn:<partition>:kinesis:<region>:<12-digit account>:stream/<name>"),
            )
        };
        if text.len() > MAX_ARN {
            return Err(bad("longer than 2048 characters"));
        }
        let mut parts = text.splitn(6, ':');
        let (Some("arn"), Some(partition), Some(service), Some(region), Some(account), Some(rest)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad("not an ARN"));
        };
        if !partition.starts_with("aws") {
            return Err(bad("the partition is not aws, aws-cn or aws-us-gov"));
        }
        if service != "kinesis" {
            return Err(bad("not a Kinesis ARN"));
        }
        let region_ok = !region.is_empty()
            && region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !region_ok {
            return Err(bad("no region"));
        }
        if account.len() != 12 || !account.chars().all(|c| c.is_ascii_digit()) {
            return Err(bad("the account is not 12 digits"));
        }
        let Some(name) = rest.strip_prefix("stream/") else {
            return Err(bad(
                "not a stream (a consumer's ARN names its stream first)",
            ));
        };
        if name.contains('/') {
            return Err(bad(
                "not a stream's ARN (a consumer's ARN goes on after the name)",
            ));
        }
        let name = StreamName::new(name)?;
        let region_start = "arn:".len() + partition.len() + ":kinesis:".len();
        let account_start = region_start + region.len() + 1;
        Ok(StreamArn {
            text: text.to_owned(),
            region: region_start..region_start + region.len(),
            account: account_start..account_start + account.len(),
            name,
        })
    }

    /// The ARN as a string.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The region the stream is in.
    pub fn region(&self) -> &str {
        &self.text[self.region.clone()]
    }

    /// The account that owns the stream.
    pub fn account(&self) -> &str {
        &self.text[self.account.clone()]
    }

    /// The stream's name.
    pub fn name(&self) -> &StreamName {
        &self.name
    }
}

impl fmt::Display for StreamArn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A Kinesis stream as requests name it: its name always (the state is keyed
/// by it), and its ARN when it was given one (a stream of another account).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamAddress {
    name: StreamName,
    arn: Option<StreamArn>,
}

impl StreamAddress {
    /// A stream named by `text`: an ARN when it starts with `arn:`, else a
    /// name. Either is validated.
    pub fn parse(text: &str) -> Result<Self> {
        if text.starts_with("arn:") {
            let arn = StreamArn::new(text)?;
            Ok(StreamAddress {
                name: arn.name().clone(),
                arn: Some(arn),
            })
        } else {
            Ok(StreamAddress {
                name: StreamName::new(text)?,
                arn: None,
            })
        }
    }

    /// The stream's name.
    pub fn name(&self) -> &StreamName {
        &self.name
    }

    /// The stream's ARN, when it was named by one.
    pub fn arn(&self) -> Option<&StreamArn> {
        self.arn.as_ref()
    }
}

impl From<StreamName> for StreamAddress {
    fn from(name: StreamName) -> Self {
        StreamAddress { name, arn: None }
    }
}

impl From<StreamArn> for StreamAddress {
    fn from(arn: StreamArn) -> Self {
        StreamAddress {
            name: arn.name().clone(),
            arn: Some(arn),
        }
    }
}

impl fmt::Display for StreamAddress {
    /// The ARN when there is one, else the name: what the user gave.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.arn {
            Some(arn) => arn.fmt(f),
            None => self.name.fmt(f),
        }
    }
}

/// A Kinesis request that names a stream by `StreamName` or `StreamARN`
/// (AWS accepts one of the two, not both).
pub trait ForStream {
    /// The request naming `stream` by its ARN when it has one, else by name.
    fn for_stream(self, stream: &StreamAddress) -> Self;
}

macro_rules! for_stream {
    ($($builder:ty),* $(,)?) => {
        $(impl ForStream for $builder {
            fn for_stream(self, stream: &StreamAddress) -> Self {
                match stream.arn() {
                    Some(arn) => self.stream_arn(arn.as_str()),
                    None => self.stream_name(stream.name().as_str()),
                }
            }
        })*
    };
}

use aws_sdk_kinesis::operation as op;
for_stream!(
    op::describe_stream_summary::builders::DescribeStreamSummaryFluentBuilder,
    op::list_shards::builders::ListShardsFluentBuilder,
    op::get_shard_iterator::builders::GetShardIteratorFluentBuilder,
    op::put_record::builders::PutRecordFluentBuilder,
    op::put_records::builders::PutRecordsFluentBuilder,
);

/// GetRecords names no stream (its iterator does), but takes the ARN, which
/// routes the request to the owning account's endpoint as the other reads are.
impl ForStream for op::get_records::builders::GetRecordsFluentBuilder {
    fn for_stream(self, stream: &StreamAddress) -> Self {
        self.set_stream_arn(stream.arn().map(|a| a.as_str().to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARN: &str = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders";

    #[test]
    fn a_stream_arn_gives_its_parts() {
        let arn = StreamArn::new(ARN).unwrap();
        assert_eq!(arn.region(), "eu-west-1");
        assert_eq!(arn.account(), "123456789012");
        assert_eq!(arn.name().as_str(), "orders");
        assert_eq!(arn.to_string(), ARN);
        let gov =
            StreamArn::new("arn:aws-us-gov:kinesis:us-gov-west-1:000000000000:stream/a.b-c_d")
                .unwrap();
        assert_eq!(gov.region(), "us-gov-west-1");
        assert_eq!(gov.name().as_str(), "a.b-c_d");
    }

    #[test]
    fn an_address_is_a_name_or_an_arn() {
        let by_name = StreamAddress::parse("orders").unwrap();
        assert_eq!(by_name.name().as_str(), "orders");
        assert!(by_name.arn().is_none());
        assert_eq!(by_name.to_string(), "orders");
        let by_arn = StreamAddress::parse(ARN).unwrap();
        assert_eq!(by_arn.name(), by_name.name());
        assert_eq!(by_arn.arn().unwrap().as_str(), ARN);
        assert_eq!(by_arn.to_string(), ARN);
    }

    #[test]
    fn malformed_arns_are_refused_with_the_reason() {
        for (text, why) in [
            ("arn:aws:kinesis:eu-west-1:123456789012", "not an ARN"),
            (
                "arn:aws:sqs:eu-west-1:123456789012:stream/orders",
                "not a Kinesis ARN",
            ),
            (
                "arn:gcp:kinesis:eu-west-1:123456789012:stream/orders",
                "partition",
            ),
            ("arn:aws:kinesis::123456789012:stream/orders", "no region"),
            ("arn:aws:kinesis:eu-west-1:1234:stream/orders", "12 digits"),
            (
                "arn:aws:kinesis:eu-west-1:12345678901x:stream/orders",
                "12 digits",
            ),
            (
                "arn:aws:kinesis:eu-west-1:123456789012:table/orders",
                "not a stream",
            ),
            (
                "arn:aws:kinesis:eu-west-1:123456789012:stream/orders/consumer/c:1",
                "not a stream's ARN",
            ),
            (
                "arn:aws:kinesis:eu-west-1:123456789012:stream/",
                "must not be empty",
            ),
            ("arn:aws:kinesis:eu-west-1:123456789012:stream/a#b", "'#'"),
        ] {
            let err = StreamAddress::parse(text).unwrap_err();
            assert!(
                matches!(err, StateError::Validation { .. }) && err.to_string().contains(why),
                "{text}: {err}"
            );
        }
        let long = format!("{ARN}{}", "x".repeat(MAX_ARN));
        assert!(StreamArn::new(&long)
            .unwrap_err()
            .to_string()
            .contains("2048"));
    }
}
