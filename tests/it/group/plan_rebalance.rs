//! The rebalance planner: table-driven scenarios and property tests of its invariants.

use crate::support::fixtures::*;
use proptest::prelude::*;
use shardkeeper::group::{plan_rebalance, Action, RebalanceConfig};
use shardkeeper::state::{ConsumerId, GroupSnapshot, ShardId};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

fn config() -> RebalanceConfig {
    RebalanceConfig::default()
        .lease_term(TERM)
        .heartbeat_timeout(Duration::from_secs(15))
        .max_moves_per_tick(None)
}

/// Applies a plan as if every owner honoured its claims (new and open) at once.
fn apply(snapshot: &GroupSnapshot, actions: &[Action]) -> GroupSnapshot {
    let mut next = snapshot.clone();
    for s in next.shards.iter_mut() {
        if let Some(claim) = s.claim.take() {
            s.owner = Some(claim.by);
            s.expires = Some(NOW + 10_000);
            s.counter += 1;
        }
    }
    for action in actions {
        let (shard, to) = match action {
            Action::Assign { shard, to, .. }
            | Action::Claim { shard, to, .. }
            | Action::ForceTake { shard, to, .. } => (shard, to),
            Action::ClearPendingParent { shard, parent, .. } => {
                let s = next
                    .shards
                    .iter_mut()
                    .find(|s| &s.shard_id == shard)
                    .unwrap();
                s.pending_parents.retain(|p| p != parent);
                continue;
            }
            Action::CancelClaim { shard, .. } => {
                next.shards
                    .iter_mut()
                    .find(|s| &s.shard_id == shard)
                    .unwrap()
                    .claim = None;
                continue;
            }
            other => panic!("the rebalancer planned {other:?}"),
        };
        let s = next
            .shards
            .iter_mut()
            .find(|s| &s.shard_id == shard)
            .unwrap();
        s.owner = Some(to.clone());
        s.expires = Some(NOW + 10_000);
        s.counter += 1;
        s.claim = None;
    }
    next
}

/// Live leases per owner on the shards that are available for lease.
fn holdings(snapshot: &GroupSnapshot) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let seen = ages(snapshot);
    for s in snapshot.available_shards() {
        if let Some(owner) = shardkeeper::group::held_by(s, &seen, TERM) {
            *out.entry(owner.to_string()).or_insert(0) += 1;
        }
    }
    out
}

fn targets(actions: &[Action]) -> Vec<(String, String, &'static str)> {
    actions
        .iter()
        .map(|a| match a {
            Action::Assign { shard, to, .. } => (shard.to_string(), to.to_string(), "assign"),
            Action::Claim { shard, to, .. } => (shard.to_string(), to.to_string(), "claim"),
            Action::ForceTake { shard, to, .. } => (shard.to_string(), to.to_string(), "force"),
            Action::CancelClaim { shard, claimant } => {
                (shard.to_string(), claimant.to_string(), "cancel")
            }
            Action::ClearPendingParent { shard, parent, .. } => {
                (shard.to_string(), parent.to_string(), "unblock")
            }
            other => panic!("{other:?}"),
        })
        .collect()
}

fn t(shard: &str, to: &str, what: &'static str) -> (String, String, &'static str) {
    (shard.to_string(), to.to_string(), what)
}

/// A scenario: name, snapshot, configuration, expected (shard, consumer, what).
type Case = (
    &'static str,
    GroupSnapshot,
    RebalanceConfig,
    Vec<(String, String, &'static str)>,
);

#[test]
fn scenarios() {
    let cases: Vec<Case> = vec![
        (
            // One consumer, four free shards: it gets all of them.
            "one consumer takes everything",
            snapshot(
                vec![consumer("a", 0)],
                (0..4).map(|i| shard(&format!("s{i}"))).collect(),
            ),
            config(),
            vec![
                t("s0", "a", "assign"),
                t("s1", "a", "assign"),
                t("s2", "a", "assign"),
                t("s3", "a", "assign"),
            ],
        ),
        (
            // a holds all four; b joins: two move to b by claims, a keeps s0, s1 (sticky).
            "a newcomer gets half by hand-off claims",
            snapshot(
                vec![consumer("a", 0), consumer("b", 0)],
                (0..4)
                    .map(|i| leased(&format!("s{i}"), "a", 5_000))
                    .collect(),
            ),
            config(),
            vec![t("s2", "b", "claim"), t("s3", "b", "claim")],
        ),
        (
            // Balanced already: nothing to do.
            "balanced is left alone",
            snapshot(
                vec![consumer("a", 0), consumer("b", 0)],
                vec![
                    leased("s0", "a", 5_000),
                    leased("s1", "b", 5_000),
                    leased("s2", "a", 5_000),
                ],
            ),
            config(),
            vec![],
        ),
        (
            // b missed its heartbeat: its stale lease goes to a. a's own
            // lease, untouched for a term, lives by a's heartbeat.
            "expired leases go to the living",
            snapshot(
                vec![consumer("a", 0), consumer("b", 60_000)],
                vec![leased("s0", "a", -1), leased("s1", "b", -1)],
            ),
            config(),
            vec![t("s1", "a", "assign")],
        ),
        (
            // b is dead: its session went a term unchanged, so its lease
            // (taken 5 s ago) goes to the living at once, on b's session.
            "a live lease of a dead consumer is claimed",
            snapshot(
                vec![consumer("a", 0), consumer("b", 60_000)],
                vec![leased("s0", "b", 5_000)],
            ),
            config(),
            vec![t("s0", "a", "assign")],
        ),
        (
            // A claim not honoured while its owner's session went a term
            // without a heartbeat (s1: a beat 11 s ago, taken 11 s ago)
            // ends in a forced take by the claimant. One whose owner still
            // heartbeats (s2) waits, up to four of its terms: the owner may
            // be processing, and hands it over once its heartbeat's answer
            // tells it of the claim.
            "a claimed lease unrenewed for a term is forced, a renewed one waits",
            snapshot(
                vec![consumer("a", 11_000), consumer("b", 0), consumer("c", 0)],
                vec![
                    claimed(leased("s1", "a", -1_000), "b", 16_000),
                    claimed(leased("s2", "c", 5_000), "b", 35_000),
                ],
            ),
            config(),
            vec![t("s1", "b", "force")],
        ),
        (
            // A reaped or departed owner's lease renewed 5 s ago may still be
            // in use (s0): it waits out its term. One seen unregistered for
            // a term (s1) is free.
            "a gone owner's lease waits out its term",
            snapshot(
                vec![consumer("a", 0)],
                vec![leased("s0", "gone", 5_000), leased("s1", "left", -1_000)],
            ),
            config(),
            vec![t("s1", "a", "assign")],
        ),
        (
            // A claim the owner's live session has not honoured in four of
            // its terms lost its note (merged into one the owner had
            // acknowledged): it is withdrawn, and the lease stays with its
            // owner until a claim planned anew notes it again (before, it
            // waited for good).
            "a claim its live owner never honoured is withdrawn",
            snapshot(
                vec![consumer("a", 0), consumer("b", 0)],
                vec![
                    leased("s0", "b", 5_000),
                    claimed(leased("s1", "a", 5_000), "b", 41_000),
                    leased("s2", "a", 5_000),
                ],
            ),
            config(),
            vec![t("s1", "b", "cancel")],
        ),
        (
            // A fresh claim is waited for: nothing new.
            "fresh claim is waited for",
            snapshot(
                vec![consumer("a", 0), consumer("b", 0)],
                vec![
                    leased("s0", "a", 5_000),
                    claimed(leased("s1", "a", 5_000), "b", 1_000),
                ],
            ),
            config(),
            vec![],
        ),
        (
            // The claimant died: the claim is withdrawn and the lease stays.
            "a dead claimant's claim is cancelled",
            snapshot(
                vec![consumer("a", 0), consumer("b", 60_000)],
                vec![claimed(leased("s0", "a", 5_000), "b", 1_000)],
            ),
            config(),
            vec![t("s0", "b", "cancel")],
        ),
        (
            // Children wait while a parent is open; the open parent is leased.
            "children wait for their parent",
            snapshot(
                vec![consumer("a", 0)],
                vec![
                    shard("p"),
                    child(shard("c1"), &["p"], &["p"]),
                    child(shard("c2"), &["p"], &[]),
                ],
            ),
            config(),
            vec![t("p", "a", "assign")],
        ),
        (
            // The parent is depleted but the child still lists it as pending: repaired, then leased next tick.
            "a stranded child is unblocked",
            snapshot(
                vec![consumer("a", 0)],
                vec![depleted(shard("p"), 0), child(shard("c"), &["p"], &["p"])],
            ),
            config(),
            vec![t("c", "p", "unblock")],
        ),
        (
            // Inactive (waiting for EFO) and standalone consumers get nothing.
            "inactive and standalone consumers get nothing",
            snapshot(
                vec![
                    consumer("a", 0),
                    {
                        let mut c = consumer("idle", 0);
                        c.active = false;
                        c
                    },
                    {
                        let mut c = consumer("solo", 0);
                        c.info.standalone = true;
                        c
                    },
                ],
                vec![shard("s0"), shard("s1")],
            ),
            config(),
            vec![t("s0", "a", "assign"), t("s1", "a", "assign")],
        ),
        (
            // At most one move per tick when configured so; free shards are still assigned.
            "moves per tick are capped",
            snapshot(
                vec![consumer("a", 0), consumer("b", 0), consumer("c", 0)],
                vec![
                    leased("s0", "a", 5_000),
                    leased("s1", "a", 5_000),
                    leased("s2", "a", 5_000),
                    leased("s3", "a", 5_000),
                    shard("s4"),
                ],
            ),
            config().max_moves_per_tick(Some(1)),
            vec![t("s4", "b", "assign"), t("s2", "b", "claim")],
        ),
        (
            // Nobody live: nothing is planned.
            "no live consumer, no plan",
            snapshot(vec![consumer("a", 60_000)], vec![shard("s0")]),
            config(),
            vec![],
        ),
    ];
    for (name, snap, cfg, expected) in cases {
        let plan = plan_rebalance(&snap, &ages(&snap), &cfg);
        assert_eq!(targets(&plan), expected, "case: {name}");
    }
}

fn arb_group() -> impl Strategy<Value = (GroupSnapshot, Option<usize>)> {
    let consumers = prop::collection::vec(
        (0i64..40_000, any::<bool>(), prop::bool::weighted(0.1)),
        0..7,
    );
    let shards = prop::collection::vec(
        (
            prop::option::of(0usize..8),
            -20_000i64..20_000,
            prop::option::of((0usize..8, 0i64..30_000)),
            prop::bool::weighted(0.1),
            prop::option::of(0usize..40),
        ),
        0..40,
    );
    (consumers, shards, prop::option::of(1usize..4)).prop_map(|(cs, ss, moves)| {
        let consumers: Vec<_> = cs
            .iter()
            .enumerate()
            .map(|(i, (age, active, standalone))| {
                let mut c = consumer(&format!("c{i}"), *age);
                c.active = *active || i == 0;
                c.info.standalone = *standalone;
                c
            })
            .collect();
        let mut shards: Vec<_> = Vec::new();
        for (i, (owner, expires, claim, is_depleted, parent)) in ss.iter().enumerate() {
            let name = format!("s{i:02}");
            let mut s = match owner {
                Some(o) => leased(&name, &format!("c{o}"), *expires),
                None => shard(&name),
            };
            if let Some((by, age)) = claim {
                if s.owner.is_some() {
                    s = claimed(s, &format!("c{by}"), *age);
                }
            }
            if *is_depleted {
                s = depleted(s, 0);
            }
            if let Some(p) = parent.filter(|p| *p < i) {
                let pname = format!("s{p:02}");
                let parent_done = shards.iter().any(|x: &shardkeeper::state::ShardState| {
                    x.shard_id.as_str() == pname && x.depleted
                });
                let pending: Vec<&str> = if parent_done {
                    vec![]
                } else {
                    vec![pname.as_str()]
                };
                s = child(s, &[pname.as_str()], &pending);
            }
            shards.push(s);
        }
        (snapshot(consumers, shards), moves)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn plans_keep_the_invariants((snap, moves) in arb_group()) {
        let cfg = config().max_moves_per_tick(moves);
        let plan = plan_rebalance(&snap, &ages(&snap), &cfg);
        let live: BTreeSet<&ConsumerId> = snap
            .consumers
            .iter()
            .filter(|c| NOW - c.heartbeat < 15_000 && c.active && !c.info.standalone)
            .map(|c| c.id())
            .collect();
        let by_id: BTreeMap<&ShardId, _> = snap.shards.iter().map(|s| (&s.shard_id, s)).collect();
        let mut given: BTreeSet<&ShardId> = BTreeSet::new();
        for action in &plan {
            if let Action::Assign { shard, to, .. } | Action::Claim { shard, to, .. } | Action::ForceTake { shard, to, .. } = action {
                prop_assert!(given.insert(shard), "{shard} given twice in {plan:?}");
                prop_assert!(live.contains(to), "{shard} given to {to}, not live");
                let s = by_id[shard];
                prop_assert!(!s.depleted, "depleted {shard} given");
                prop_assert!(s.pending_parents.is_empty(), "{shard} given before its parents are depleted");
                prop_assert!(s.parents.iter().all(|p| by_id.get(p).is_none_or(|ps| ps.depleted)));
            }
        }
    }

    #[test]
    fn an_unlimited_plan_converges_to_balance((snap, _) in arb_group()) {
        let mut state = snap;
        for _ in 0..3 {
            let plan = plan_rebalance(&state, &ages(&state), &config());
            state = apply(&state, &plan);
        }
        // A consumer silent for a term holds nothing as the planner sees it
        // (its session no longer keeps its leases): the others share them.
        let term = TERM.as_millis() as i64;
        let live: Vec<String> = state
            .consumers
            .iter()
            .filter(|c| NOW - c.heartbeat < term && c.active && !c.info.standalone)
            .map(|c| c.id().to_string())
            .collect();
        // A lease whose owner is gone but renewed it less than a term ago
        // may still be in use: it waits out its term (time does not pass
        // here), and is not counted.
        let seen = ages(&state);
        let waiting = state
            .available_shards()
            .into_iter()
            .filter_map(|s| shardkeeper::group::held_by(s, &seen, TERM))
            .filter(|o| !state.consumers.iter().any(|c| c.id() == *o))
            .count();
        let available = state.available_shards().len() - waiting;
        if live.is_empty() || available == 0 {
            return Ok(());
        }
        let held = holdings(&state);
        let target = available.div_ceil(live.len());
        let mut total = 0;
        for c in &live {
            let n = held.get(c).copied().unwrap_or(0);
            total += n;
            prop_assert!(n == target || n + 1 == target || (available < live.len() && n <= 1),
                "{c} holds {n}, target {target}: {held:?}");
        }
        prop_assert_eq!(total, available, "every available shard held by a live consumer: {:?}", held);
        // Converged: planning again changes nothing.
        prop_assert!(plan_rebalance(&state, &ages(&state), &config()).is_empty());
    }
}

/// A consumer that went silent lets its leases run out before its
/// heartbeat passes the timeout (longer than the term): it is passed over
/// from then, so its leases are not handed back to it (which would leave
/// them with a dead owner for another term).
#[test]
fn leases_expiring_with_their_owners_heartbeat_go_to_the_living() {
    let cfg = config();
    let snap = snapshot(
        vec![
            consumer("alive", 0),
            consumer("silent", TERM.as_millis() as i64),
        ],
        vec![leased("s0", "silent", 0), leased("s1", "silent", 0)],
    );
    let plan = plan_rebalance(&snap, &ages(&snap), &cfg);
    assert_eq!(
        targets(&plan),
        vec![t("s0", "alive", "assign"), t("s1", "alive", "assign")]
    );
}

/// A draining worker (the end of its run) is given nothing, even while its
/// active flag says otherwise: a lease given to it would only move again.
#[test]
fn a_draining_worker_is_given_nothing() {
    let mut draining = consumer("draining", 0);
    draining.info.draining = true;
    let staying = consumer("staying", 0);
    let snap = snapshot(vec![draining, staying], vec![shard("s0"), shard("s1")]);
    let plan = plan_rebalance(&snap, &ages(&snap), &config());
    assert_eq!(
        targets(&plan),
        vec![t("s0", "staying", "assign"), t("s1", "staying", "assign")]
    );
}

/// A rewind moves children first, each waiting again for its parent, then
/// reopens the parent. A tick between the two must not take the still
/// depleted parent for a depletion that forgot the child (the repair that
/// clears the pending parent), or the child is read from the target before
/// its reopened parent. While the rewind is unfinished (also when it was cut
/// short, until it is run again), its children keep waiting; once it
/// finished, the repair is made as before.
#[test]
fn a_child_a_rewind_in_progress_moved_keeps_waiting_for_its_parent() {
    use shardkeeper::state::{Checkpoint, RewindState, StreamState};
    const REWIND: i64 = 1_700_000_000_000;
    let mut moved = child(shard("c0"), &["p"], &["p"]);
    moved.rewound = Some(REWIND);
    let mut snap = snapshot(vec![consumer("a", 0)], vec![depleted(shard("p"), 0), moved]);
    let rewind = |finished| StreamState {
        stream_created: 1,
        schema_version: 3,
        stream_arn: None,
        sessions_since: None,
        older_seen: None,
        rewind: Some(RewindState {
            id: REWIND,
            request: "--to TRIM_HORIZON".to_owned(),
            to: Checkpoint::TrimHorizon,
            shards: 2,
            finished,
        }),
        end: None,
    };
    let repairs = |snap: &GroupSnapshot| {
        plan_rebalance(snap, &ages(snap), &config())
            .into_iter()
            .filter(|a| matches!(a, Action::ClearPendingParent { .. }))
            .count()
    };
    snap.stream = Some(rewind(None));
    assert_eq!(repairs(&snap), 0, "the rewind is still moving shards");
    snap.stream = Some(rewind(Some(REWIND + 1_000)));
    assert_eq!(
        repairs(&snap),
        1,
        "a finished rewind's leftovers are repaired"
    );
}
