//! The rebalance planner balancing by load: hot shards spread over the
//! consumers within a few ticks and then stay; counts stay within their
//! quotas; nothing moves without every held shard's load, nor over a
//! receiver's capacity, nor for a small gain.

use crate::support::fixtures::*;
use shardkeeper::group::{plan_rebalance, Action, RebalanceConfig};
use shardkeeper::state::{ConsumerState, GroupSnapshot};
use std::collections::BTreeMap;
use std::time::Duration;

fn config() -> RebalanceConfig {
    RebalanceConfig::default()
        .lease_term(TERM)
        .heartbeat_timeout(Duration::from_secs(15))
}

/// The group: 4 consumers holding 4 shards each, the 4 hot shards (ten
/// times the others' load) three on `c0` and one on `c1`, as a count
/// balance may leave them.
fn skewed() -> (GroupSnapshot, BTreeMap<String, u16>) {
    let owners = [
        ("s00", "c0"),
        ("s01", "c0"),
        ("s02", "c0"),
        ("s04", "c0"),
        ("s03", "c1"),
        ("s05", "c1"),
        ("s06", "c1"),
        ("s07", "c1"),
        ("s08", "c2"),
        ("s09", "c2"),
        ("s10", "c2"),
        ("s11", "c2"),
        ("s12", "c3"),
        ("s13", "c3"),
        ("s14", "c3"),
        ("s15", "c3"),
    ];
    let shards = owners.iter().map(|(s, o)| leased(s, o, 8_000)).collect();
    let load = owners
        .iter()
        .map(|(s, _)| {
            let hot = ["s00", "s01", "s02", "s03"].contains(s);
            ((*s).to_owned(), if hot { 200 } else { 20 })
        })
        .collect();
    let consumers = (0..4).map(|i| consumer(&format!("c{i}"), 1_000)).collect();
    (snapshot(consumers, shards), load)
}

/// Each consumer's heartbeat reports the load of every shard it holds.
fn report(snapshot: &mut GroupSnapshot, load: &BTreeMap<String, u16>) {
    let held: Vec<(String, String)> = snapshot
        .shards
        .iter()
        .filter_map(|s| Some((s.owner.as_ref()?.to_string(), s.shard_id.to_string())))
        .collect();
    for c in &mut snapshot.consumers {
        c.info.busy = Some(0);
        c.info.loads = held
            .iter()
            .filter(|(o, _)| o == c.id().as_str())
            .map(|(_, s)| (sid(s), load[s]))
            .collect();
    }
}

/// Each consumer's load and shard count.
fn loads(snapshot: &GroupSnapshot, load: &BTreeMap<String, u16>) -> BTreeMap<String, (u64, usize)> {
    let mut out: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    for s in &snapshot.shards {
        let e = out
            .entry(s.owner.as_ref().unwrap().to_string())
            .or_default();
        e.0 += u64::from(load[s.shard_id.as_str()]);
        e.1 += 1;
    }
    out
}

/// Applies claims as handed over at once.
fn apply(snapshot: &mut GroupSnapshot, actions: &[Action]) {
    for action in actions {
        let Action::Claim { shard, to, .. } = action else {
            panic!("planned {action:?}");
        };
        let s = snapshot
            .shards
            .iter_mut()
            .find(|s| &s.shard_id == shard)
            .unwrap();
        s.owner = Some(to.clone());
        s.counter += 1;
    }
}

fn busiest_over_mean(snapshot: &GroupSnapshot, load: &BTreeMap<String, u16>) -> f64 {
    let l = loads(snapshot, load);
    let max = l.values().map(|(x, _)| *x).max().unwrap() as f64;
    let mean = l.values().map(|(x, _)| *x).sum::<u64>() as f64 / l.len() as f64;
    max / mean
}

/// From 2.38 times the mean to within 1.3 in a few exchanges, counts kept
/// at 4 each, and then no move at all over twenty more ticks.
#[test]
fn hot_shards_spread_by_load_and_then_stay() {
    let (mut group, load) = skewed();
    assert!(busiest_over_mean(&group, &load) > 2.3);
    let mut moves = 0;
    for _ in 0..10 {
        report(&mut group, &load);
        let actions = plan_rebalance(&group, &ages(&group), &config());
        moves += actions.len();
        apply(&mut group, &actions);
    }
    assert!(
        busiest_over_mean(&group, &load) <= 1.3,
        "{:?}",
        loads(&group, &load)
    );
    assert!(loads(&group, &load).values().all(|(_, n)| *n == 4));
    assert!(moves <= 6, "{moves} moves");
    for _ in 0..20 {
        report(&mut group, &load);
        let actions = plan_rebalance(&group, &ages(&group), &config());
        assert!(actions.is_empty(), "balanced, yet {actions:?}");
    }
}

/// A consumer whose heartbeat has not yet measured a shard it holds (just
/// handed over) keeps every lease where it is.
#[test]
fn nothing_moves_by_load_until_every_held_shard_is_measured() {
    let (mut group, load) = skewed();
    report(&mut group, &load);
    let c3: &mut ConsumerState = group
        .consumers
        .iter_mut()
        .find(|c| c.id().as_str() == "c3")
        .unwrap();
    c3.info.loads.remove(&sid("s15"));
    assert!(plan_rebalance(&group, &ages(&group), &config()).is_empty());
}

/// A receiver the move would take over its capacity (busy all the time)
/// gets nothing; a gain under a tenth of the mean moves nothing; nor does
/// anything move while the busiest consumer is busy less than a tenth of
/// the time.
#[test]
fn no_move_over_a_receivers_capacity_or_for_a_small_gain() {
    let (mut group, mut load) = skewed();
    // Every shard near the capacity of a consumer: any exchange would put
    // the receiver over it.
    for (s, l) in load.iter_mut() {
        *l = if ["s00", "s01", "s02", "s03"].contains(&s.as_str()) {
            900
        } else {
            200
        };
    }
    report(&mut group, &load);
    let actions = plan_rebalance(&group, &ages(&group), &config());
    assert!(actions.is_empty(), "{actions:?}");
    // Nearly balanced: 110, 100, 100, 100.
    let (mut group, mut load) = skewed();
    for (s, l) in load.iter_mut() {
        *l = if s == "s00" { 35 } else { 25 };
    }
    report(&mut group, &load);
    assert!(plan_rebalance(&group, &ages(&group), &config()).is_empty());
    // Mostly idle: 62, 26, 8, 8 thousandths (the first placing's shape).
    let (mut group, mut load) = skewed();
    for l in load.values_mut() {
        *l /= 10;
    }
    report(&mut group, &load);
    assert!(plan_rebalance(&group, &ages(&group), &config()).is_empty());
}
