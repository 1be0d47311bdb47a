//! Shaping event-source-mapping events from what the servers return.

use crate::support::common::Ctx;
use serde_json::json;

/// Reads every record of one shard from TRIM_HORIZON (page after page,
/// until a page comes back empty).
pub async fn read_shard(
    ctx: &Ctx,
    stream: &str,
    shard: &str,
) -> Vec<aws_sdk_kinesis::types::Record> {
    let mut iterator = ctx
        .aws
        .kinesis
        .get_shard_iterator()
        .stream_name(stream)
        .shard_id(shard)
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
        .send()
        .await
        .unwrap()
        .shard_iterator()
        .map(str::to_owned);
    let mut records = Vec::new();
    while let Some(it) = iterator {
        let out = ctx
            .aws
            .kinesis
            .get_records()
            .shard_iterator(it)
            .send()
            .await
            .unwrap();
        if out.records().is_empty() {
            break;
        }
        records.extend(out.records().iter().cloned());
        iterator = out.next_shard_iterator().map(str::to_owned);
    }
    records
}

/// The Kinesis event the event source mapping would send for these records.
pub fn kinesis_event(
    stream_arn: &str,
    shard: &str,
    records: &[aws_sdk_kinesis::types::Record],
) -> serde_json::Value {
    let records: Vec<_> = records
        .iter()
        .map(|r| kinesis_event_record(stream_arn, shard, r))
        .collect();
    json!({ "Records": records })
}

/// One record of a Kinesis event, as the event source mapping shapes it.
pub fn kinesis_event_record(
    stream_arn: &str,
    shard: &str,
    r: &aws_sdk_kinesis::types::Record,
) -> serde_json::Value {
    let b64 = base64_simd::STANDARD;
    let arrival = r
        .approximate_arrival_timestamp()
        .map(|t| t.as_secs_f64())
        .unwrap_or(0.0);
    json!({
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": r.partition_key(),
            "sequenceNumber": r.sequence_number(),
            "data": b64.encode_to_string(r.data().as_ref()),
            "approximateArrivalTimestamp": arrival,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": format!("{shard}:{}", r.sequence_number()),
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": "arn:aws:iam::123456789012:role/lambda-role",
        "awsRegion": "us-east-1",
        "eventSourceARN": stream_arn,
    })
}

fn attribute_json(value: &aws_sdk_dynamodbstreams::types::AttributeValue) -> serde_json::Value {
    use aws_sdk_dynamodbstreams::types::AttributeValue as A;
    let b64 = base64_simd::STANDARD;
    match value {
        A::S(s) => json!({ "S": s }),
        A::N(n) => json!({ "N": n }),
        A::Bool(b) => json!({ "BOOL": b }),
        A::Null(_) => json!({ "NULL": true }),
        A::B(b) => json!({ "B": b64.encode_to_string(b.as_ref()) }),
        A::Ss(v) => json!({ "SS": v }),
        A::Ns(v) => json!({ "NS": v }),
        A::L(v) => json!({ "L": v.iter().map(attribute_json).collect::<Vec<_>>() }),
        A::M(m) => json!({ "M": image_json(m) }),
        other => panic!("unexpected attribute {other:?}"),
    }
}

fn image_json(
    image: &std::collections::HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>,
) -> serde_json::Value {
    serde_json::Value::Object(
        image
            .iter()
            .map(|(k, v)| (k.clone(), attribute_json(v)))
            .collect(),
    )
}

/// Every record of a table's stream (all shards, from TRIM_HORIZON).
pub async fn read_table_stream(
    ctx: &Ctx,
    stream_arn: &str,
) -> Vec<aws_sdk_dynamodbstreams::types::Record> {
    let described = ctx
        .aws
        .streams
        .describe_stream()
        .stream_arn(stream_arn)
        .send()
        .await
        .unwrap();
    let mut records = Vec::new();
    for shard in described.stream_description().unwrap().shards() {
        let it = ctx
            .aws
            .streams
            .get_shard_iterator()
            .stream_arn(stream_arn)
            .shard_id(shard.shard_id().unwrap())
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap();
        let out = ctx
            .aws
            .streams
            .get_records()
            .shard_iterator(it.shard_iterator().unwrap())
            .send()
            .await
            .unwrap();
        records.extend(out.records().iter().cloned());
    }
    records
}

/// The DynamoDB Streams event the event source mapping would send.
pub fn dynamodb_event(
    stream_arn: &str,
    records: &[aws_sdk_dynamodbstreams::types::Record],
) -> serde_json::Value {
    let records: Vec<_> = records
        .iter()
        .map(|r| dynamodb_event_record(stream_arn, r))
        .collect();
    json!({ "Records": records })
}

/// One record of a DynamoDB Streams event, as the event source mapping
/// shapes it.
pub fn dynamodb_event_record(
    stream_arn: &str,
    r: &aws_sdk_dynamodbstreams::types::Record,
) -> serde_json::Value {
    let d = r.dynamodb().unwrap();
    let mut change = json!({
        "ApproximateCreationDateTime": d.approximate_creation_date_time().map(|t| t.secs()).unwrap_or(0),
        "Keys": image_json(d.keys().unwrap()),
        "SequenceNumber": d.sequence_number().unwrap(),
        "SizeBytes": d.size_bytes().unwrap_or(0),
        "StreamViewType": d.stream_view_type().map(|v| v.as_str()).unwrap_or("NEW_AND_OLD_IMAGES"),
    });
    if let Some(new) = d.new_image() {
        change["NewImage"] = image_json(new);
    }
    if let Some(old) = d.old_image() {
        change["OldImage"] = image_json(old);
    }
    json!({
        "eventID": r.event_id().unwrap(),
        "eventName": r.event_name().unwrap().as_str(),
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": change,
        "eventSourceARN": stream_arn,
    })
}
