//! The consumer groups a state table holds: one Scan of the keys, for
//! operators (a group's own reads never scan).

use crate::error::{Result, Service};
use crate::records::SK_PARKED;
use crate::retry::{call_aws, RetryPolicy};
use crate::schema::{PK, SK, SK_CONSUMER, SK_EFOSHARD, SK_OWN, SK_SHARD};
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::BTreeMap;

/// One group of a state table, and how many items of each kind it has.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GroupSummary {
    /// The consumer group.
    pub group: String,
    /// The stream it consumes (a Kinesis stream name, or the name given to
    /// a DynamoDB stream).
    pub stream: String,
    /// Registered consumers.
    pub consumers: u64,
    /// Shards with state (leased, standalone and EFO scopes).
    pub shards: u64,
    /// Parked records.
    pub parked: u64,
    /// Items in all.
    pub items: u64,
}

/// Every group in `table`, by group then stream: one paginated Scan that
/// reads only the keys (its cost grows with the table, so it is for
/// operators, not for the functions).
pub async fn list_groups(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    retry: &RetryPolicy,
) -> Result<Vec<GroupSummary>> {
    let mut groups: BTreeMap<String, GroupSummary> = BTreeMap::new();
    let mut start: Option<std::collections::HashMap<String, AttributeValue>> = None;
    loop {
        let req = client
            .scan()
            .table_name(table)
            .projection_expression("#pk, #sk")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .set_exclusive_start_key(start.take());
        let out = call_aws(retry, Service::DynamoDb, "Scan", || req.clone().send()).await?;
        for item in out.items() {
            let (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) =
                (item.get(PK), item.get(SK))
            else {
                continue;
            };
            // Group and stream names cannot hold '#'; a bucket key adds
            // `#<bucket>` to the group's home key.
            let Some((group, rest)) = pk.split_once('#') else {
                continue;
            };
            let stream = rest.split_once('#').map_or(rest, |(stream, _)| stream);
            let home = format!("{group}#{stream}");
            let row = groups.entry(home).or_insert_with(|| GroupSummary {
                group: group.to_owned(),
                stream: stream.to_owned(),
                ..GroupSummary::default()
            });
            row.items += 1;
            if sk.starts_with(SK_CONSUMER) {
                row.consumers += 1;
            } else if sk.starts_with(SK_SHARD)
                || sk.starts_with(SK_OWN)
                || sk.starts_with(SK_EFOSHARD)
            {
                row.shards += 1;
            } else if sk.starts_with(SK_PARKED) {
                row.parked += 1;
            }
        }
        match out.last_evaluated_key {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => break,
        }
    }
    Ok(groups.into_values().collect())
}
