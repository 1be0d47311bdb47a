//! What the planners decide: actions, each applied with one conditional write.

use crate::state::{
    ConsumerId, ConsumerState, EfoLock, EfoName, EpochMillis, Lease, ShardId, ShardScope, TakeFrom,
};

/// One change to the group's state. Every action carries the state it was
/// decided on (a counter, a heartbeat), so applying it is conditional on
/// nothing having changed since: a stale action loses its condition and is
/// skipped, never applied on top of newer state.
///
/// Public only with the `testing` feature: a planner internal.
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Give a free or expired lease to a consumer (`leases().give` on the state seen).
    Assign {
        /// The shard.
        shard: ShardId,
        /// The consumer that gets it.
        to: ConsumerId,
        /// The lease as seen when planned: the take applies only if it is unchanged.
        from_state: TakeFrom,
        /// The holding token of the consumer's process, as seen.
        holder: Option<String>,
    },
    /// Ask the owner to hand a lease over at its next heartbeat.
    Claim {
        /// The shard.
        shard: ShardId,
        /// The current owner.
        from: ConsumerId,
        /// The consumer that should get it.
        to: ConsumerId,
        /// The shard's lease counter when planned.
        counter: u64,
    },
    /// Take a claimed lease whose owner did not hand it over within the hand-off timeout.
    ForceTake {
        /// The shard.
        shard: ShardId,
        /// The owner that did not hand it over.
        from: ConsumerId,
        /// The claimant, who gets it.
        to: ConsumerId,
        /// The lease as seen when planned (claimed by `to`).
        from_state: TakeFrom,
        /// The holding token of the claimant's process, as seen.
        holder: Option<String>,
    },
    /// Withdraw a claim whose claimant is no longer live.
    CancelClaim {
        /// The shard.
        shard: ShardId,
        /// The claimant.
        claimant: ConsumerId,
    },
    /// Clear a depleted (or gone) parent from a child's pending parents: the
    /// parent's depletion was recorded without its children.
    ClearPendingParent {
        /// The child shard.
        shard: ShardId,
        /// The parent that no longer blocks it.
        parent: ShardId,
        /// The group's latest rewind as the snapshot saw it (its id; `None`:
        /// none). The clear applies only while it is still the latest: a
        /// rewind that began between the snapshot's read of the home key
        /// and its read of the shards makes the child wait for a parent it
        /// is about to reopen, and that wait is no leftover.
        rewind: Option<EpochMillis>,
    },
    /// Remove a consumer that missed its heartbeat, then free its leases and EFO locks.
    ReapConsumer {
        /// The consumer as seen (removed only if its heartbeat is still this one).
        seen: ConsumerState,
        /// Its leases seen unchanged for a term, as seen (freed only if
        /// still so).
        leases: Vec<Lease>,
        /// The EFO consumers it held.
        efo: Vec<EfoLock>,
    },
    /// Unlock an EFO consumer held by a consumer that is not registered.
    ReleaseEfo {
        /// The lock as seen.
        lock: EfoLock,
    },
    /// Remove an idle EFO consumer from the state, then deregister it from Kinesis.
    DeregisterEfo {
        /// Its name.
        name: EfoName,
        /// Its ARN.
        arn: String,
        /// Its lock counter when planned (removed only if still free at it).
        lock_counter: u64,
    },
    /// Remove the state of a depleted shard whose records are all past retention.
    RemoveShard {
        /// The shard.
        shard: ShardId,
        /// Its counter when planned.
        counter: u64,
    },
    /// Remove a standalone scope's shard item whose consumer (or EFO
    /// consumer) is gone and which was last written longer ago than the
    /// stream's retention.
    RemoveScopedShard {
        /// The scope (a standalone consumer's, or an EFO consumer's).
        scope: ShardScope,
        /// The shard.
        shard: ShardId,
        /// Its last write when planned (removed only if unchanged).
        updated: EpochMillis,
    },
}

impl Action {
    /// The action's kind, for counters and logs.
    pub fn kind(&self) -> ActionKind {
        match self {
            Action::Assign { .. } => ActionKind::Assign,
            Action::Claim { .. } => ActionKind::Claim,
            Action::ForceTake { .. } => ActionKind::ForceTake,
            Action::CancelClaim { .. } => ActionKind::CancelClaim,
            Action::ClearPendingParent { .. } => ActionKind::ClearPendingParent,
            Action::ReapConsumer { .. } => ActionKind::ReapConsumer,
            Action::ReleaseEfo { .. } => ActionKind::ReleaseEfo,
            Action::DeregisterEfo { .. } => ActionKind::DeregisterEfo,
            Action::RemoveShard { .. } => ActionKind::RemoveShard,
            Action::RemoveScopedShard { .. } => ActionKind::RemoveScopedShard,
        }
    }
}

/// The kinds of action the planners decide, which an [`ExecutionReport`]
/// counts. (The actions themselves are public only with the `testing`
/// feature; these kinds are what a tick's report shows.)
///
/// [`ExecutionReport`]: crate::group::ExecutionReport
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// A free or expired lease given to a consumer.
    Assign,
    /// An owner asked to hand a lease over at its next heartbeat.
    Claim,
    /// A claimed lease taken for the claimant after the hand-off timeout.
    ForceTake,
    /// A claim withdrawn because its claimant is no longer live.
    CancelClaim,
    /// A depleted (or gone) parent cleared from a child's pending parents.
    ClearPendingParent,
    /// A consumer that missed its heartbeat removed, its leases and EFO locks freed.
    ReapConsumer,
    /// An EFO consumer unlocked, held by a consumer that is not registered.
    ReleaseEfo,
    /// An idle EFO consumer removed from the state and deregistered from Kinesis.
    DeregisterEfo,
    /// The state of a depleted shard whose records are all past retention removed.
    RemoveShard,
    /// A standalone scope's shard item removed: its consumer is gone and it
    /// was last written longer ago than the stream's retention.
    RemoveScopedShard,
}
