//! The shard map: the pipelines of the shards one consumer reads, which of
//! them are due, parent before child. The shard worker keeps the shards it
//! holds in one (a shard leaves it when its lease goes or it is completed);
//! the DynamoDB Streams reader every shard of its stream (a finished shard
//! stays, with its position, until the stream drops it).

use crate::pipeline::{RecordSource, ShardPipeline};
use crate::state::{Checkpoint, EpochMillis, ShardId};
use std::collections::BTreeMap;
use std::time::Instant;

/// The pipelines of the shards read, in the order they were opened.
#[derive(Debug)]
pub(crate) struct ShardMap<S> {
    pipelines: BTreeMap<ShardId, Held<S>>,
    /// The shards in the order opened (a reader opens parents first).
    order: Vec<ShardId>,
}

#[derive(Debug)]
struct Held<S> {
    pipeline: ShardPipeline<S>,
    parents: Vec<ShardId>,
}

impl<S> Default for ShardMap<S> {
    fn default() -> Self {
        ShardMap {
            pipelines: BTreeMap::new(),
            order: Vec::new(),
        }
    }
}

impl<S: RecordSource> ShardMap<S> {
    /// Reads `pipeline`'s shard from now on; a shard already read is
    /// replaced. `parents`: the shard's parents, read to their end first
    /// when they are in the map too.
    pub fn open(&mut self, pipeline: ShardPipeline<S>, parents: Vec<ShardId>) {
        let shard = pipeline.shard().clone();
        if self
            .pipelines
            .insert(shard.clone(), Held { pipeline, parents })
            .is_none()
        {
            self.order.push(shard);
        }
    }

    /// Stops reading `shard`; its pipeline, if it was read.
    pub fn close(&mut self, shard: &ShardId) -> Option<ShardPipeline<S>> {
        let held = self.pipelines.remove(shard)?;
        self.order.retain(|s| s != shard);
        Some(held.pipeline)
    }

    /// Stops reading every shard; the shards, in the order opened.
    pub fn close_all(&mut self) -> Vec<ShardId> {
        self.pipelines.clear();
        std::mem::take(&mut self.order)
    }

    pub fn get(&self, shard: &ShardId) -> Option<&ShardPipeline<S>> {
        self.pipelines.get(shard).map(|h| &h.pipeline)
    }

    pub fn get_mut(&mut self, shard: &ShardId) -> Option<&mut ShardPipeline<S>> {
        self.pipelines.get_mut(shard).map(|h| &mut h.pipeline)
    }

    /// The pipelines of `shards` that are in the map, each once, to step
    /// them at once.
    pub fn get_many_mut(&mut self, shards: &[ShardId]) -> Vec<&mut ShardPipeline<S>> {
        self.pipelines
            .iter_mut()
            .filter(|(s, _)| shards.contains(s))
            .map(|(_, h)| &mut h.pipeline)
            .collect()
    }

    pub fn contains(&self, shard: &ShardId) -> bool {
        self.pipelines.contains_key(shard)
    }

    pub fn is_empty(&self) -> bool {
        self.pipelines.is_empty()
    }

    pub fn len(&self) -> usize {
        self.pipelines.len()
    }

    /// The shards read, in the order opened.
    pub fn shards(&self) -> &[ShardId] {
        &self.order
    }

    /// The pipelines, in the order opened.
    pub fn pipelines(&self) -> impl Iterator<Item = &ShardPipeline<S>> {
        self.order.iter().map(|s| &self.pipelines[s].pipeline)
    }

    /// The pipelines, to change how their sources read.
    pub fn pipelines_mut(&mut self) -> impl Iterator<Item = &mut ShardPipeline<S>> {
        self.pipelines.values_mut().map(|h| &mut h.pipeline)
    }

    /// Whether `shard`'s pipeline is read to its end and all of it is
    /// committed (`None`: not in the map).
    pub fn finished(&self, shard: &ShardId) -> Option<bool> {
        self.get(shard).map(ShardPipeline::finished)
    }

    /// The shards to read now, in the order opened: each whose source is
    /// due and that is not finished, once every parent of it in the map is
    /// finished (a parent not in the map is read by another consumer, or
    /// gone).
    pub fn due(&self, now: Instant) -> Vec<ShardId> {
        self.order
            .iter()
            .filter(|s| {
                let held = &self.pipelines[*s];
                !held.pipeline.finished()
                    && held.pipeline.due(now)
                    && held.parents.iter().all(|p| self.finished(p) != Some(false))
            })
            .cloned()
            .collect()
    }

    /// Where each shard stands, for checkpoints at a hand-over or a stop
    /// (see [`ShardPipeline::handover_position`]).
    pub fn handover_positions(&self) -> BTreeMap<ShardId, (Checkpoint, Option<EpochMillis>)> {
        self.pipelines
            .iter()
            .filter_map(|(s, h)| h.pipeline.handover_position().map(|p| (s.clone(), p)))
            .collect()
    }

    /// `MillisBehindLatest` of the last read of each shard that has one.
    pub fn millis_behind(&self) -> BTreeMap<ShardId, i64> {
        self.pipelines
            .iter()
            .filter_map(|(s, h)| h.pipeline.millis_behind().map(|m| (s.clone(), m)))
            .collect()
    }
}
