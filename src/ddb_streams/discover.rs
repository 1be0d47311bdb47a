//! Discovery: the stream's shards (DescribeStream, every page) against the
//! shards the reader knows and the positions the store saved.

use crate::ddb_streams::batch::Discovery;
use crate::ddb_streams::client::StreamsClient;
use crate::ddb_streams::position;
use crate::ddb_streams::reader::{Known, StreamReader};
use crate::ddb_streams::source::StreamsSource;
use crate::ddb_streams::tree;
use crate::pipeline::ShardPipeline;
use crate::state::{Checkpoint, ShardId, ShardSpec, StoredShardPosition};
use crate::Error;
use std::collections::BTreeMap;

impl<C: StreamsClient> StreamReader<C> {
    /// Every shard of the stream, paged by `ExclusiveStartShardId`.
    async fn describe_all(&self) -> Result<(Vec<ShardSpec>, usize), Error> {
        let mut shards = Vec::new();
        let mut pages = 0;
        let mut start: Option<String> = None;
        loop {
            let (calls, from) = (&self.calls, start.as_deref());
            let page = calls
                .call("DescribeStream", || {
                    calls.client.describe_stream(&calls.stream_arn, from)
                })
                .await?;
            pages += 1;
            shards.extend(page.shards);
            match page.last_evaluated_shard_id {
                Some(next) if start.as_deref() != Some(next.as_str()) => start = Some(next),
                _ => return Ok((shards, pages)),
            }
        }
    }

    /// Lists the stream's shards: new ones get a position (the configured
    /// initial position the first time, `TRIM_HORIZON` later; saved at once
    /// so a restart resumes them there), shards gone from the stream are
    /// dropped with their saved positions. The first discovery also loads
    /// the saved positions; positions of another stream (the table's stream
    /// was re-created) count as removed.
    pub async fn discover(&mut self) -> Result<Discovery, Error> {
        let (listed, pages) = self.describe_all().await?;
        let now = self.store().now();
        let store = self.store().clone();
        let stream_arn = self.calls.stream_arn.clone();
        let first = self.discovered_at.is_none();
        let mut saved: BTreeMap<ShardId, StoredShardPosition> = BTreeMap::new();
        let mut stale = Vec::new();
        if first {
            for position in store.positions().load().await? {
                if position.stream_arn == stream_arn {
                    saved.insert(position.shard_id.clone(), position);
                } else {
                    stale.push(position.shard_id);
                }
            }
        }
        let known: Vec<ShardId> = self.known.keys().chain(saved.keys()).cloned().collect();
        let diff = tree::diff_shards(&known, &listed);
        let mut removed = stale;
        removed.extend(diff.removed.iter().cloned());
        for id in &removed {
            self.known.remove(id);
            self.shards.close(id);
            if store.positions().remove(id).await? {
                tracing::info!(shard = %id, "shard gone from the stream; its position was dropped");
            }
        }
        let ordered = ShardSpec::parents_first(listed);
        let mut latest = Vec::new();
        for spec in &ordered {
            if let Some(known) = self.known.get_mut(&spec.shard_id) {
                known.spec = spec.clone();
                continue;
            }
            let stored = saved.remove(&spec.shard_id);
            let position = match &stored {
                Some(p) => position::from_stored(p),
                None if first => position::initial(self.config.initial_position),
                None => Checkpoint::TrimHorizon,
            };
            let mut known = Known {
                spec: spec.clone(),
                saved: None,
            };
            if stored.is_some() {
                known.saved = Some(position.clone());
            } else if let Some(p) = position::to_stored(&position, &stream_arn, spec)? {
                store.positions().save(&p).await?;
                known.saved = Some(position.clone());
            }
            if position == Checkpoint::Latest {
                latest.push(spec.shard_id.clone());
            }
            self.known.insert(spec.shard_id.clone(), known);
            let source = StreamsSource::new(self.calls.clone(), now);
            let pipeline = ShardPipeline::new(spec.shard_id.clone(), Some(position), None, source);
            self.shards.open(pipeline, spec.parents.clone());
        }
        self.order = ordered;
        for id in latest {
            self.take_latest(&id, now).await?;
        }
        self.discovered_at = Some(now);
        self.rediscover = false;
        Ok(Discovery {
            shards: self.order.len(),
            pages,
            new_shards: diff.new,
            removed_shards: removed,
        })
    }
}
