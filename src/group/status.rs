//! A group's status for operators, computed from one snapshot (pure): who is
//! alive, who owns which shard, how far each shard is checkpointed, how old
//! the last processed record is, open claims, and the EFO pool.

use crate::state::{
    duration_millis, Buckets, ConsumerId, EpochMillis, GroupSnapshot, ShardState, SpreadPolicy,
};
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::Duration;

/// The whole status of one group on one stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct GroupStatus {
    /// When the snapshot was read (ms since the epoch).
    pub taken_at: EpochMillis,
    /// Registered consumers.
    pub consumers: Vec<ConsumerRow>,
    /// Every shard of every scope (leased, standalone, standalone EFO).
    pub shards: Vec<ShardRow>,
    /// The EFO consumer pool.
    pub efo: Vec<EfoRow>,
    /// How many buckets the group's shard items are spread over.
    pub buckets: u16,
    /// How many its open shards would be given now (see
    /// [`Buckets::for_shards`]); more than `buckets` when the stream grew
    /// since the group was laid out.
    pub buckets_for_open_shards: u16,
    /// The latest operator's rewind, if any.
    pub rewind: Option<RewindRow>,
    /// A bounded group's (a backfill's) progress; `None` for a group that
    /// is not bounded.
    pub bounded: Option<BoundedRow>,
}

/// How far a bounded group (a backfill) is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BoundedRow {
    /// The group's end, for shards without their own.
    pub end: String,
    /// Its shards.
    pub shards: usize,
    /// Shards read to their end.
    pub done: usize,
    /// Every shard read to its end: the workers end, the fleet starts none.
    pub finished: bool,
}

/// The latest operator's rewind: how far it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RewindRow {
    /// What was asked for (`trim-horizon`, `latest`, `at-timestamp=<ms>`,
    /// `<shard>@<sequence number>`).
    pub request: String,
    /// Where the shards move.
    pub to: String,
    /// When it began (ms since the epoch): its id.
    pub started: EpochMillis,
    /// Shards it selected.
    pub shards: u32,
    /// Shards it has moved so far.
    pub moved: usize,
    /// Every shard moved: done. Otherwise it was cut short (or runs now):
    /// the same request run again finishes it.
    pub finished: bool,
}

/// One registered consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConsumerRow {
    /// Its id.
    pub id: String,
    /// Host it runs on.
    pub host: String,
    /// Milliseconds since its last heartbeat.
    pub heartbeat_age_ms: i64,
    /// Its active flag (an inactive consumer waits for an EFO consumer).
    pub active: bool,
    /// Reads every shard itself.
    pub standalone: bool,
    /// Fresh heartbeat, active, not standalone: may hold leases.
    pub live: bool,
    /// Live leases it holds.
    pub leases: usize,
}

/// One shard in one scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardRow {
    /// `group` (leased), `consumer:<id>` or `efo:<name>` (standalone).
    pub scope: String,
    /// The shard.
    pub shard: String,
    /// `open`, `waiting` (a parent is not depleted yet) or `depleted`.
    pub state: &'static str,
    /// Lease owner.
    pub owner: Option<String>,
    /// Age in ms of the owner's last heartbeat, which keeps its leases
    /// alive (`None`: no owner, or one not registered).
    pub owner_heartbeat_age_ms: Option<i64>,
    /// Lease counter (moves at every change of hands).
    pub counter: u64,
    /// Consumer that claimed the lease, and the claim's age in ms.
    pub claim: Option<(String, i64)>,
    /// The stored checkpoint.
    pub checkpoint: Option<String>,
    /// Age in ms of the last checkpointed record (by its arrival time). It
    /// is the consumer's lag only while the shard has newer records: an
    /// idle, caught-up shard shows the age of its last record. How far
    /// behind the tip a worker is comes from its `MillisBehindLatest`
    /// metric (docs/OPERATIONS.md).
    pub last_record_age_ms: Option<i64>,
    /// Parent shards.
    pub parents: Vec<String>,
}

/// One EFO consumer of the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EfoRow {
    /// Its name.
    pub name: String,
    /// Its ARN.
    pub arn: String,
    /// The consumer holding its lock.
    pub used_by: Option<String>,
    /// Milliseconds it has been free.
    pub idle_ms: Option<i64>,
}

fn shard_row(
    scope: String,
    s: &ShardState,
    snapshot: &GroupSnapshot,
    now: EpochMillis,
) -> ShardRow {
    let state = if s.depleted {
        "depleted"
    } else if !s.pending_parents.is_empty() {
        "waiting"
    } else {
        "open"
    };
    ShardRow {
        scope,
        shard: s.shard_id.to_string(),
        state,
        owner: s.owner.as_ref().map(ToString::to_string),
        owner_heartbeat_age_ms: s.owner.as_ref().and_then(|o| {
            let owner = snapshot.consumers.iter().find(|c| c.id() == o)?;
            Some(now - owner.heartbeat)
        }),
        counter: s.counter,
        claim: s.claim.as_ref().map(|c| (c.by.to_string(), now - c.at)),
        checkpoint: s.checkpoint.as_ref().map(ToString::to_string),
        last_record_age_ms: s
            .checkpoint_arrival
            .filter(|_| !s.depleted)
            .map(|t| now - t),
        parents: s.parents.iter().map(ToString::to_string).collect(),
    }
}

impl GroupStatus {
    /// The status in `snapshot`, judging liveness with `heartbeat_timeout`.
    pub fn from_snapshot(snapshot: &GroupSnapshot, heartbeat_timeout: Duration) -> Self {
        let now = snapshot.taken_at;
        // One look, for display: stored times against this machine's clock
        // (the rebalancer judges by observation instead, see `Sightings`).
        let limit = duration_millis(heartbeat_timeout);
        let live: BTreeSet<&ConsumerId> = snapshot
            .consumers
            .iter()
            .filter(|c| now - c.heartbeat < limit && c.active && !c.info.standalone)
            .map(|c| c.id())
            .collect();
        let consumers = snapshot
            .consumers
            .iter()
            .map(|c| ConsumerRow {
                id: c.id().to_string(),
                host: c.info.host.clone(),
                heartbeat_age_ms: now - c.heartbeat,
                active: c.active,
                standalone: c.info.standalone,
                live: live.contains(c.id()),
                leases: snapshot
                    .shards
                    .iter()
                    .filter(|s| !s.depleted && s.owner.as_ref() == Some(c.id()))
                    .count(),
            })
            .collect();
        let shards = snapshot
            .shards
            .iter()
            .map(|s| shard_row("group".to_owned(), s, snapshot, now))
            .chain(
                snapshot
                    .own_shards
                    .iter()
                    .map(|(c, s)| shard_row(format!("consumer:{c}"), s, snapshot, now)),
            )
            .chain(
                snapshot
                    .efo_shards
                    .iter()
                    .map(|(e, s)| shard_row(format!("efo:{e}"), s, snapshot, now)),
            )
            .collect();
        let efo = snapshot
            .efo
            .iter()
            .map(|e| EfoRow {
                name: e.name.to_string(),
                arn: e.arn.clone(),
                used_by: e.used_by.as_ref().map(ToString::to_string),
                idle_ms: e.released.filter(|_| e.used_by.is_none()).map(|r| now - r),
            })
            .collect();
        let open = snapshot
            .shards
            .iter()
            .filter(|s| !s.depleted && s.ending_sequence.is_none())
            .count();
        GroupStatus {
            taken_at: now,
            consumers,
            shards,
            efo,
            buckets: snapshot.buckets.count(),
            buckets_for_open_shards: Buckets::for_shards(open, &SpreadPolicy::default()).count(),
            bounded: snapshot
                .stream
                .as_ref()
                .and_then(|st| st.end.as_ref())
                .map(|end| {
                    let done = snapshot.shards.iter().filter(|s| s.depleted).count();
                    BoundedRow {
                        end: end.to_string(),
                        shards: snapshot.shards.len(),
                        done,
                        finished: done == snapshot.shards.len() && done > 0,
                    }
                }),
            rewind: snapshot
                .stream
                .as_ref()
                .and_then(|st| st.rewind.as_ref())
                .map(|r| RewindRow {
                    request: r.request.clone(),
                    to: r.to.to_string(),
                    started: r.id,
                    shards: r.shards,
                    moved: snapshot
                        .shards
                        .iter()
                        .filter(|s| s.rewound == Some(r.id))
                        .count(),
                    finished: r.finished.is_some(),
                }),
        }
    }
}
