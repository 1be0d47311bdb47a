//! Typed item changes of a DynamoDB stream, and the handler adapter that
//! decodes them. Every image is read by the one image decoder
//! (`processing::image`): from the record's text (event source mappings),
//! or from the SDK's attribute values (the reader's records,
//! `Change::from_parts`), neither turned into the other first.

use crate::processing::handler::{Decode, HandlerError, TypedHandler};
use crate::processing::image::{from_attribute_map, from_image_json, from_sdk_image, image_at};
use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use crate::processing::scan;
use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
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

/// The key attributes of a changed item, kept as DynamoDB JSON attribute
/// values (`{"id": {"S": "o1"}}`) rather than decoded into the item's type,
/// which may have required attributes the keys lack: [`Keys::decode`] reads
/// them into a key type when the handler wants one. Two `Keys` are equal if
/// they hold the same attributes, whatever their order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys(Map<String, Value>);

impl Keys {
    /// The keys written as `json`, the DynamoDB JSON text of a map of
    /// attribute values (`{"id": {"S": "o1"}}`); an error if it is not one.
    /// A handler's tests build the removals they expect with it.
    pub fn from_json(json: &str) -> Result<Keys, serde_json::Error> {
        Keys::from_item(serde_json::from_str(json)?)
    }

    /// Every path to keys goes through `serde_dynamo`'s attribute values,
    /// so that keys read from an event's text and from its parsed record
    /// are equal (a `B`'s base64, for one, is written one way).
    fn from_item(item: serde_dynamo::Item) -> Result<Keys, serde_json::Error> {
        match serde_json::to_value(item)? {
            Value::Object(map) => Ok(Keys(map)),
            other => Err(serde::de::Error::custom(format_args!(
                "keys are a map of attribute values, not {other}"
            ))),
        }
    }

    /// The keys decoded into `K` (a struct of the key attributes, say),
    /// as an image is decoded (see [`crate::processing::from_image_json`]:
    /// numbers are read exactly).
    pub fn decode<K: DeserializeOwned>(&self) -> Result<K, serde_json::Error> {
        from_attribute_map(&self.0)
    }

    /// Each key attribute's name and its DynamoDB JSON attribute value.
    pub fn attributes(&self) -> &Map<String, Value> {
        &self.0
    }

    /// True if the record carried no keys.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The keys as DynamoDB JSON text, attributes in name order.
impl fmt::Display for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let json = serde_json::to_string(&self.0).map_err(|_| fmt::Error)?;
        f.write_str(&json)
    }
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
    /// Decodes an event source mapping's stream record into a typed change.
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

    /// Decodes the JSON text of one event source mapping's stream record
    /// (what `record.data` holds for a [`changes`] handler) into a typed
    /// change in one pass: the images are decoded from their DynamoDB JSON
    /// text straight into `T` (see [`crate::processing::from_image_json`]),
    /// as [`Change::from_record`] decodes them from attribute values. A record
    /// that is not a stream record is [`RecordError::Malformed`]; an image
    /// that does not decode is a [`RecordError::Payload`] naming the record
    /// and the image.
    pub fn from_event_json(record_json: &str) -> Result<Self, RecordError> {
        // The old and new images, decoded where the scanner finds them
        // (each image is read once, not skipped first and decoded after).
        let mut decoded: [Option<Result<T, String>>; 2] = [None, None];
        let b = record_json.as_bytes();
        let scanned = RecordFields::scan(record_json, |key, at| {
            let slot = match key {
                "OldImage" => 0,
                "NewImage" => 1,
                _ => return None,
            };
            // An empty image is no image: left to the scanner.
            let empty = b.get(scan::skip_ws(b, at + 1)) == Some(&b'}');
            if b.get(at) != Some(&b'{') || empty {
                return None;
            }
            match image_at::<T>(&record_json[at..]) {
                Ok((value, len)) => {
                    decoded[slot] = Some(Ok(value));
                    Some(at + len)
                }
                Err(e) => {
                    decoded[slot] = Some(Err(e.to_string()));
                    None
                }
            }
        });
        let [old, new] = decoded;
        let (record, old, new) = match scanned {
            Some(record) => {
                let image = |decoded: Option<Result<T, String>>, text| match decoded {
                    Some(result) => Some(Image::Decoded(result)),
                    None => present(text).map(Image::Text),
                };
                let (old, new) = (image(old, record.old), image(new, record.new));
                (record, old, new)
            }
            None => {
                let record = serde_json::from_str::<RecordText<'_>>(record_json)
                    .map(RecordFields::from)
                    .map_err(|e| RecordError::Malformed {
                        index: 0,
                        error: e.to_string(),
                    })?;
                let (old, new) = (present(record.old), present(record.new));
                (record, old.map(Image::Text), new.map(Image::Text))
            }
        };
        decide(
            ChangeParts {
                event_name: &record.event_name,
                sequence_number: record.sequence_number.as_deref().unwrap_or(""),
                view: record.view.as_deref(),
                keys: present(record.keys).map(Image::Text),
                old,
                new,
                expired: record.expired,
            },
            |image: Image<'_, T>, which, seq| {
                let decoded = match image {
                    Image::Text(text) => from_image_json(text).map_err(|e| e.to_string()),
                    Image::Decoded(result) => result,
                };
                decoded.map_err(|e| RecordError::payload(seq, format!("{which} image: {e}")))
            },
            |keys| match keys {
                Image::Text(text) => Keys::from_json(text).map_err(|e| e.to_string()),
                // The scanner decodes only the old and new images.
                Image::Decoded(_) => Err("the keys were decoded as an image".into()),
            },
        )
    }
}

/// An image of a record's text: the text, or what it decoded to where the
/// scanner decoded it.
enum Image<'a, T> {
    Text(&'a str),
    Decoded(Result<T, String>),
}

/// The change `parts` describe, each image decoded by `decode(image, which,
/// sequence number)`, a removal's keys read by `keys`.
fn decide<T, I>(
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

/// The fields of an event source mapping's stream record a change needs,
/// borrowed from its text; the images are kept as text for
/// [`from_image_json`].
#[derive(Deserialize)]
struct RecordText<'a> {
    #[serde(rename = "eventName", borrow)]
    event_name: Cow<'a, str>,
    #[serde(rename = "userIdentity", borrow, default)]
    user_identity: Option<Identity<'a>>,
    #[serde(borrow)]
    dynamodb: ImagesText<'a>,
}

#[derive(Deserialize)]
struct Identity<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Cow<'a, str>,
    #[serde(rename = "principalId", borrow, default)]
    principal_id: Cow<'a, str>,
}

#[derive(Deserialize)]
struct ImagesText<'a> {
    #[serde(rename = "SequenceNumber", borrow, default)]
    sequence_number: Option<Cow<'a, str>>,
    #[serde(rename = "StreamViewType", borrow, default)]
    stream_view_type: Option<Cow<'a, str>>,
    #[serde(rename = "Keys", borrow, default)]
    keys: Option<&'a RawValue>,
    #[serde(rename = "OldImage", borrow, default)]
    old_image: Option<&'a RawValue>,
    #[serde(rename = "NewImage", borrow, default)]
    new_image: Option<&'a RawValue>,
}

/// What a change needs of a stream record, its images as text.
struct RecordFields<'a> {
    event_name: Cow<'a, str>,
    expired: bool,
    sequence_number: Option<Cow<'a, str>>,
    view: Option<Cow<'a, str>>,
    keys: Option<&'a str>,
    old: Option<&'a str>,
    new: Option<&'a str>,
}

impl<'a> From<RecordText<'a>> for RecordFields<'a> {
    fn from(record: RecordText<'a>) -> Self {
        let expired = record
            .user_identity
            .as_ref()
            .is_some_and(|u| is_ttl_deletion(&u.kind, &u.principal_id));
        let images = record.dynamodb;
        RecordFields {
            event_name: record.event_name,
            expired,
            sequence_number: images.sequence_number,
            view: images.stream_view_type,
            keys: images.keys.map(RawValue::get),
            old: images.old_image.map(RawValue::get),
            new: images.new_image.map(RawValue::get),
        }
    }
}

impl<'a> RecordFields<'a> {
    /// The fields found by the scanner, or `None` where only serde reads
    /// the record as it must (then serde's error is the record's). The text
    /// outside the images is not validated here: the processor validated
    /// the event it came from, and each image is validated as it decodes.
    /// `read(key, at)` may read a field of the `dynamodb` object where it
    /// is found (see [`scan::nested_fields_reading`]).
    fn scan(
        record: &'a str,
        read: impl FnMut(&str, usize) -> Option<usize>,
    ) -> Option<RecordFields<'a>> {
        let ([name, identity], dynamodb) = scan::nested_fields_reading(
            record,
            ["eventName", "userIdentity"],
            "dynamodb",
            [
                "SequenceNumber",
                "StreamViewType",
                "Keys",
                "OldImage",
                "NewImage",
            ],
            read,
        )?;
        let expired = match identity {
            None | Some("null") => false,
            Some(identity) => {
                let [kind, principal] = scan::fields(identity, ["type", "principalId"])?;
                let kind = scan::optional_string(kind)?.unwrap_or_default();
                let principal = scan::optional_string(principal)?.unwrap_or_default();
                is_ttl_deletion(&kind, &principal)
            }
        };
        let [seq, view, keys, old, new] = dynamodb?;
        // An image is an object (decoded later) or null; anything else is
        // for serde to reject.
        let image = |value: Option<&'a str>| match value {
            None | Some("null") => Some(None),
            Some(v) if v.starts_with('{') => Some(Some(v)),
            Some(_) => None,
        };
        Some(RecordFields {
            event_name: scan::string(name?)?,
            expired,
            sequence_number: scan::optional_string(seq)?,
            view: scan::optional_string(view)?,
            keys: image(keys)?,
            old: image(old)?,
            new: image(new)?,
        })
    }
}

/// An image the record carries: not `null` and not an empty map (as
/// `aws_lambda_events` reads an image, an absent one is an empty map).
fn present(image: Option<&str>) -> Option<&str> {
    image.filter(|text| {
        let inner = text.strip_prefix('{').map(str::trim_start);
        !(*text == "null" || inner == Some("}"))
    })
}

/// Typed DynamoDB Streams changes: each record's images decoded from
/// their DynamoDB JSON text straight into `T` ([`Change::from_event_json`]).
pub struct Changes<T>(PhantomData<fn() -> T>);

impl<T: DeserializeOwned + Send + 'static> Decode for Changes<T> {
    type Value = Change<T>;

    fn decode(record: &StreamRecord) -> Result<Change<T>, RecordError> {
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
/// batches: each record's images are decoded from their DynamoDB JSON text
/// straight into `T` ([`Change::from_event_json`]); a record that does not
/// decode fails with an error naming its sequence number.
/// `record.data` is the stream record's JSON, `record.partition_key` its keys.
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

    /// Images decoded where the scanner finds them fail as images decoded
    /// after: the old image's error first, whatever the order in the text,
    /// and an empty image is no image.
    #[test]
    fn images_decoded_in_place_fail_as_before() {
        #[derive(Debug, Deserialize, PartialEq)]
        struct Typed {
            n: u32,
        }
        let bad = json!({ "n": { "S": "two" } });
        let good = json!({ "n": { "N": "2" } });
        let text = |old: &Value, new: &Value| {
            // NewImage before OldImage, as in Lambda's events.
            format!(
                r#"{{"eventName": "MODIFY", "dynamodb": {{"Keys": {{}}, "NewImage": {new}, "OldImage": {old}, "SequenceNumber": "9", "StreamViewType": "NEW_AND_OLD_IMAGES"}}}}"#
            )
        };
        let error =
            |old: &Value, new: &Value| match Change::<Typed>::from_event_json(&text(old, new))
                .unwrap_err()
            {
                RecordError::Payload {
                    sequence_number,
                    error,
                    ..
                } => {
                    assert_eq!(sequence_number, "9");
                    error
                }
                other => panic!("{other:?}"),
            };
        assert!(error(&bad, &bad).starts_with("old image: "));
        assert!(error(&good, &bad).starts_with("new image: "));
        assert!(error(&bad, &good).starts_with("old image: "));
        assert_eq!(
            Change::<Typed>::from_event_json(&text(&json!({}), &good)),
            Ok(Change::Modify {
                old: None,
                new: Typed { n: 2 }
            })
        );
    }

    #[test]
    fn a_record_that_is_not_a_stream_record_is_malformed() {
        for text in [
            "{",
            r#"{"dynamodb": {}}"#,
            r#"{"eventName": 1, "dynamodb": {}}"#,
        ] {
            let error = Change::<Value>::from_event_json(text).unwrap_err();
            assert!(
                matches!(error, RecordError::Malformed { .. }),
                "{text}: {error:?}"
            );
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
