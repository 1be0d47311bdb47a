//! Kinesis events as Lambda sends them, generated deterministically.

/// A Kinesis event of the records `records` gives (partition key, JSON
/// payload), in order, on one shard of the stream `orders`.
pub fn kinesis_event(records: impl Iterator<Item = (String, serde_json::Value)>) -> String {
    let b64 = base64_simd::STANDARD;
    let records: Vec<serde_json::Value> = records
        .enumerate()
        .map(|(i, (key, payload))| {
            let seq = format!("4959033827149025660855969253836157109592157598913{:07}", i);
            serde_json::json!({
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": key,
                    "sequenceNumber": seq,
                    "data": b64.encode_to_string(payload.to_string()),
                    "approximateArrivalTimestamp": 1_763_701_200.123,
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": format!("shardId-000000000000:{seq}"),
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/kinesis-processor",
                "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/orders",
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}
