//! Shaping event-source-mapping events from what the servers return.

use crate::common::Ctx;
use base64::Engine;
use serde_json::json;

/// Reads every record of one shard from TRIM_HORIZON.
pub async fn read_shard(
    ctx: &Ctx,
    stream: &str,
    shard: &str,
) -> Vec<aws_sdk_kinesis::types::Record> {
    let it = ctx
        .aws
        .kinesis
        .get_shard_iterator()
        .stream_name(stream)
        .shard_id(shard)
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
        .send()
        .await
        .unwrap();
    let out = ctx
        .aws
        .kinesis
        .get_records()
        .shard_iterator(it.shard_iterator().unwrap())
        .send()
        .await
        .unwrap();
    out.records().to_vec()
}

/// The Kinesis event the event source mapping would send for these records.
pub fn kinesis_event(
    stream_arn: &str,
    shard: &str,
    records: &[aws_sdk_kinesis::types::Record],
) -> serde_json::Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    let records: Vec<_> = records
        .iter()
        .map(|r| {
            let arrival = r
                .approximate_arrival_timestamp()
                .map(|t| t.as_secs_f64())
                .unwrap_or(0.0);
            json!({
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": r.partition_key(),
                    "sequenceNumber": r.sequence_number(),
                    "data": b64.encode(r.data().as_ref()),
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
        })
        .collect();
    json!({ "Records": records })
}
