//! The entities of a consumer group as the state table stores them.

use crate::clock::EpochMillis;
use crate::error::Result;
use crate::item::{ItemReader, RawItem};
use crate::names::{ConsumerId, EfoName, ShardId};
use crate::schema::attr;
use crate::sequence::{Checkpoint, SequenceNumber};

/// The `STREAM` item: which incarnation of the stream the group's state belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamState {
    /// The stream's creation time (ms); a different value means the stream was re-created.
    pub stream_created: EpochMillis,
    /// The layout version that wrote the state.
    pub schema_version: u32,
    /// The ARN of the stream the state belongs to (`None`: recorded before
    /// ARNs were).
    pub stream_arn: Option<String>,
    /// When the group was raised from an older schema to the one of
    /// sessions (ms; `None`: it started on it): processes of the older
    /// code may run beside the newer for a while after (see
    /// [`UPGRADE_WINDOW`](crate::UPGRADE_WINDOW)).
    pub sessions_since: Option<EpochMillis>,
    /// When code from before sessions was last seen running in the group
    /// (ms; `None`: never since the raise): a consumer of that code
    /// registered, or a claim of its rebalancer. The upgrade window runs on
    /// from it (see [`StreamState::upgrade_window_ends`]).
    pub older_seen: Option<EpochMillis>,
    /// The latest operator's rewind of the group's positions, if any.
    pub rewind: Option<RewindState>,
    /// A bounded group (a backfill) reads each shard up to where this
    /// position resumes (see [`ShardState::end`]), for shards without an
    /// end of their own (those found later included); `None`: the group
    /// is not bounded.
    pub end: Option<Checkpoint>,
}

/// An operator's rewind of a running group's positions, as the `STREAM`
/// item records it: begun before the first shard moves, finished once
/// every shard it selected has moved. A rewind cut short stays unfinished
/// (shown by `status`), and running the same request again moves the
/// shards it has not moved yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindState {
    /// Its id: when it began (ms, the operator's clock). Each shard it moved
    /// carries it ([`ShardState::rewound`]).
    pub id: EpochMillis,
    /// What was asked for, as the operator wrote it (`trim-horizon`,
    /// `latest`, `at-timestamp=<ms>`, `<shard>@<sequence number>`).
    pub request: String,
    /// Where the shards move to.
    pub to: Checkpoint,
    /// How many shards it selected.
    pub shards: u32,
    /// When every selected shard had moved (ms); `None`: not yet.
    pub finished: Option<EpochMillis>,
}

/// Who a consumer is and how its run goes: written at registration and
/// refreshed by each heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerInfo {
    /// The consumer's unique id.
    pub id: ConsumerId,
    /// Application name.
    pub app: String,
    /// Host name.
    pub host: String,
    /// Execution environment (e.g. `AWS_Lambda_provided.al2023`, or `process`).
    pub env: String,
    /// Process id.
    pub pid: u32,
    /// When the consumer started (ms).
    pub started: EpochMillis,
    /// True for the standalone modes (reads every shard, is given no leases).
    pub standalone: bool,
    /// When its run ends, by its own clock (a Lambda invocation's deadline);
    /// `None`: no end is planned. An observer reads it against the heartbeat
    /// time written beside it, so clocks that differ do not matter.
    pub ends: Option<EpochMillis>,
    /// How busy its handler was since its last heartbeat, in thousandths of
    /// the time (`None`: not measured).
    pub busy: Option<u16>,
    /// How busy its handler was on each shard it held, since its last
    /// heartbeat, in thousandths of the time (every shard it held, 0 for an
    /// idle one; empty: not measured): the rebalancer balances load by it.
    /// Written with `busy`.
    pub loads: std::collections::BTreeMap<crate::names::ShardId, u16>,
    /// It drains (the end of its run): its heartbeats keep it inactive, and
    /// nothing makes it active again (not a re-registration after a reap,
    /// nor an enhanced fan-out consumer locked), so it is given no leases.
    pub draining: bool,
    /// The lease term its session processes by: a holder processes until
    /// its last heartbeat that went through plus this term, so an observer
    /// moves its leases only once its session went unchanged for this long
    /// (or for the observer's own term, if that is longer). `None`: not
    /// said (code from before it; the observer's term stands).
    pub lease_term: Option<std::time::Duration>,
}

/// A registered consumer of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerState {
    /// Who it is.
    pub info: ConsumerInfo,
    /// Its last heartbeat (ms, the consumer's wall clock: for display; an
    /// observer judges liveness by how long it has gone unchanged).
    pub heartbeat: EpochMillis,
    /// Whether it may be given leases (false while it waits for an EFO consumer).
    pub active: bool,
    /// The token of the process holding the id (see [`Consumers::heartbeat_as`](crate::Consumers::heartbeat_as)).
    pub token: Option<String>,
    /// Its session's beat counter, moved by every heartbeat (`None`: a
    /// consumer of code from before sessions, which renews each lease).
    pub beat: Option<u64>,
}

impl ConsumerState {
    /// The consumer's id.
    pub fn id(&self) -> &ConsumerId {
        &self.info.id
    }

    /// Its session as seen now: what a take of one of its leases is
    /// conditioned on.
    pub fn session(&self) -> SessionSeen {
        SessionSeen::Beating {
            consumer: self.info.id.clone(),
            heartbeat: self.heartbeat,
            beat: self.beat,
        }
    }
}

/// A lease owner's session as an observer saw it. A lease moves away from
/// a holder that did not release it only on the session seen: a heartbeat
/// that lands first fails the take, and one that lands after it learns of
/// the take in its answer (see [`Leases::take`](crate::Leases::take)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionSeen {
    /// The owner was not registered (it left, or was reaped): the take
    /// applies only while it still is not.
    Unregistered {
        /// The owner.
        consumer: ConsumerId,
    },
    /// The owner's heartbeat as seen: the take applies only while it has
    /// not heartbeated since.
    Beating {
        /// The owner.
        consumer: ConsumerId,
        /// Its stored heartbeat time.
        heartbeat: EpochMillis,
        /// Its beat counter (`None`: code from before sessions).
        beat: Option<u64>,
    },
}

impl SessionSeen {
    /// The owner whose session this is.
    pub fn consumer(&self) -> &ConsumerId {
        match self {
            SessionSeen::Unregistered { consumer } | SessionSeen::Beating { consumer, .. } => {
                consumer
            }
        }
    }
}

/// An enhanced fan-out consumer of the group's pool, and who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EfoState {
    /// The EFO consumer name.
    pub name: EfoName,
    /// Its ARN.
    pub arn: String,
    /// The consumer holding the lock, if any.
    pub used_by: Option<ConsumerId>,
    /// Incremented by every lock and release: the fencing token of the lock.
    pub lock_counter: u64,
    /// When it was last released (or registered) while free (ms).
    pub released: Option<EpochMillis>,
    /// Marked for deregistration: it takes no new locks and goes once
    /// deregistered from Kinesis.
    pub retiring: bool,
}

/// The lock a consumer holds on an enhanced fan-out consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EfoLock {
    /// The EFO consumer name.
    pub name: EfoName,
    /// Its ARN, to subscribe with.
    pub arn: String,
    /// The holder.
    pub consumer: ConsumerId,
    /// The lock counter at the time of locking.
    pub lock_counter: u64,
}

/// A held shard lease: the fencing token for checkpoints and release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The leased shard.
    pub shard_id: ShardId,
    /// The holder.
    pub owner: ConsumerId,
    /// The lease counter when the lease was taken: any change of owner moves it on.
    pub counter: u64,
    /// The stored expiry (ms): the take's time plus the term (a lease lives
    /// by its owner's session, see [`crate::Leases::take`]).
    pub expires: EpochMillis,
}

/// A request by another consumer to be handed the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The consumer that wants the lease.
    pub by: ConsumerId,
    /// When it asked (ms).
    pub at: EpochMillis,
}

/// A shard and everything known about its processing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardState {
    /// The shard id.
    pub shard_id: ShardId,
    /// Its parents (one after a split, two after a merge).
    pub parents: Vec<ShardId>,
    /// Parents not depleted yet: the shard may not be leased while any is left.
    pub pending_parents: Vec<ShardId>,
    /// Hash key range (start, end), when known.
    pub hash_range: Option<(String, String)>,
    /// First sequence number of the shard, when known.
    pub starting_sequence: Option<SequenceNumber>,
    /// Last sequence number of a closed shard.
    pub ending_sequence: Option<SequenceNumber>,
    /// The stored checkpoint, if any.
    pub checkpoint: Option<Checkpoint>,
    /// Approximate arrival time of the checkpointed record (ms).
    pub checkpoint_arrival: Option<EpochMillis>,
    /// The lease owner, if any.
    pub owner: Option<ConsumerId>,
    /// The holding token of the owner's process the lease was taken for, if known.
    pub holder: Option<String>,
    /// When the lease runs out (ms, the last writer's wall clock: for
    /// display; written by a take, and by each renewal of code from before
    /// sessions, so it also tells those apart).
    pub expires: Option<EpochMillis>,
    /// The lease counter (fencing token).
    pub counter: u64,
    /// An open hand-off claim.
    pub claim: Option<Claim>,
    /// Closed and fully processed.
    pub depleted: bool,
    /// Where a bounded group stops reading it: the records up to where
    /// this position resumes are read, none after (`SHARD_END`: all of
    /// them; `TRIM_HORIZON`: none; `AT_TIMESTAMP`: those that arrived
    /// before the time; after a record: up to it). `None`: the group's end
    /// ([`StreamState::end`]).
    pub end: Option<Checkpoint>,
    /// The id of the operator's rewind that last moved it
    /// ([`RewindState::id`]), if any.
    pub rewound: Option<EpochMillis>,
    /// Last write (ms).
    pub updated: EpochMillis,
}

impl ShardState {
    /// The lease as stored, if the shard has an owner (run out or not).
    pub fn lease(&self) -> Option<Lease> {
        Some(Lease {
            shard_id: self.shard_id.clone(),
            owner: self.owner.clone()?,
            counter: self.counter,
            expires: self.expires?,
        })
    }

    /// The shard as the stream lists it (id, parents, hash and sequence
    /// ranges), without its processing state.
    pub fn spec(&self) -> crate::ShardSpec {
        crate::ShardSpec {
            shard_id: self.shard_id.clone(),
            parents: self.parents.clone(),
            hash_range: self.hash_range.clone(),
            starting_sequence: self.starting_sequence.clone(),
            ending_sequence: self.ending_sequence.clone(),
        }
    }

    /// True when the shard may be leased: not depleted and no parent pending.
    pub fn is_leasable(&self) -> bool {
        !self.depleted && self.pending_parents.is_empty()
    }
}

/// The saved position of one DynamoDB Streams shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredShardPosition {
    /// The DynamoDB stream ARN.
    pub stream_arn: String,
    /// The shard id.
    pub shard_id: ShardId,
    /// The iterator type to resume with: `TRIM_HORIZON`, `LATEST`,
    /// `AT_SEQUENCE_NUMBER` or `AFTER_SEQUENCE_NUMBER`.
    pub iterator_type: String,
    /// The sequence number for the `*_SEQUENCE_NUMBER` iterator types.
    pub sequence_number: Option<SequenceNumber>,
    /// The parent shard, if any.
    pub parent_shard_id: Option<ShardId>,
    /// Last write (ms).
    pub updated: EpochMillis,
}

fn shard_ids(r: &ItemReader<'_>, name: &str) -> Result<Vec<ShardId>> {
    r.strings(name)?
        .into_iter()
        .map(|s| r.parse(name, ShardId::new(s)))
        .collect()
}

fn opt_seq(r: &ItemReader<'_>, name: &str) -> Result<Option<SequenceNumber>> {
    r.opt_s(name)?
        .map(|s| r.parse(name, SequenceNumber::new(s)))
        .transpose()
}

impl StreamState {
    /// Until when sessions also renew each lease (`None`: the group never
    /// ran code from before sessions): the upgrade window after the raise,
    /// or after code from before sessions was last seen, whichever is later.
    pub fn upgrade_window_ends(&self) -> Option<EpochMillis> {
        let window = crate::clock::duration_millis(crate::schema::UPGRADE_WINDOW);
        self.sessions_since
            .into_iter()
            .chain(self.older_seen)
            .max()
            .map(|t| t + window)
    }

    pub(crate) fn from_item(item: &RawItem) -> Result<Self> {
        let r = ItemReader::new(item);
        Ok(StreamState {
            stream_created: r.i64_or(attr::STREAM_CREATED, 0)?,
            schema_version: r.u64_or(attr::SCHEMA, 0)? as u32,
            stream_arn: r.opt_s(attr::STREAM_ARN)?.map(str::to_owned),
            sessions_since: r.opt_i64(attr::SESSIONS_SINCE)?,
            older_seen: r.opt_i64(attr::OLDER_SEEN)?,
            rewind: match (r.opt_i64(attr::REWIND_ID)?, r.opt_s(attr::REWIND_TO)?) {
                (Some(id), Some(to)) => Some(RewindState {
                    id,
                    request: r
                        .opt_s(attr::REWIND_REQUEST)?
                        .unwrap_or_default()
                        .to_owned(),
                    to: r.parse(attr::REWIND_TO, to.parse::<Checkpoint>())?,
                    shards: r.u64_or(attr::REWIND_SHARDS, 0)? as u32,
                    finished: r.opt_i64(attr::REWIND_DONE)?,
                }),
                _ => None,
            },
            end: r
                .opt_s(attr::GROUP_END)?
                .map(|e| r.parse(attr::GROUP_END, e.parse::<Checkpoint>()))
                .transpose()?,
        })
    }
}

impl ConsumerState {
    pub(crate) fn from_item(id: &str, item: &RawItem) -> Result<Self> {
        let r = ItemReader::new(item);
        Ok(ConsumerState {
            info: ConsumerInfo {
                id: r.parse("sk", ConsumerId::new(id))?,
                app: r.opt_s(attr::APP)?.unwrap_or_default().to_owned(),
                host: r.opt_s(attr::HOST)?.unwrap_or_default().to_owned(),
                env: r.opt_s(attr::ENV)?.unwrap_or_default().to_owned(),
                pid: r.u64_or(attr::PID, 0)? as u32,
                started: r.i64_or(attr::STARTED, 0)?,
                standalone: r.bool_or(attr::STANDALONE, false)?,
                ends: r.opt_i64(attr::ENDS)?,
                busy: r.opt_i64(attr::BUSY)?.map(|b| b.clamp(0, 1000) as u16),
                loads: loads_of(item),
                draining: r.bool_or(attr::DRAINING, false)?,
                lease_term: r.opt_u64(attr::TERM)?.map(std::time::Duration::from_millis),
            },
            heartbeat: r.i64_or(attr::HEARTBEAT, 0)?,
            active: r.bool_or(attr::ACTIVE, true)?,
            token: r.opt_s(attr::TOKEN)?.map(str::to_owned),
            beat: r.opt_u64(attr::BEAT)?,
        })
    }
}

/// The per-shard loads a consumer's item holds (none unreadable: a load
/// that does not read is left out).
fn loads_of(item: &RawItem) -> std::collections::BTreeMap<crate::names::ShardId, u16> {
    item.get(attr::LOADS)
        .and_then(|v| v.as_m().ok())
        .into_iter()
        .flatten()
        .filter_map(|(shard, load)| {
            let shard = crate::names::ShardId::new(shard).ok()?;
            let load = load.as_n().ok()?.parse::<u64>().ok()?.min(1000) as u16;
            Some((shard, load))
        })
        .collect()
}

impl EfoState {
    pub(crate) fn from_item(name: &str, item: &RawItem) -> Result<Self> {
        let r = ItemReader::new(item);
        Ok(EfoState {
            name: r.parse("sk", EfoName::new(name))?,
            arn: r.s(attr::ARN)?.to_owned(),
            used_by: r
                .opt_s(attr::USED_BY)?
                .map(|c| r.parse(attr::USED_BY, ConsumerId::new(c)))
                .transpose()?,
            lock_counter: r.u64_or(attr::LOCK_COUNTER, 0)?,
            released: r.opt_i64(attr::RELEASED)?,
            retiring: r.bool_or(attr::RETIRING, false)?,
        })
    }
}

/// The checkpoint an item holds (a shard's, or a batch's), if any.
pub(crate) fn stored_checkpoint(item: &RawItem) -> Result<Option<Checkpoint>> {
    let r = ItemReader::new(item);
    r.opt_s(attr::CP)?
        .map(|text| {
            let sub = r.u64_or(attr::CP_SUB, 0)?;
            r.parse(attr::CP, Checkpoint::from_stored(text, sub))
        })
        .transpose()
}

impl ShardState {
    pub(crate) fn from_item(item: &RawItem) -> Result<Self> {
        let r = ItemReader::new(item);
        let checkpoint = stored_checkpoint(item)?;
        let hash_range = match (r.opt_s(attr::HASH_LO)?, r.opt_s(attr::HASH_HI)?) {
            (Some(lo), Some(hi)) => Some((lo.to_owned(), hi.to_owned())),
            _ => None,
        };
        let claim = match (r.opt_s(attr::CLAIM_BY)?, r.opt_i64(attr::CLAIM_AT)?) {
            (Some(by), at) => Some(Claim {
                by: r.parse(attr::CLAIM_BY, ConsumerId::new(by))?,
                at: at.unwrap_or(0),
            }),
            _ => None,
        };
        Ok(ShardState {
            shard_id: r.parse(attr::SHARD, ShardId::new(r.s(attr::SHARD)?))?,
            parents: shard_ids(&r, attr::PARENTS)?,
            pending_parents: shard_ids(&r, attr::PENDING)?,
            hash_range,
            starting_sequence: opt_seq(&r, attr::SEQ_LO)?,
            ending_sequence: opt_seq(&r, attr::SEQ_HI)?,
            checkpoint,
            checkpoint_arrival: r.opt_i64(attr::CP_ARRIVAL)?,
            owner: r
                .opt_s(attr::OWNER)?
                .map(|o| r.parse(attr::OWNER, ConsumerId::new(o)))
                .transpose()?,
            holder: r.opt_s(attr::HOLDER)?.map(str::to_owned),
            expires: r.opt_i64(attr::EXPIRES)?,
            counter: r.u64_or(attr::COUNTER, 0)?,
            claim,
            depleted: r.bool_or(attr::DEPLETED, false)?,
            end: r
                .opt_s(attr::END)?
                .map(|e| r.parse(attr::END, e.parse::<Checkpoint>()))
                .transpose()?,
            rewound: r.opt_i64(attr::REWOUND)?,
            updated: r.i64_or(attr::UPDATED, 0)?,
        })
    }
}

impl StoredShardPosition {
    pub(crate) fn from_item(item: &RawItem) -> Result<Self> {
        let r = ItemReader::new(item);
        Ok(StoredShardPosition {
            stream_arn: r.s(attr::STREAM_ARN)?.to_owned(),
            shard_id: r.parse(attr::SHARD, ShardId::new(r.s(attr::SHARD)?))?,
            iterator_type: r.s(attr::ITERATOR)?.to_owned(),
            sequence_number: opt_seq(&r, attr::SEQ)?,
            parent_shard_id: r
                .opt_s(attr::PARENT)?
                .map(|p| r.parse(attr::PARENT, ShardId::new(p)))
                .transpose()?,
            updated: r.i64_or(attr::UPDATED, 0)?,
        })
    }
}
