//! One item change read from a DynamoDB stream, converted from the SDK's
//! stream record: images as `aws_sdk_dynamodb` items (what a table read or
//! write uses), and typed with [`ChangeRecord::change`] into the same
//! [`Change`] the event-source-mapped handlers get.

#[cfg(feature = "ddb-streams")]
use crate::processing::is_ttl_deletion;
use crate::processing::{Change, ChangeParts, RecordError};
use crate::state::{EpochMillis, SequenceNumber, ShardId};
use aws_sdk_dynamodb::types::AttributeValue;
#[cfg(feature = "ddb-streams")]
use aws_sdk_dynamodbstreams::types::{AttributeValue as StreamValue, OperationType};
use serde::de::DeserializeOwned;
use std::collections::HashMap;

/// An item (or its key attributes), as the DynamoDB SDK reads and writes it.
pub type Image = HashMap<String, AttributeValue>;

/// What happened to the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// The item was created.
    Insert,
    /// The item was written over (also for writes that changed nothing).
    Modify,
    /// The item was deleted.
    Remove,
}

impl ChangeKind {
    /// The stream's event name: `INSERT`, `MODIFY` or `REMOVE`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Insert => "INSERT",
            ChangeKind::Modify => "MODIFY",
            ChangeKind::Remove => "REMOVE",
        }
    }
}

/// One record of a DynamoDB stream shard.
///
/// [`crate::ddb_streams::StreamReader::poll`] hands it to the handler
/// decoded, in [`crate::processing::StreamRecord::change`].
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeRecord {
    /// The shard it was read from.
    pub shard_id: ShardId,
    /// The record's event id.
    pub event_id: String,
    /// Insert, modify or remove.
    pub kind: ChangeKind,
    /// Its sequence number (unique and increasing within the shard).
    pub sequence_number: SequenceNumber,
    /// `ApproximateCreationDateTime` (ms; the service rounds it to the second).
    pub created_at: Option<EpochMillis>,
    /// The item's key attributes.
    pub keys: Image,
    /// The item after the change (view types `NEW_IMAGE`, `NEW_AND_OLD_IMAGES`).
    pub new_image: Option<Image>,
    /// The item before the change (view types `OLD_IMAGE`, `NEW_AND_OLD_IMAGES`).
    pub old_image: Option<Image>,
    /// The stream's view type, as the record names it.
    pub view_type: Option<String>,
    /// A removal by DynamoDB's time to live (not by a caller).
    pub expired: bool,
}

/// Attribute values hold no floats (a number is its text): their equality
/// is an equivalence.
impl Eq for ChangeRecord {}

#[cfg(feature = "ddb-streams")]
fn attribute(value: &StreamValue) -> Result<AttributeValue, String> {
    Ok(match value {
        StreamValue::S(s) => AttributeValue::S(s.clone()),
        StreamValue::N(n) => AttributeValue::N(n.clone()),
        StreamValue::B(b) => AttributeValue::B(b.clone()),
        StreamValue::Bool(b) => AttributeValue::Bool(*b),
        StreamValue::Null(b) => AttributeValue::Null(*b),
        StreamValue::Ss(v) => AttributeValue::Ss(v.clone()),
        StreamValue::Ns(v) => AttributeValue::Ns(v.clone()),
        StreamValue::Bs(v) => AttributeValue::Bs(v.clone()),
        StreamValue::L(v) => AttributeValue::L(v.iter().map(attribute).collect::<Result<_, _>>()?),
        StreamValue::M(m) => AttributeValue::M(image(m)?),
        other => return Err(format!("unknown attribute type {other:?}")),
    })
}

#[cfg(feature = "ddb-streams")]
fn image(map: &HashMap<String, StreamValue>) -> Result<Image, String> {
    map.iter()
        .map(|(k, v)| Ok((k.clone(), attribute(v).map_err(|e| format!("{k}: {e}"))?)))
        .collect()
}

impl ChangeRecord {
    /// Converts the SDK's stream record (`index` is its place in the page,
    /// for the error when it has no sequence number). A record the reader
    /// cannot use (no sequence number, an unknown event name or attribute
    /// type) is an error naming it, never a panic.
    #[cfg(feature = "ddb-streams")]
    #[cfg_attr(docsrs, doc(cfg(feature = "ddb-streams")))]
    pub fn from_sdk(
        shard_id: &ShardId,
        index: usize,
        record: &aws_sdk_dynamodbstreams::types::Record,
    ) -> Result<Self, RecordError> {
        let malformed = |error: String| RecordError::Malformed { index, error };
        let data = record
            .dynamodb()
            .ok_or_else(|| malformed("no dynamodb field".into()))?;
        let seq = data
            .sequence_number()
            .ok_or_else(|| malformed("no SequenceNumber".into()))?;
        let sequence_number =
            SequenceNumber::new(seq).map_err(|e| RecordError::payload(seq, e.to_string()))?;
        let kind = match record.event_name() {
            Some(OperationType::Insert) => ChangeKind::Insert,
            Some(OperationType::Modify) => ChangeKind::Modify,
            Some(OperationType::Remove) => ChangeKind::Remove,
            other => {
                return Err(RecordError::payload(
                    seq,
                    format!("unknown event name {other:?}"),
                ))
            }
        };
        let convert = |which: &str, map: Option<&HashMap<String, StreamValue>>| {
            map.map(image)
                .transpose()
                .map_err(|e| RecordError::payload(seq, format!("{which}: {e}")))
        };
        Ok(ChangeRecord {
            shard_id: shard_id.clone(),
            event_id: record.event_id().unwrap_or_default().to_owned(),
            kind,
            sequence_number,
            created_at: data
                .approximate_creation_date_time()
                .and_then(|t| t.to_millis().ok()),
            keys: convert("keys", data.keys())?.unwrap_or_default(),
            new_image: convert("new image", data.new_image())?,
            old_image: convert("old image", data.old_image())?,
            view_type: data.stream_view_type().map(|v| v.as_str().to_owned()),
            expired: record.user_identity().is_some_and(|u| {
                is_ttl_deletion(u.r#type().unwrap_or(""), u.principal_id().unwrap_or(""))
            }),
        })
    }

    /// The record as the JSON text of a Lambda DynamoDB Streams event
    /// record from the stream `stream_arn` (images and keys in DynamoDB
    /// JSON): what a parked record of the reader keeps as its payload, as
    /// an event source mapping's parked record does. Handlers never get
    /// this text: [`crate::ddb_streams::StreamReader::poll`] hands the
    /// record over decoded.
    pub fn to_event_json(&self, stream_arn: &str) -> String {
        let item = |image: &Image| serde_json::json!(serde_dynamo::Item::from(image.clone()));
        let mut change = serde_json::json!({
            "Keys": item(&self.keys),
            "SequenceNumber": self.sequence_number.as_str(),
            "SizeBytes": 0,
        });
        if let Some(at) = self.created_at {
            change["ApproximateCreationDateTime"] = serde_json::json!(at as f64 / 1000.0);
        }
        if let Some(view) = &self.view_type {
            change["StreamViewType"] = serde_json::json!(view);
        }
        if let Some(image) = &self.new_image {
            change["NewImage"] = item(image);
        }
        if let Some(image) = &self.old_image {
            change["OldImage"] = item(image);
        }
        let mut record = serde_json::json!({
            "eventID": &self.event_id,
            "eventName": self.kind.as_str(),
            "eventSource": "aws:dynamodb",
            "eventSourceARN": stream_arn,
            "awsRegion": "",
            "dynamodb": change,
        });
        if self.expired {
            record["userIdentity"] = serde_json::json!({
                "type": "Service",
                "principalId": "dynamodb.amazonaws.com",
            });
        }
        record.to_string()
    }

    /// The change as `T`, decoded as a handler's changes are (what
    /// [`crate::processing::changes`] hands a handler of this record: the
    /// images' attribute values read by the decoder of
    /// [`crate::processing::from_image_json`], numbers exactly, not through
    /// `f64`, and nothing written as text); an image that does not decode,
    /// or one the change needs and the stream's view type leaves out, is an
    /// error naming the sequence number.
    pub fn change<T: DeserializeOwned>(&self) -> Result<Change<T>, RecordError> {
        Change::from_parts(ChangeParts {
            event_name: self.kind.as_str(),
            sequence_number: self.sequence_number.as_str(),
            view: self.view_type.as_deref(),
            keys: Some(&self.keys),
            old: self.old_image.as_ref(),
            new: self.new_image.as_ref(),
            expired: self.expired,
        })
    }
}

#[cfg(all(test, feature = "ddb-streams"))]
mod tests {
    use super::*;
    use crate::processing::Keys;
    use aws_sdk_dynamodbstreams::types::{Record, StreamRecord, StreamViewType};

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Order {
        id: String,
        amount: u64,
    }

    fn record(name: OperationType, new: Option<StreamValue>) -> Record {
        let mut data = StreamRecord::builder()
            .sequence_number("100000000000000000042")
            .stream_view_type(StreamViewType::NewAndOldImages)
            .keys("id", StreamValue::S("o1".into()));
        if let Some(amount) = new {
            data = data
                .new_image("id", StreamValue::S("o1".into()))
                .new_image("amount", amount);
        }
        Record::builder()
            .event_id("e1")
            .event_name(name)
            .dynamodb(data.build())
            .build()
    }

    /// What a `changes` handler of `Order` gets for `record` under the
    /// reader, and the record as the handler sees it.
    fn handed_with_record(
        record: ChangeRecord,
    ) -> (Change<Order>, crate::processing::StreamRecord) {
        use crate::processing::{changes, RecordHandler, StreamRecord, Unit};
        use std::sync::{Arc, Mutex};
        type Handed = (Change<Order>, StreamRecord);
        let seen: Arc<Mutex<Vec<Handed>>> = Arc::default();
        let handler = changes({
            let seen = seen.clone();
            move |change: Change<Order>, record: StreamRecord| {
                seen.lock().unwrap().push((change, record));
                async { Ok::<(), std::io::Error>(()) }
            }
        });
        let Unit::Record(record) = Unit::change(record, &Arc::from("arn:stream")) else {
            panic!("a reader's record is one record");
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(handler.handle(record)).unwrap();
        let mut seen = seen.lock().unwrap();
        seen.pop().unwrap()
    }

    fn handed(record: ChangeRecord) -> Change<Order> {
        handed_with_record(record).0
    }

    #[test]
    fn a_handler_gets_the_decoded_record_and_its_typed_change() {
        let shard = ShardId::new("shardId-1").unwrap();
        let rec = record(OperationType::Modify, Some(StreamValue::N("7".into())));
        let change = ChangeRecord::from_sdk(&shard, 0, &rec).unwrap();
        let (typed, record) = handed_with_record(change.clone());
        assert_eq!(typed, change.change::<Order>().unwrap());
        assert_eq!(record.change.as_deref(), Some(&change));
        assert!(record.data.is_empty());
        assert_eq!(&*record.partition_key, r#"{"id":{"S":"o1"}}"#);
        assert_eq!(&*record.sequence_number, "100000000000000000042");
        assert_eq!(&*record.shard_id, "shardId-1");
        assert_eq!(record.event_source_arn.as_deref(), Some("arn:stream"));
    }

    #[test]
    fn a_record_becomes_a_typed_change() {
        let shard = ShardId::new("shardId-1").unwrap();
        let rec = record(OperationType::Insert, Some(StreamValue::N("7".into())));
        let change = ChangeRecord::from_sdk(&shard, 0, &rec).unwrap();
        assert_eq!(change.kind, ChangeKind::Insert);
        assert_eq!(
            change.change::<Order>().unwrap(),
            Change::Insert {
                new: Order {
                    id: "o1".into(),
                    amount: 7
                }
            }
        );
    }

    #[test]
    fn a_removal_by_time_to_live_is_flagged() {
        use aws_sdk_dynamodbstreams::types::Identity;
        let shard = ShardId::new("shardId-1").unwrap();
        let mut rec = record(OperationType::Remove, None);
        let change = ChangeRecord::from_sdk(&shard, 0, &rec).unwrap();
        assert!(!change.expired);
        rec.user_identity = Some(
            Identity::builder()
                .r#type("Service")
                .principal_id("dynamodb.amazonaws.com")
                .build(),
        );
        let change = ChangeRecord::from_sdk(&shard, 0, &rec).unwrap();
        assert!(change.expired);
        assert!(matches!(
            change.change::<Order>().unwrap(),
            Change::Remove { expired: true, .. }
        ));
        // Handed to a handler, the flag survives; and in the event shape.
        let event: aws_lambda_events::event::dynamodb::EventRecord =
            serde_json::from_str(&change.to_event_json("arn:stream")).unwrap();
        assert!(matches!(
            Change::<Order>::from_record(&event).unwrap(),
            Change::Remove { expired: true, .. }
        ));
        assert!(matches!(
            handed(change),
            Change::Remove { expired: true, .. }
        ));
    }

    #[test]
    fn a_malformed_image_is_an_error_naming_the_sequence_number() {
        let shard = ShardId::new("shardId-1").unwrap();
        let wrong_type = record(OperationType::Modify, Some(StreamValue::S("seven".into())));
        let err = ChangeRecord::from_sdk(&shard, 0, &wrong_type)
            .unwrap()
            .change::<Order>()
            .unwrap_err();
        assert!(
            matches!(&err, RecordError::Payload { sequence_number, error, .. }
                if sequence_number == "100000000000000000042" && error.contains("new image")),
            "{err}"
        );
        let no_image = record(OperationType::Insert, None);
        let err = ChangeRecord::from_sdk(&shard, 0, &no_image)
            .unwrap()
            .change::<Order>()
            .unwrap_err();
        assert!(err.to_string().contains("has no new image"), "{err}");
    }

    /// 38 digits, beyond u64 and f64.
    const AT: &str = "12345678901234567890123456789012345678";

    #[test]
    fn a_change_decodes_numbers_exactly() {
        #[derive(Debug, serde::Deserialize, PartialEq)]
        struct Exact {
            id: String,
            text: String,
            wide: i128,
            set: Vec<String>,
        }
        let shard = ShardId::new("shardId-1").unwrap();
        let data = StreamRecord::builder()
            .sequence_number("100000000000000000043")
            .stream_view_type(StreamViewType::NewImage)
            .keys("id", StreamValue::S("o1".into()))
            .new_image("id", StreamValue::S("o1".into()))
            .new_image("text", StreamValue::N(AT.into()))
            .new_image("wide", StreamValue::N(format!("-{AT}")))
            .new_image("set", StreamValue::Ns(vec![AT.into(), "2.5".into()]))
            .build();
        let rec = Record::builder()
            .event_name(OperationType::Insert)
            .dynamodb(data)
            .build();
        let change = ChangeRecord::from_sdk(&shard, 0, &rec).unwrap();
        assert_eq!(
            change.change::<Exact>().unwrap(),
            Change::Insert {
                new: Exact {
                    id: "o1".into(),
                    text: AT.into(),
                    wide: -AT.parse::<i128>().unwrap(),
                    set: vec![AT.into(), "2.5".into()],
                }
            }
        );
    }

    #[test]
    fn a_removal_carries_its_keys_whatever_the_view_type() {
        #[derive(Debug, serde::Deserialize, PartialEq)]
        struct Key {
            id: String,
            at: u128,
        }
        let shard = ShardId::new("shardId-1").unwrap();
        let keys = Keys::from_json(&format!(
            r#"{{"id": {{"S": "o1"}}, "at": {{"N": "{AT}"}}}}"#
        ))
        .unwrap();
        for view in [StreamViewType::KeysOnly, StreamViewType::NewImage] {
            let data = StreamRecord::builder()
                .sequence_number("100000000000000000044")
                .stream_view_type(view.clone())
                .keys("id", StreamValue::S("o1".into()))
                .keys("at", StreamValue::N(AT.into()))
                .build();
            let rec = Record::builder()
                .event_name(OperationType::Remove)
                .dynamodb(data)
                .build();
            let change = ChangeRecord::from_sdk(&shard, 0, &rec).unwrap();
            // `Order` has an attribute the keys lack: the removal still decodes.
            let removal = Change::Remove {
                old: None,
                keys: keys.clone(),
                expired: false,
            };
            assert_eq!(change.change::<Order>().unwrap(), removal, "{view}");
            // Handed to a handler, the same keys; and in the event shape.
            let text = change.to_event_json("arn:stream");
            assert_eq!(Change::<Order>::from_event_json(&text).unwrap(), removal);
            assert_eq!(handed(change), removal);
        }
        assert_eq!(
            keys.decode::<Key>().unwrap(),
            Key {
                id: "o1".into(),
                at: AT.parse().unwrap()
            }
        );
    }
}
