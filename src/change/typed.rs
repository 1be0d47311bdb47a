//! Typed item changes of a DynamoDB stream, and the handler adapter that
//! decodes them. Every image is read by the one image decoder
//! (`image`): from the record's text (event source mappings),
//! or from the SDK's attribute values (the reader's records,
//! `Change::from_parts`), neither turned into the other first.

use crate::change::image::from_sdk_image;
use crate::change::keys::Keys;
use crate::processing::handler::{Decode, HandlerError, TypedHandler};
use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;

/// A typed item change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<T> {
    /// A new item. With the `KEYS_ONLY` and `OLD_IMAGE` view types the
    /// stream carries no new image: `new` is decoded from the item's keys
    /// (use a `T` whose other fields are optional).
    Insert {
        /// The item as written.
        new: T,
    },
    /// A changed item (`old` needs the `NEW_AND_OLD_IMAGES` or `OLD_IMAGE`
    /// view type; `new` is decoded from the keys as for `Insert` when the
    /// view type carries no new image).
    Modify {
        /// The item before, if the stream carries it.
        old: Option<T>,
        /// The item after.
        new: T,
    },
    /// A deleted item: its keys with every view type, the item before
    /// (`old`) with the `OLD_IMAGE` and `NEW_AND_OLD_IMAGES` view types.
    Remove {
        /// The item before, if the stream carries it.
        old: Option<T>,
        /// The deleted item's key attributes, which every stream record
        /// carries (empty only if the record has none).
        keys: Keys,
        /// True if DynamoDB's time to live removed it (the record's user
        /// identity is the service `dynamodb.amazonaws.com`), not a caller.
        expired: bool,
    },
}

/// One stream record's parts, as an event source mapping's event and the
/// DynamoDB Streams API both give them: what [`Change::from_parts`] decodes
/// (with images as the SDK's attribute values).
#[derive(Debug, Clone)]
pub struct ChangeParts<'a, I> {
    /// `INSERT`, `MODIFY` or `REMOVE`.
    pub event_name: &'a str,
    /// The record's sequence number (for errors).
    pub sequence_number: &'a str,
    /// The stream's view type (`KEYS_ONLY`, `NEW_IMAGE`, `OLD_IMAGE`,
    /// `NEW_AND_OLD_IMAGES`), if the record names it.
    pub view: Option<&'a str>,
    /// The item's key attributes (a removal's [`Keys`]; for an insert or
    /// modify, what the new item is decoded from when the view type
    /// carries no new image).
    pub keys: Option<I>,
    /// The item before the change.
    pub old: Option<I>,
    /// The item after the change.
    pub new: Option<I>,
    /// Removed by DynamoDB's time to live.
    pub expired: bool,
}

/// True for the user identity DynamoDB gives a deletion by time to live.
pub fn is_ttl_deletion(identity_type: &str, principal: &str) -> bool {
    identity_type == "Service" && principal == "dynamodb.amazonaws.com"
}

/// An image as the SDK holds it: attribute values by attribute name.
type SdkImage = HashMap<String, AttributeValue>;

/// Decodes one image (`which` is `old`, `new` or `keys`) into `T`, its
/// attribute values read by the decoder of [`from_image_json`], so that
/// there is one way to read a number (`serde_dynamo` would round one
/// beyond `f64`).
fn decode_image<T: DeserializeOwned>(
    image: &SdkImage,
    which: &str,
    seq: &str,
) -> Result<T, RecordError> {
    from_sdk_image(image).map_err(|e| RecordError::payload(seq, format!("{which} image: {e}")))
}

/// An image of an event source mapping's parsed record, as the SDK holds
/// it (`None` if empty: `aws_lambda_events` reads an absent image so).
fn sdk_image(item: &serde_dynamo::Item) -> Option<SdkImage> {
    (!item.is_empty()).then(|| item.clone().into())
}

impl<T: DeserializeOwned> Change<T> {
    /// Decodes an event source mapping's stream record, as
    /// `aws_lambda_events` parsed it, into a typed change: its images as the
    /// SDK's attribute values, read as [`Change::from_parts`] reads them.
    pub fn from_record(record: &EventRecord) -> Result<Self, RecordError> {
        let view = record
            .change
            .stream_view_type
            .as_ref()
            .map(|v| v.to_string());
        let expired = record
            .user_identity
            .as_ref()
            .is_some_and(|u| is_ttl_deletion(&u.type_, &u.principal_id));
        let keys = sdk_image(&record.change.keys);
        let old = sdk_image(&record.change.old_image);
        let new = sdk_image(&record.change.new_image);
        Change::from_parts(ChangeParts {
            event_name: &record.event_name,
            sequence_number: record.change.sequence_number.as_deref().unwrap_or(""),
            view: view.as_deref(),
            keys: keys.as_ref(),
            old: old.as_ref(),
            new: new.as_ref(),
            expired,
        })
    }

    /// The change a record makes, its images the SDK's attribute values
    /// decoded into `T` by the decoder [`Change::from_event_json`] reads
    /// text with (the same values: numbers are read exactly; nothing is
    /// written as text); an image that does not decode, or one the event
    /// needs and the stream's view type left out (and the keys cannot stand
    /// in for), is an error naming the record.
    pub fn from_parts(parts: ChangeParts<'_, &SdkImage>) -> Result<Self, RecordError> {
        decide(parts, decode_image, |item| {
            Keys::from_item(item.clone().into()).map_err(|e| e.to_string())
        })
    }
}

/// The change `parts` describe, each image decoded by `decode(image, which,
/// sequence number)`, a removal's keys read by `keys`.
pub(super) fn decide<T, I>(
    parts: ChangeParts<'_, I>,
    decode: impl Fn(I, &str, &str) -> Result<T, RecordError>,
    keys: impl FnOnce(I) -> Result<Keys, String>,
) -> Result<Change<T>, RecordError> {
    let seq = parts.sequence_number;
    let view = parts.view.unwrap_or("unknown");
    let mut record_keys = parts.keys;
    let old = parts.old.map(|i| decode(i, "old", seq)).transpose()?;
    let new = match parts.new {
        Some(i) => Some(decode(i, "new", seq)?),
        // The view type carries no new image: the keys stand in for it.
        None if matches!(view, "KEYS_ONLY" | "OLD_IMAGE") && parts.event_name != "REMOVE" => {
            match record_keys.take() {
                Some(keys) => Some(decode(keys, "new (from the keys)", seq)?),
                None => None,
            }
        }
        None => None,
    };
    let missing = |what: &str| {
        RecordError::payload(
            seq,
            format!(
                "{} has no {what} image (stream view type {view})",
                parts.event_name
            ),
        )
    };
    match parts.event_name {
        "INSERT" => Ok(Change::Insert {
            new: new.ok_or_else(|| missing("new"))?,
        }),
        "MODIFY" => Ok(Change::Modify {
            old,
            new: new.ok_or_else(|| missing("new"))?,
        }),
        "REMOVE" => Ok(Change::Remove {
            old,
            keys: match record_keys {
                Some(record_keys) => keys(record_keys)
                    .map_err(|e| RecordError::payload(seq, format!("keys: {e}")))?,
                None => Keys::default(),
            },
            expired: parts.expired,
        }),
        other => Err(RecordError::payload(
            seq,
            format!("unknown event name {other:?}"),
        )),
    }
}

/// Typed DynamoDB Streams changes: each record's images decoded straight
/// into `T`, from their DynamoDB JSON text ([`Change::from_event_json`]) or,
/// for a record the reader read, from its attribute values
/// ([`crate::processing::ChangeRecord::change`]).
pub struct Changes<T>(PhantomData<fn() -> T>);

impl<T: DeserializeOwned + Send + 'static> Decode for Changes<T> {
    type Value = Change<T>;

    fn decode(record: &StreamRecord) -> Result<Change<T>, RecordError> {
        if let Some(change) = &record.change {
            return change.change();
        }
        std::str::from_utf8(&record.data)
            .map_err(|e| RecordError::Malformed {
                index: 0,
                error: e.to_string(),
            })
            .and_then(Change::from_event_json)
    }
}

/// A handler of typed DynamoDB Streams changes (see [`changes`]).
pub type ChangeHandler<T, F> = TypedHandler<Changes<T>, F>;

/// Wraps `f(change, record)` into a record handler for DynamoDB Streams
/// batches: each record's images are decoded straight into `T`, from their
/// DynamoDB JSON text for an event source mapping
/// ([`Change::from_event_json`]), from the SDK's attribute values for the
/// reader ([`StreamRecord::change`]), with the same results; a record that
/// does not decode fails with an error naming its sequence number.
/// `record.partition_key` is the record's keys in DynamoDB JSON; `record.data`
/// the stream record's JSON (empty for the reader's records).
pub fn changes<T, F, Fut, E>(f: F) -> ChangeHandler<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Change<T>, StreamRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<HandlerError>,
{
    TypedHandler::new(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::{json, Value};

    fn record(event_name: &str, dynamodb: Value) -> Value {
        json!({
            "eventID": "1", "eventName": event_name, "eventVersion": "1.1",
            "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
            "dynamodb": dynamodb,
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x"
        })
    }

    /// `from_event_json` decodes what `from_record` decodes, from the text.
    #[test]
    fn a_record_decodes_from_its_text_as_from_its_attribute_values() {
        let image = |status: &str| json!({ "id": { "S": "o1" }, "status": { "S": status }, "n": { "N": "2" } });
        let keys = json!({ "id": { "S": "o1" } });
        let mut ttl = record(
            "REMOVE",
            json!({ "SequenceNumber": "3", "SizeBytes": 1, "StreamViewType": "NEW_AND_OLD_IMAGES", "Keys": keys, "OldImage": image("paid") }),
        );
        ttl["userIdentity"] = json!({ "type": "Service", "principalId": "dynamodb.amazonaws.com" });
        let cases = [
            record(
                "INSERT",
                json!({ "SequenceNumber": "1", "SizeBytes": 1, "StreamViewType": "NEW_AND_OLD_IMAGES", "Keys": keys, "NewImage": image("new") }),
            ),
            record(
                "MODIFY",
                json!({ "SequenceNumber": "2", "SizeBytes": 1, "StreamViewType": "NEW_AND_OLD_IMAGES", "Keys": keys, "OldImage": image("new"), "NewImage": image("paid") }),
            ),
            ttl,
            record(
                "INSERT",
                json!({ "SequenceNumber": "4", "SizeBytes": 1, "StreamViewType": "KEYS_ONLY", "Keys": keys }),
            ),
            record(
                "MODIFY",
                json!({ "SequenceNumber": "5", "SizeBytes": 1, "StreamViewType": "NEW_IMAGE", "Keys": keys, "NewImage": {} }),
            ),
            record(
                "UPSERT",
                json!({ "SequenceNumber": "6", "SizeBytes": 1, "Keys": keys, "NewImage": image("x") }),
            ),
            record(
                "INSERT",
                json!({ "SequenceNumber": "7", "SizeBytes": 1, "Keys": keys, "NewImage": { "n": { "S": "two" } } }),
            ),
        ];
        for case in cases {
            let text = case.to_string();
            let parsed: EventRecord = serde_json::from_str(&text).unwrap();
            let by_values = Change::<Value>::from_record(&parsed);
            assert_eq!(Change::<Value>::from_event_json(&text), by_values, "{text}");
        }
    }

    /// An item whose attributes are all required: its keys alone are not one.
    #[derive(Debug, Deserialize, PartialEq)]
    struct Order {
        id: String,
        at: String,
        status: String,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct OrderKey {
        id: String,
        at: i128,
    }

    /// A sort key of 38 digits, beyond u64 and f64.
    const AT: &str = "12345678901234567890123456789012345678";

    /// A removal of the item with keys `keys` from a stream of view type
    /// `view` (without an old image), built in each way a change is built:
    /// from the record's text, from its parsed record, from its parts.
    fn removals(view: &str, keys: Value) -> Vec<Result<Change<Order>, RecordError>> {
        let text = record(
            "REMOVE",
            json!({ "SequenceNumber": "8", "SizeBytes": 1, "StreamViewType": view, "Keys": keys }),
        )
        .to_string();
        let parsed: EventRecord = serde_json::from_str(&text).unwrap();
        let item: serde_dynamo::Item = serde_json::from_value(keys).unwrap();
        let item: SdkImage = item.into();
        vec![
            Change::from_event_json(&text),
            Change::from_record(&parsed),
            Change::from_parts(ChangeParts {
                event_name: "REMOVE",
                sequence_number: "8",
                view: Some(view),
                keys: Some(&item),
                old: None,
                new: None,
                expired: false,
            }),
        ]
    }

    #[test]
    fn a_removal_carries_its_keys_whatever_the_view_type() {
        let json = json!({ "id": { "S": "o1" }, "at": { "N": AT } });
        let keys = Keys::from_json(&json.to_string()).unwrap();
        for view in ["KEYS_ONLY", "NEW_IMAGE"] {
            for (path, change) in removals(view, json.clone()).into_iter().enumerate() {
                assert_eq!(
                    change,
                    Ok(Change::Remove {
                        old: None,
                        keys: keys.clone(),
                        expired: false
                    }),
                    "{view}, path {path}"
                );
            }
        }
        assert_eq!(
            keys.decode::<OrderKey>().unwrap(),
            OrderKey {
                id: "o1".into(),
                at: AT.parse().unwrap()
            }
        );
        assert!(keys.decode::<Order>().is_err(), "the keys are not an item");
        assert_eq!(keys.attributes()["id"], json!({ "S": "o1" }));
        assert_eq!(
            serde_json::from_str::<Value>(&keys.to_string()).unwrap(),
            json
        );
        assert!(!keys.is_empty());
        for bad in ["[]", r#"{"id": "o1"}"#, r#"{"id": {"X": "o1"}}"#] {
            assert!(Keys::from_json(bad).is_err(), "{bad}");
        }
        // Keys that are not attribute values fail the removal, naming it.
        let bad = record(
            "REMOVE",
            json!({ "SequenceNumber": "9", "Keys": { "id": { "X": "o1" } } }),
        );
        match Change::<Order>::from_event_json(&bad.to_string()) {
            Err(RecordError::Payload {
                sequence_number,
                error,
                ..
            }) => assert!(
                sequence_number == "9" && error.starts_with("keys: "),
                "{error}"
            ),
            other => panic!("{other:?}"),
        }
    }

    /// A record's attribute values decode as its text does: numbers exactly.
    #[test]
    fn numbers_decode_exactly_from_attribute_values() {
        #[derive(Debug, Deserialize, PartialEq)]
        struct Exact {
            id: String,
            text: String,
            wide: i128,
            unsigned: u128,
            set: Vec<String>,
        }
        let image = json!({
            "id": { "S": "o1" }, "text": { "N": AT }, "wide": { "N": format!("-{AT}") },
            "unsigned": { "N": AT }, "set": { "NS": [AT, "0.30000000000000001"] }
        });
        let text = record(
            "INSERT",
            json!({ "SequenceNumber": "1", "SizeBytes": 1, "StreamViewType": "NEW_IMAGE", "Keys": { "id": { "S": "o1" } }, "NewImage": image }),
        )
        .to_string();
        let parsed: EventRecord = serde_json::from_str(&text).unwrap();
        let wide: i128 = AT.parse().unwrap();
        let expected = || {
            Ok(Change::Insert {
                new: Exact {
                    id: "o1".into(),
                    text: AT.into(),
                    wide: -wide,
                    unsigned: wide as u128,
                    set: vec![AT.into(), "0.30000000000000001".into()],
                },
            })
        };
        assert_eq!(Change::<Exact>::from_record(&parsed), expected());
        assert_eq!(Change::<Exact>::from_event_json(&text), expected());
        let item: serde_dynamo::Item = serde_json::from_value(image).unwrap();
        let item: SdkImage = item.into();
        let parts = ChangeParts {
            event_name: "INSERT",
            sequence_number: "1",
            view: Some("NEW_IMAGE"),
            keys: None,
            old: None,
            new: Some(&item),
            expired: false,
        };
        assert_eq!(Change::<Exact>::from_parts(parts), expected());
    }
}
