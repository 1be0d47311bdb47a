//! The table layout: key attributes, sort-key prefixes and attribute names.
//!
//! One table holds any number of consumer groups. The partition key is
//! `<group>#<stream>`; every entity of that group is one item under it:
//!
//! | sk | entity |
//! | --- | --- |
//! | `STREAM` | stream creation time, schema version |
//! | `CONSUMER#<consumer>` | a consumer instance and its heartbeat |
//! | `EFO#<efo>` | an enhanced fan-out consumer of the pool and its lock |
//! | `SHARD#<shard>` | a shard, its lease and checkpoint (auto assignment) |
//! | `OWN#<consumer>#<shard>` | a shard checkpoint of a standalone consumer |
//! | `EFOSHARD#<efo>#<shard>` | a shard checkpoint of a standalone EFO consumer |
//! | `DDBPOS#<shard>` | a DynamoDB Streams shard position |
//! | `BATCH#<consumer>#<stream ARN>#<place>#<first seq>` | the progress of one event-source-mapped batch (expires by TTL) |
//! | `RECORD#<shard>#<seq>#<sub>` | failed attempts of a record of a self-managed consumer (expires by TTL) |
//! | `RECORD#<consumer>#<stream ARN>#<place>#<seq>#<sub>` | failed attempts of an event-source-mapped record (expires by TTL) |
//! | `PARKED#` and the same keys as `RECORD#` | a parked poison record (expires by TTL) |
//!
//! The place of an event-source-mapped record is its shard (Kinesis), or
//! its event id where the event names no shard (DynamoDB Streams); that of
//! a batch is its first record's.

use crate::names::{ConsumerId, EfoName, GroupName, ShardId, StreamName};

/// The newest schema version this code reads, stored in the `STREAM` item:
/// 1 for a group under one key, 2 for a group spread over buckets (older
/// code, which knows no buckets, refuses to start on it), 3 for a group
/// whose leases live by their owner's session (any layout: code that
/// renews each lease refuses to start on it, see docs/OPERATIONS.md,
/// "Upgrading a running group").
pub const SCHEMA_VERSION: u32 = 3;

/// How long after a group was raised to the schema of sessions, and after
/// code from before sessions was last seen running in it
/// ([`StreamState::older_seen`](crate::StreamState::older_seen)), its
/// consumers also renew each lease, as the older code did, so that an
/// older rebalancer or reaper still running never takes a lease it sees
/// unrenewed.
pub const UPGRADE_WINDOW: std::time::Duration = std::time::Duration::from_secs(20 * 60);
/// The default table name.
pub const DEFAULT_TABLE: &str = "shardkeeper-state";

/// The partition key attribute (string).
pub const PK: &str = "pk";
/// The sort key attribute (string).
pub const SK: &str = "sk";
/// The TTL attribute of the table (epoch seconds), for items that expire.
pub const TTL: &str = "expires_ttl";

/// Sort key of the stream item.
pub const SK_STREAM: &str = "STREAM";
/// Sort-key prefix of consumer items.
pub const SK_CONSUMER: &str = "CONSUMER#";
/// Sort-key prefix of enhanced fan-out consumer items.
pub const SK_EFO: &str = "EFO#";
/// Sort-key prefix of auto-assigned shard items.
pub const SK_SHARD: &str = "SHARD#";
/// Sort-key prefix of standalone consumer shard items.
pub const SK_OWN: &str = "OWN#";
/// Sort-key prefix of standalone EFO consumer shard items.
pub const SK_EFOSHARD: &str = "EFOSHARD#";
/// Sort-key prefix of DynamoDB Streams shard positions.
pub const SK_DDBPOS: &str = "DDBPOS#";

/// Attribute names (kept short: every byte of a name counts toward the item size).
pub mod attr {
    /// Stream: creation time of the stream the state belongs to (ms).
    pub const STREAM_CREATED: &str = "stream_created";
    /// Stream: layout version.
    pub const SCHEMA: &str = "schema";
    /// Stream: when the group was raised to the schema of sessions from an
    /// older one (ms, the raising writer's clock; absent for a group that
    /// started on it).
    pub const SESSIONS_SINCE: &str = "sessions_since";
    /// Stream: when code from before sessions was last seen running in the
    /// group (ms, the writer's clock).
    pub const OLDER_SEEN: &str = "older_seen";
    /// Stream: the latest rewind's id (when it started, ms).
    pub const REWIND_ID: &str = "rewind_id";
    /// Stream: what the latest rewind was asked to do (its request text).
    pub const REWIND_REQUEST: &str = "rewind_request";
    /// Stream: where the latest rewind moves the shards (a checkpoint's text).
    pub const REWIND_TO: &str = "rewind_to";
    /// Stream: how many shards the latest rewind moves.
    pub const REWIND_SHARDS: &str = "rewind_shards";
    /// Stream: when every shard of the latest rewind had moved (ms).
    pub const REWIND_DONE: &str = "rewind_done";
    /// Stream: a bounded group's (a backfill's) end for shards without
    /// their own (a checkpoint's text: each shard is read up to where that
    /// position resumes).
    pub const GROUP_END: &str = "group_end";
    /// Shard: where a bounded group stops reading it (a checkpoint's text).
    pub const END: &str = "end";
    /// Shard: the id of the rewind that last moved it.
    pub const REWOUND: &str = "rewound";
    /// Layout: how many bucket keys the group's shard items are spread over.
    pub const BUCKETS: &str = "buckets";
    /// Layout: the bucket count the items are being moved to.
    pub const MOVING_TO: &str = "moving_to";
    /// Any: last write time (ms).
    pub const UPDATED: &str = "updated";
    /// Consumer: application name.
    pub const APP: &str = "app";
    /// Consumer: host name.
    pub const HOST: &str = "host";
    /// Consumer: execution environment (e.g. `AWS_Lambda_provided.al2023`).
    pub const ENV: &str = "env";
    /// Consumer: process id.
    pub const PID: &str = "pid";
    /// Consumer: start time (ms).
    pub const STARTED: &str = "started";
    /// Consumer: last heartbeat (ms).
    pub const HEARTBEAT: &str = "heartbeat";
    /// Consumer: whether it may be given leases.
    pub const ACTIVE: &str = "active";
    /// Consumer: assignment counter, moved when another party gives it a lease.
    pub const ASSIGNED: &str = "assigned";
    /// Consumer: the shards given to it since it last acknowledged them
    /// (SS), beside its assignment counter.
    pub const GIVEN: &str = "given";
    /// Consumer: how many of the moves of its assignment counter named the
    /// shards given (moved with the counter, in the same update).
    pub const NAMED: &str = "named";
    /// Consumer: whether it reads every shard on its own.
    pub const STANDALONE: &str = "standalone";
    /// Consumer: the token of the process holding the id now.
    pub const TOKEN: &str = "token";
    /// Consumer: when its run ends (ms, its own clock).
    pub const ENDS: &str = "ends";
    /// Consumer: thousandths of the time its handler was busy since its last heartbeat.
    pub const BUSY: &str = "busy";
    /// Consumer: per shard it held, thousandths of the time its handler was busy on it.
    pub const LOADS: &str = "loads";
    /// Consumer: the lease term its session processes by (ms): an observer
    /// moves its leases only after its session went this long unchanged
    /// (or the observer's own term, if longer).
    pub const TERM: &str = "term";
    /// Consumer: it drains (the end of its run): kept inactive.
    pub const DRAINING: &str = "draining";
    /// Consumer: the registration's identity, drawn when the item is created.
    pub const INCARNATION: &str = "incarnation";
    /// Consumer: its session's beat counter, moved by every heartbeat.
    pub const BEAT: &str = "beat";
    /// Consumer: its leases taken from it while its session was seen stale
    /// (SS of `<shard>@<counter>`), until it acknowledges them.
    pub const REVOKED: &str = "revoked";
    /// Consumer: the shards of its leases another consumer claimed (SS),
    /// until it acknowledges them.
    pub const CLAIMED: &str = "claimed";
    /// EFO: consumer ARN.
    pub const ARN: &str = "arn";
    /// EFO: the consumer holding the lock.
    pub const USED_BY: &str = "used_by";
    /// EFO: lock counter, incremented by every lock and release.
    pub const LOCK_COUNTER: &str = "lock_counter";
    /// EFO: when the lock was last released (ms).
    pub const RELEASED: &str = "released";
    /// EFO: marked for deregistration: no new locks; deregistered, then removed.
    pub const RETIRING: &str = "retiring";
    /// Shard: the shard id.
    pub const SHARD: &str = "shard";
    /// Shard: parent shard ids (list).
    pub const PARENTS: &str = "parents";
    /// Shard: parents not depleted yet (string set; absent when none).
    pub const PENDING: &str = "pending";
    /// Shard: hash key range start.
    pub const HASH_LO: &str = "hash_lo";
    /// Shard: hash key range end.
    pub const HASH_HI: &str = "hash_hi";
    /// Shard: starting sequence number.
    pub const SEQ_LO: &str = "seq_lo";
    /// Shard: ending sequence number (closed shards only).
    pub const SEQ_HI: &str = "seq_hi";
    /// Shard: checkpoint text.
    pub const CP: &str = "cp";
    /// Shard: checkpoint sub-sequence number.
    pub const CP_SUB: &str = "cp_sub";
    /// Shard: checkpoint order key (fixed width, string-comparable).
    pub const CP_ORD: &str = "cp_ord";
    /// Shard: approximate arrival time of the checkpointed record (ms).
    pub const CP_ARRIVAL: &str = "cp_arrival";
    /// Shard: lease owner (absent when free).
    pub const OWNER: &str = "owner";
    /// Shard: lease expiry (ms).
    pub const EXPIRES: &str = "expires";
    /// Shard: lease counter, the fencing token.
    pub const COUNTER: &str = "counter";
    /// Shard: consumer that asked for the lease (hand-off claim).
    pub const CLAIM_BY: &str = "claim_by";
    /// Shard: when the claim was made (ms).
    pub const CLAIM_AT: &str = "claim_at";
    /// Shard: the holding token of the process the lease was taken for (a
    /// consumer's heartbeat token), so a retried take recognises its own write.
    pub const HOLDER: &str = "holder";
    /// Shard: closed and fully processed.
    pub const DEPLETED: &str = "depleted";
    /// Stream: the ARN of the stream the state belongs to; DynamoDB Streams
    /// position: the ARN of the stream read.
    pub const STREAM_ARN: &str = "stream_arn";
    /// DynamoDB Streams position: iterator type.
    pub const ITERATOR: &str = "iterator";
    /// DynamoDB Streams position: sequence number.
    pub const SEQ: &str = "seq";
    /// DynamoDB Streams position: parent shard id.
    pub const PARENT: &str = "parent";
    /// Record: failed attempts.
    pub const ATTEMPTS: &str = "attempts";
    /// Attempts item: the failed attempt counted last (an invocation's
    /// request id), so an attempt sent again after a lost answer is not
    /// counted twice.
    pub const LAST_ATTEMPT: &str = "last_attempt";
    /// Batch progress: the delivery (an invocation's request id) that wrote
    /// it last.
    pub const RUN_BY: &str = "run_by";
    /// Batch progress: that delivery returned (it did not die mid-batch).
    pub const RUN_ENDED: &str = "run_ended";
    /// Batch progress: the record that delivery started last and had not
    /// finished when it wrote (a guarded delivery's mark): sequence number.
    pub const RUN_STARTED: &str = "run_started";
    /// Batch progress: the started record's sub-sequence number.
    pub const RUN_STARTED_SUB: &str = "run_started_sub";
    /// Batch progress: records done after the checkpoint (past a failure),
    /// `<sequence>/<sub-sequence>` each: a batch skips them.
    pub const DONE_AFTER: &str = "done_after";
    /// Batch progress: digests of prefixes of the batch that stored it.
    pub const PREFIXES: &str = "prefixes";
    /// Batch progress: the digest of the whole batch that stored it.
    pub const CONTENT: &str = "content";
    /// An event-source-mapped record: the consumer (function) whose it is.
    pub const CONSUMER: &str = "consumer";
    /// A DynamoDB Streams record: its event id.
    pub const EVENT_ID: &str = "event_id";
    /// Parked record: sub-sequence number.
    pub const SUB: &str = "sub";
    /// Parked record: partition key.
    pub const PARTITION_KEY: &str = "partition_key";
    /// The event source ARN of a parked record.
    pub const SOURCE: &str = "source";
    /// Parked record: payload (binary), or a prefix of it.
    pub const DATA: &str = "data";
    /// Parked record: the whole payload's size.
    pub const DATA_SIZE: &str = "data_size";
    /// Parked record: the whole payload's SHA-256, when only a prefix is kept.
    pub const DATA_SHA256: &str = "data_sha256";
    /// Parked record: the last error.
    pub const ERROR: &str = "error";
    /// Parked record: when it was parked (ms).
    pub const PARKED: &str = "parked";
}

/// Where a shard's state lives: the storage modes of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ShardScope {
    /// Automatic shard assignment: one `SHARD#` item per shard, leased to one consumer at a time.
    Group,
    /// Standalone: this consumer reads every shard with its own checkpoints (`OWN#`).
    Consumer(ConsumerId),
    /// Standalone with enhanced fan-out: checkpoints per EFO consumer (`EFOSHARD#`).
    Efo(EfoName),
}

impl ShardScope {
    /// The sort-key prefix of this scope's shard items.
    pub fn prefix(&self) -> String {
        match self {
            ShardScope::Group => SK_SHARD.to_owned(),
            ShardScope::Consumer(c) => format!("{SK_OWN}{c}#"),
            ShardScope::Efo(e) => format!("{SK_EFOSHARD}{e}#"),
        }
    }

    /// The sort key of one shard item in this scope.
    pub fn shard_sk(&self, shard: &ShardId) -> String {
        format!("{}{shard}", self.prefix())
    }
}

/// The partition key of a group on a stream.
pub fn partition_key(group: &GroupName, stream: &StreamName) -> String {
    format!("{group}#{stream}")
}

/// The sort key of a consumer item.
pub fn consumer_sk(consumer: &ConsumerId) -> String {
    format!("{SK_CONSUMER}{consumer}")
}

/// The sort key of an enhanced fan-out consumer item.
pub fn efo_sk(name: &EfoName) -> String {
    format!("{SK_EFO}{name}")
}

/// The sort key of a DynamoDB Streams shard position item.
pub fn position_sk(shard: &ShardId) -> String {
    format!("{SK_DDBPOS}{shard}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cannot_collide_across_scopes() {
        let shard = ShardId::new("shardId-1").unwrap();
        let c = ConsumerId::new("c1").unwrap();
        let e = EfoName::new("c1").unwrap();
        let keys = [
            ShardScope::Group.shard_sk(&shard),
            ShardScope::Consumer(c.clone()).shard_sk(&shard),
            ShardScope::Efo(e.clone()).shard_sk(&shard),
            consumer_sk(&c),
            efo_sk(&e),
            position_sk(&shard),
        ];
        let unique: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len(), "{keys:?}");
        assert_eq!(
            partition_key(
                &GroupName::new("g").unwrap(),
                &StreamName::new("s").unwrap()
            ),
            "g#s"
        );
    }
}
