//! Validated names: consumer groups, streams, consumers, shards, enhanced fan-out consumers.
//!
//! Keys are built by joining names with `#`, so no name may contain `#` (or any
//! character outside the set AWS itself allows for stream, shard and consumer
//! names). Validation happens once, when a name is made.

use crate::error::{Result, StateError};
use std::fmt;

const MAX_LEN: usize = 256;

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':')
}

fn validate(field: &'static str, value: &str, max: usize) -> Result<()> {
    if value.is_empty() {
        return Err(StateError::validation(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(StateError::validation(
            field,
            format!(
                "{value:?} is {} characters long, at most {max} allowed",
                value.len()
            ),
        ));
    }
    if let Some(bad) = value.chars().find(|c| !is_name_char(*c)) {
        return Err(StateError::validation(
            field,
            format!("{value:?} contains {bad:?}; only ASCII letters, digits, '_', '.', '-' and ':' are allowed"),
        ));
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $field:literal, $max:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }

        impl $name {
            /// Validates and wraps a name.
            pub fn new(value: impl Into<String>) -> Result<Self> {
                let value = value.into();
                validate($field, &value, $max)?;
                Ok(Self(value))
            }

            /// The name as a string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = StateError;
            fn try_from(value: &str) -> Result<Self> {
                Self::new(value)
            }
        }

        impl TryFrom<String> for $name {
            type Error = StateError;
            fn try_from(value: String) -> Result<Self> {
                Self::new(value)
            }
        }
    };
}

name_type!(
    /// The name of a consumer group: consumers in one group share leases and checkpoints.
    GroupName, "consumer group", 128
);
name_type!(
    /// The name of a stream (a Kinesis stream name, or a logical name for a DynamoDB stream).
    StreamName, "stream name", 128
);
name_type!(
    /// The unique id of one consumer instance (for example a Lambda log stream or a host + pid).
    ConsumerId, "consumer id", MAX_LEN
);
name_type!(
    /// A shard id, as Kinesis or DynamoDB Streams gives it.
    ShardId, "shard id", MAX_LEN
);
name_type!(
    /// The name of an enhanced fan-out consumer registered on the stream.
    EfoName, "enhanced fan-out consumer name", 128
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_aws_style_names() {
        assert!(StreamName::new("orders-stream.v2_1").is_ok());
        assert!(ShardId::new("shardId-000000000001").is_ok());
        assert!(ShardId::new("shardId-00000001536019433907-5c3f9b48").is_ok());
        assert!(ConsumerId::new("2026/11/21/[$LATEST]abc:123").is_err());
        assert!(ConsumerId::new("host-1:4242").is_ok());
    }

    #[test]
    fn rejects_separators_empty_and_long_names() {
        for bad in ["a#b", "a|b", "", "with space", "slash/y", "ü"] {
            let err = GroupName::new(bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    StateError::Validation {
                        field: "consumer group",
                        ..
                    }
                ),
                "{bad:?}: {err}"
            );
        }
        let err = StreamName::new("x".repeat(129)).unwrap_err();
        assert!(err.to_string().contains("at most 128"), "{err}");
    }
}
