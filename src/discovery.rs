//! Shard discovery: the stream's shards into the state, parents first.

use crate::state::{
    EnsureShard, ForStream, GroupSnapshot, RetryPolicy, ShardId, ShardScope, ShardSpec, ShardState,
    StateStore, StreamAddress,
};
use crate::Result;
use std::collections::{BTreeMap, BTreeSet};

/// What a discovery pass found and recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DiscoveryReport {
    /// Shards the stream has (open and closed, still within retention).
    pub listed: usize,
    /// ListShards pages read.
    pub pages: usize,
    /// Shards that got state now.
    pub created: Vec<String>,
    /// Shards now recorded as closed (with their ending sequence number).
    pub closed: Vec<String>,
}

/// Every shard of the stream, paged by stream name + exclusive start shard id
/// (which AWS accepts and which servers that fail on `NextToken` also serve).
pub async fn list_stream_shards(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &StreamAddress,
    retry: &RetryPolicy,
) -> Result<(Vec<ShardSpec>, usize)> {
    let mut specs = Vec::new();
    let mut pages = 0;
    let mut start: Option<String> = None;
    loop {
        let req = kinesis
            .list_shards()
            .for_stream(stream)
            .set_exclusive_start_shard_id(start.clone());
        let out = crate::state::call_kinesis(retry, "ListShards", || req.clone().send()).await?;
        pages += 1;
        let page = out.shards();
        for shard in page {
            specs.push(ShardSpec::from_kinesis(shard)?);
        }
        match (page.last(), out.next_token()) {
            (Some(last), Some(_)) => start = Some(last.shard_id().to_owned()),
            _ => return Ok((specs, pages)),
        }
    }
}

/// Lists the stream's shards and records what the snapshot lacks: new shards
/// (parents first, so children start with their parents pending) and shards
/// that closed since (their ending sequence number).
pub async fn discover_shards(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    snapshot: &GroupSnapshot,
) -> Result<DiscoveryReport> {
    discover_shards_in(store, kinesis, &ShardScope::Group, &snapshot.shards).await
}

/// [`discover_shards`] for any scope (a standalone consumer discovers into
/// its own), given the shards the scope already has.
pub async fn discover_shards_in(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    scope: &ShardScope,
    known_shards: &[ShardState],
) -> Result<DiscoveryReport> {
    let config = store.config();
    let (specs, pages) = list_stream_shards(kinesis, &config.stream, &config.retry).await?;
    let known: BTreeMap<&ShardId, bool> = known_shards
        .iter()
        .map(|s| (&s.shard_id, s.ending_sequence.is_some()))
        .collect();
    let mut report = DiscoveryReport {
        listed: specs.len(),
        pages,
        ..DiscoveryReport::default()
    };
    // A closed shard without state whose child has state was read and its
    // state removed past retention (the reaper's, while Kinesis still lists
    // it): it is not created again, or it would be read a second time.
    let parents_of_known: BTreeSet<&ShardId> = specs
        .iter()
        .filter(|child| known.contains_key(&child.shard_id))
        .flat_map(|child| child.parents.iter())
        .collect();
    let retired: BTreeSet<ShardId> = specs
        .iter()
        .filter(|s| s.ending_sequence.is_some() && !known.contains_key(&s.shard_id))
        .filter(|s| parents_of_known.contains(&s.shard_id))
        .map(|s| s.shard_id.clone())
        .collect();
    for spec in ShardSpec::parents_first(specs) {
        let changed = match known.get(&spec.shard_id) {
            None => !retired.contains(&spec.shard_id),
            Some(closed) => !closed && spec.ending_sequence.is_some(),
        };
        if !changed {
            continue;
        }
        match store.shards().ensure(scope, &spec).await? {
            EnsureShard::Created => report.created.push(spec.shard_id.to_string()),
            EnsureShard::Closed => report.closed.push(spec.shard_id.to_string()),
            EnsureShard::Existing => {}
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str, parents: &[&str]) -> ShardSpec {
        ShardSpec::new(id).unwrap().with_parents(parents).unwrap()
    }

    #[test]
    fn parents_come_before_children() {
        // Merged shard z has parents x and y; y is a child of a.
        let specs = vec![
            spec("z", &["x", "y"]),
            spec("y", &["a"]),
            spec("x", &[]),
            spec("a", &["gone"]),
        ];
        let order: Vec<String> = ShardSpec::parents_first(specs)
            .iter()
            .map(|s| s.shard_id.to_string())
            .collect();
        let pos = |id: &str| order.iter().position(|o| o == id).unwrap();
        assert!(pos("a") < pos("y"));
        assert!(pos("x") < pos("z") && pos("y") < pos("z"));
        assert_eq!(order.len(), 4);
    }
}
