//! A DynamoDB Streams record as the self-managed reader gets it from the
//! DynamoDB Streams API (the SDK's `Record`, `ChangeRecord::from_sdk`),
//! against the same record as an event source mapping delivers it.
//!
//! The input is a Lambda DynamoDB Streams event record (JSON). Where it
//! parses as `aws_lambda_events` parses it, the same record is built with
//! the SDK's types (images, keys, view type, user identity), and the
//! change both paths decode (as `serde_json::Value`) must be the same, or
//! both must fail. Any input must decode or fail without a panic.

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_dynamodbstreams::types::{
    AttributeValue as StreamValue, Identity, OperationType, Record, StreamRecord as SdkChange,
    StreamViewType,
};
use serde_json::Value;
use shardkeeper::processing::{Change, ChangeRecord};
use shardkeeper::state::{SequenceNumber, ShardId};
use std::collections::HashMap;

/// One input.
pub fn run(data: &[u8]) {
    let Ok(raw) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(record) = serde_json::from_value::<EventRecord>(raw.clone()) else {
        return;
    };
    let from_event = Change::<Value>::from_record(&record);
    let Some(sdk) = sdk_record(&raw) else {
        return;
    };
    let shard = ShardId::new("shardId-00000001700000000000-0123abcd").expect("a shard id");
    let from_sdk = ChangeRecord::from_sdk(&shard, 0, &sdk).and_then(|r| r.change::<Value>());
    match (&from_event, &from_sdk) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the two paths decode different changes"),
        (Err(_), Err(_)) => {}
        // The reader refuses what the event path takes on trust: a
        // sequence number that is not one, an event name it does not know.
        (Ok(_), Err(_)) if !comparable(&record) => {}
        _ => panic!("one path failed: from the event {from_event:?}, from the SDK {from_sdk:?}"),
    }
}

/// Whether both paths must agree on `record`: its sequence number is one,
/// and its event name one of the three.
fn comparable(record: &EventRecord) -> bool {
    record
        .change
        .sequence_number
        .as_deref()
        .is_some_and(|s| SequenceNumber::new(s).is_ok())
        && matches!(record.event_name.as_str(), "INSERT" | "MODIFY" | "REMOVE")
}

/// The record built with the SDK's types, from the event's JSON (`None`
/// where an image is not DynamoDB JSON).
fn sdk_record(raw: &Value) -> Option<Record> {
    let change = raw.get("dynamodb")?;
    let image = |name: &str| -> Option<Option<HashMap<String, StreamValue>>> {
        match change.get(name) {
            None | Some(Value::Null) => Some(None),
            Some(v) => {
                let item: serde_dynamo::Item = serde_json::from_value(v.clone()).ok()?;
                let map: HashMap<String, StreamValue> = item
                    .into_inner()
                    .into_iter()
                    .map(|(k, v)| (k, stream_value(v)))
                    .collect();
                Some((!map.is_empty()).then_some(map))
            }
        }
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let sdk_change = SdkChange::builder()
        .set_sequence_number(text(change.get("SequenceNumber")))
        .set_keys(image("Keys")?)
        .set_new_image(image("NewImage")?)
        .set_old_image(image("OldImage")?)
        .set_stream_view_type(
            text(change.get("StreamViewType")).map(|v| StreamViewType::from(v.as_str())),
        )
        .build();
    let identity = raw.get("userIdentity").map(|u| {
        Identity::builder()
            .set_type(text(u.get("type")))
            .set_principal_id(text(u.get("principalId")))
            .build()
    });
    Some(
        Record::builder()
            .set_event_id(text(raw.get("eventID")))
            .set_event_name(text(raw.get("eventName")).map(|n| OperationType::from(n.as_str())))
            .dynamodb(sdk_change)
            .set_user_identity(identity)
            .build(),
    )
}

/// One attribute value in the SDK's stream type.
fn stream_value(value: serde_dynamo::AttributeValue) -> StreamValue {
    use serde_dynamo::AttributeValue as V;
    match value {
        V::N(n) => StreamValue::N(n),
        V::S(s) => StreamValue::S(s),
        V::Bool(b) => StreamValue::Bool(b),
        V::B(b) => StreamValue::B(b.into()),
        V::Null(b) => StreamValue::Null(b),
        V::M(m) => StreamValue::M(m.into_iter().map(|(k, v)| (k, stream_value(v))).collect()),
        V::L(l) => StreamValue::L(l.into_iter().map(stream_value).collect()),
        V::Ss(v) => StreamValue::Ss(v),
        V::Ns(v) => StreamValue::Ns(v),
        V::Bs(v) => StreamValue::Bs(v.into_iter().map(Into::into).collect()),
    }
}
