//! The reap planner: table-driven scenarios.

use crate::support::fixtures::*;
use shardkeeper::group::{plan_reap, Action, ReapConfig};
use shardkeeper::state::GroupSnapshot;
use std::time::Duration;

fn config() -> ReapConfig {
    ReapConfig::default()
        .heartbeat_timeout(Duration::from_secs(15))
        .lease_term(TERM)
        .efo_idle_timeout(Duration::from_secs(600))
        .retention(Duration::from_secs(3600))
}

fn describe(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::ReapConsumer { seen, leases, efo } => format!(
                "reap {} leases {:?} efo {:?}",
                seen.id(),
                leases
                    .iter()
                    .map(|l| l.shard_id.to_string())
                    .collect::<Vec<_>>(),
                efo.iter().map(|l| l.name.to_string()).collect::<Vec<_>>()
            ),
            Action::ReleaseEfo { lock } => format!("release {} from {}", lock.name, lock.consumer),
            Action::DeregisterEfo { name, .. } => format!("deregister {name}"),
            Action::RemoveShard { shard, .. } => format!("remove {shard}"),
            Action::RemoveScopedShard { scope, shard, .. } => {
                format!("remove {shard} of {}", scope.prefix())
            }
            other => panic!("the reaper planned {other:?}"),
        })
        .collect()
}

#[test]
fn scenarios() {
    let with_efo = |mut snap: GroupSnapshot, efo: Vec<shardkeeper::state::EfoState>| {
        snap.efo = efo;
        snap
    };
    let cases: Vec<(&str, GroupSnapshot, Vec<&str>)> = vec![
        (
            // Everyone heartbeats: nothing to do.
            "all alive",
            snapshot(vec![consumer("a", 1_000)], vec![leased("s0", "a", 5_000)]),
            vec![],
        ),
        (
            // b is 16 s silent: removed with its EFO lock and its lease
            // unrenewed for a term (s2); s1, renewed 5 s ago, may still be
            // in use: it runs out first, and the rebalancer frees it then.
            "a dead consumer goes with its expired leases and its lock",
            with_efo(
                snapshot(
                    vec![consumer("a", 0), consumer("b", 16_000)],
                    vec![
                        leased("s0", "a", 5_000),
                        leased("s1", "b", 5_000),
                        leased("s2", "b", -5_000),
                    ],
                ),
                vec![efo("e0", Some("b"), 0), efo("e1", Some("a"), 0)],
            ),
            vec!["reap b leases [\"s2\"] efo [\"e0\"]"],
        ),
        (
            // A lock held by a consumer that is not registered is released.
            "an unknown holder's EFO lock is released",
            with_efo(
                snapshot(vec![consumer("a", 0)], vec![]),
                vec![efo("e0", Some("ghost"), 0)],
            ),
            vec!["release e0 from ghost"],
        ),
        (
            // Idle for 11 minutes (> 10): deregistered, except that one is always kept.
            "idle EFO consumers go, one stays",
            with_efo(
                snapshot(vec![], vec![]),
                vec![
                    efo("e0", None, 660_000),
                    efo("e1", None, 660_000),
                    efo("e2", None, 60_000),
                ],
            ),
            vec!["deregister e0", "deregister e1"],
        ),
        (
            "all idle: the first is kept",
            with_efo(
                snapshot(vec![], vec![]),
                vec![efo("e0", None, 660_000), efo("e1", None, 660_000)],
            ),
            vec!["deregister e1"],
        ),
        (
            // Depleted 2 h ago (> 1 h retention): removed; depleted 10 min ago, or still awaited by a child: kept.
            "depleted shards past retention are removed",
            snapshot(
                vec![],
                vec![
                    depleted(shard("old"), 7_200_000),
                    depleted(shard("recent"), 600_000),
                    depleted(shard("awaited"), 7_200_000),
                    child(shard("kid"), &["awaited"], &["awaited"]),
                    shard("open"),
                ],
            ),
            vec!["remove old"],
        ),
        (
            // A standalone consumer, and a standalone EFO consumer, that are
            // gone: their positions go once past the 1 h retention; those of
            // a registered consumer, of a pool member, or recent ones stay.
            "positions of gone standalone scopes past retention are removed",
            {
                let mut snap = with_efo(
                    snapshot(vec![consumer("here", 0)], vec![]),
                    vec![efo("pooled", Some("here"), 0)],
                );
                let aged = |age_ms| depleted(shard("s0"), age_ms);
                snap.own_shards = vec![
                    (id("gone"), aged(7_200_000)),
                    (id("gone-recently"), aged(600_000)),
                    (id("here"), aged(7_200_000)),
                ];
                let efo_name = |n: &str| shardkeeper::state::EfoName::new(n).unwrap();
                snap.efo_shards = vec![
                    (efo_name("retired"), aged(7_200_000)),
                    (efo_name("pooled"), aged(7_200_000)),
                ];
                snap
            },
            vec!["remove s0 of OWN#gone#", "remove s0 of EFOSHARD#retired#"],
        ),
    ];
    for (name, snap, expected) in cases {
        let plan = plan_reap(&snap, &ages(&snap), NOW, &config());
        assert_eq!(describe(&plan), expected, "case: {name}");
    }
}
