//! A stream record's JSON text, as an event source mapping hands it over,
//! read into a typed change in one pass: the scanner finds the fields a
//! change needs, and the old and new images are decoded where it finds
//! them (serde reads the record where the scanner cannot).

use crate::change::image::{from_image_json, image_at};
use crate::change::keys::Keys;
use crate::change::typed::{decide, is_ttl_deletion, Change, ChangeParts};
use crate::processing::outcome::RecordError;
use crate::scan;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

impl<T: DeserializeOwned> Change<T> {
    /// Decodes the JSON text of one event source mapping's stream record
    /// (what `record.data` holds for a [`crate::processing::changes`]
    /// handler) into a typed change in one pass: the images are decoded
    /// from their DynamoDB JSON text straight into `T` (see
    /// [`crate::processing::from_image_json`]), as [`Change::from_record`]
    /// decodes them from attribute values. A record
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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
}
