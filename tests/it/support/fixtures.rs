//! Hand-built group snapshots for the planner tests (no servers involved).

use shardkeeper::group::Ages;
use shardkeeper::state::{
    Checkpoint, Claim, ConsumerId, ConsumerInfo, ConsumerState, EfoName, EfoState, EpochMillis,
    GroupSnapshot, ShardId, ShardState,
};
use std::time::Duration;

/// The planners' "now" in every fixture.
pub const NOW: EpochMillis = 1_800_000_000_000;

/// The lease term of every fixture lease (written as `expires = renewal + TERM`).
pub const TERM: Duration = Duration::from_secs(10);

fn age(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

/// What an observer that had watched since each value was written would see
/// at [`NOW`]: heartbeats, claims and free EFO consumers as old as their
/// stored times, leases as old as the time since their last renewal.
pub fn ages(snapshot: &GroupSnapshot) -> Ages {
    let term = TERM.as_millis() as i64;
    Ages {
        leases: snapshot
            .shards
            .iter()
            .filter(|s| s.owner.is_some())
            .map(|s| {
                (
                    s.shard_id.clone(),
                    age(NOW - (s.expires.unwrap_or(0) - term)),
                )
            })
            .collect(),
        heartbeats: snapshot
            .consumers
            .iter()
            .map(|c| (c.id().clone(), age(NOW - c.heartbeat)))
            .collect(),
        claims: snapshot
            .shards
            .iter()
            .filter_map(|s| Some((s.shard_id.clone(), age(NOW - s.claim.as_ref()?.at))))
            .collect(),
        efo_free: snapshot
            .efo
            .iter()
            .filter_map(|e| Some((e.name.clone(), age(NOW - e.released?))))
            .collect(),
        // Lease owners not registered: as old as their youngest lease.
        unregistered: {
            let mut gone: std::collections::BTreeMap<ConsumerId, Duration> = Default::default();
            for s in &snapshot.shards {
                let Some(owner) = s.owner.as_ref() else {
                    continue;
                };
                if snapshot.consumers.iter().any(|c| c.id() == owner) {
                    continue;
                }
                let a = age(NOW - (s.expires.unwrap_or(0) - term));
                let e = gone.entry(owner.clone()).or_insert(a);
                *e = (*e).min(a);
            }
            gone
        },
        renewing: Default::default(),
        // Watched long enough to have seen every consumer heartbeat.
        beating: snapshot.consumers.iter().map(|c| c.id().clone()).collect(),
        terms: snapshot
            .consumers
            .iter()
            .filter_map(|c| Some((c.id().clone(), c.info.lease_term?)))
            .collect(),
    }
}

pub fn id(s: &str) -> ConsumerId {
    ConsumerId::new(s).unwrap()
}

pub fn sid(s: &str) -> ShardId {
    ShardId::new(s).unwrap()
}

/// A consumer that heartbeated `age_ms` ago.
pub fn consumer(name: &str, age_ms: i64) -> ConsumerState {
    ConsumerState {
        info: ConsumerInfo {
            id: id(name),
            app: "app".into(),
            host: "host".into(),
            env: "test".into(),
            pid: 1,
            started: 0,
            standalone: false,
            ends: None,
            busy: None,
            loads: Default::default(),
            draining: false,
            lease_term: None,
        },
        heartbeat: NOW - age_ms,
        active: true,
        token: Some(format!("token-{name}")),
        beat: Some(1),
    }
}

/// A free, open shard with no parents.
pub fn shard(name: &str) -> ShardState {
    ShardState {
        shard_id: sid(name),
        parents: vec![],
        pending_parents: vec![],
        hash_range: None,
        starting_sequence: None,
        ending_sequence: None,
        checkpoint: None,
        checkpoint_arrival: None,
        owner: None,
        holder: None,
        expires: None,
        counter: 0,
        claim: None,
        depleted: false,
        end: None,
        rewound: None,
        updated: NOW,
    }
}

/// The shard leased to `owner` until `expires_in_ms` from now (negative: expired).
pub fn leased(name: &str, owner: &str, expires_in_ms: i64) -> ShardState {
    ShardState {
        owner: Some(id(owner)),
        expires: Some(NOW + expires_in_ms),
        counter: 3,
        ..shard(name)
    }
}

/// `s` with a claim by `by` made `age_ms` ago.
pub fn claimed(mut s: ShardState, by: &str, age_ms: i64) -> ShardState {
    s.claim = Some(Claim {
        by: id(by),
        at: NOW - age_ms,
    });
    s
}

/// `s` with these parents, the ones listed in `pending` still pending.
pub fn child(mut s: ShardState, parents: &[&str], pending: &[&str]) -> ShardState {
    s.parents = parents.iter().map(|p| sid(p)).collect();
    s.pending_parents = pending.iter().map(|p| sid(p)).collect();
    s
}

/// `s` depleted at SHARD_END, `age_ms` ago.
pub fn depleted(mut s: ShardState, age_ms: i64) -> ShardState {
    s.depleted = true;
    s.checkpoint = Some(Checkpoint::ShardEnd);
    s.owner = None;
    s.expires = None;
    s.updated = NOW - age_ms;
    s
}

/// An EFO consumer, held by `used_by` or free since `released_age_ms` ago.
pub fn efo(name: &str, used_by: Option<&str>, released_age_ms: i64) -> EfoState {
    EfoState {
        name: EfoName::new(name).unwrap(),
        arn: format!("arn:efo:{name}"),
        used_by: used_by.map(id),
        lock_counter: 1,
        released: used_by.is_none().then_some(NOW - released_age_ms),
        retiring: false,
    }
}

pub fn snapshot(consumers: Vec<ConsumerState>, shards: Vec<ShardState>) -> GroupSnapshot {
    GroupSnapshot {
        taken_at: NOW,
        consumers,
        shards,
        ..GroupSnapshot::default()
    }
}
