//! `plan_fleet`: how many shard workers a group wants and starts, from hand-built snapshots.

use crate::support::fixtures::{ages, consumer, NOW};
use shardkeeper::group::{plan_fleet, FleetConfig, Starts};
use shardkeeper::state::{ConsumerState, GroupSnapshot};
use std::time::Duration;

const LEAD_MS: i64 = 60_000;

/// A worker that heartbeated `age_ms` ago, with `left_ms` of its run left at
/// that heartbeat, and its handler busy `busy` thousandths of the time.
fn worker(name: &str, age_ms: i64, left_ms: i64, busy: u16) -> ConsumerState {
    let mut c = consumer(name, age_ms);
    c.info.ends = Some(c.heartbeat + left_ms);
    c.info.busy = Some(busy);
    c
}

fn group(consumers: Vec<ConsumerState>) -> GroupSnapshot {
    GroupSnapshot {
        taken_at: NOW,
        consumers,
        ..GroupSnapshot::default()
    }
}

#[test]
fn a_worker_near_its_end_no_longer_counts_so_its_replacement_starts_before_it_drains() {
    let config = FleetConfig::default();
    let fresh = group(vec![worker("a", 1_000, 10 * LEAD_MS, 100)]);
    let plan = plan_fleet(&fresh, &ages(&fresh), 8, 0, &config);
    assert_eq!((plan.wanted, plan.staying, plan.start), (1, 1, 0));
    // The time left is what its last heartbeat said, less how long ago that
    // was: 61 s at a heartbeat 2 s old is 59 s, inside the lead.
    let ending = group(vec![worker("a", 2_000, LEAD_MS + 1_000, 100)]);
    let plan = plan_fleet(&ending, &ages(&ending), 8, 0, &config);
    assert_eq!((plan.staying, plan.start), (0, 1));
    // Already started and not registered yet: nothing more.
    let plan = plan_fleet(&ending, &ages(&ending), 8, 1, &config);
    assert_eq!(plan.start, 0);
}

#[test]
fn the_fleet_follows_the_shards_and_the_handlers_load_within_its_bounds() {
    let config = FleetConfig::default().shards_per_worker(4).max_workers(6);
    let idle = group(vec![worker("a", 0, 10 * LEAD_MS, 50)]);
    assert_eq!(plan_fleet(&idle, &ages(&idle), 8, 0, &config).wanted, 2);
    assert_eq!(plan_fleet(&idle, &ages(&idle), 0, 0, &config).wanted, 1);
    assert_eq!(plan_fleet(&idle, &ages(&idle), 100, 0, &config).wanted, 6);
    // Two workers 900 thousandths busy each: 1.8 workers of load, planned
    // at 0.7 each, want 3, although two would do for 8 shards.
    let busy = group(vec![
        worker("a", 0, 10 * LEAD_MS, 900),
        worker("b", 0, 10 * LEAD_MS, 900),
    ]);
    let plan = plan_fleet(&busy, &ages(&busy), 8, 0, &config);
    assert_eq!((plan.wanted, plan.staying, plan.start), (3, 2, 1));
    // Never more workers than open shards.
    assert_eq!(plan_fleet(&busy, &ages(&busy), 2, 0, &config).wanted, 2);
    // A worker whose heartbeat stopped is not staying, and its load no
    // longer counts.
    let silent = group(vec![
        worker("a", 0, 10 * LEAD_MS, 100),
        worker("b", 30_000, 10 * LEAD_MS, 1000),
    ]);
    let plan = plan_fleet(&silent, &ages(&silent), 8, 0, &config);
    assert_eq!((plan.wanted, plan.staying, plan.start), (2, 1, 1));
}

#[test]
fn a_larger_fleet_than_wanted_starts_nothing_and_shrinks_as_runs_end() {
    let config = FleetConfig::default();
    let many = group(
        (0..5)
            .map(|i| worker(&format!("w{i}"), 0, 10 * LEAD_MS, 10))
            .collect(),
    );
    let plan = plan_fleet(&many, &ages(&many), 8, 0, &config);
    assert_eq!((plan.wanted, plan.staying, plan.start), (1, 5, 0));
    // A worker with no planned end (a long-running process) always stays.
    let mut forever = consumer("p", 0);
    forever.info.ends = None;
    let one = group(vec![forever]);
    assert_eq!(plan_fleet(&one, &ages(&one), 8, 0, &config).start, 0);
}

#[test]
fn a_start_counts_until_a_new_consumer_registers_or_it_times_out() {
    let timeout = Duration::from_secs(30);
    let mut starts = Starts::default();
    let before = group(vec![worker("a", 0, LEAD_MS, 0)]);
    assert_eq!(starts.observe(&before, 0, timeout), 0);
    starts.started(2, 1_000);
    assert_eq!(starts.observe(&before, 2_000, timeout), 2);
    let one_came = group(vec![worker("a", 0, LEAD_MS, 0), worker("b", 0, LEAD_MS, 0)]);
    assert_eq!(starts.observe(&one_came, 3_000, timeout), 1);
    assert_eq!(
        starts.observe(&one_came, 31_001, timeout),
        0,
        "the other never came"
    );
}

/// On enhanced fan-out each worker reads through one consumer of the pool:
/// a worker waiting for one (inactive) stays, and the fleet never wants
/// more workers than the pool has consumers.
#[test]
fn on_enhanced_fan_out_a_waiting_worker_stays_and_the_pool_bounds_the_fleet() {
    let config = FleetConfig::default()
        .shards_per_worker(1)
        .efo_pool_size(Some(2));
    let mut waiting = worker("b", 0, 10 * LEAD_MS, 0);
    waiting.active = false;
    let snap = group(vec![worker("a", 0, 10 * LEAD_MS, 900), waiting]);
    let plan = plan_fleet(&snap, &ages(&snap), 8, 0, &config);
    assert_eq!((plan.wanted, plan.staying, plan.start), (2, 2, 0));
    // Without a pool, 8 shards at one per worker want 8.
    let polling = config.efo_pool_size(None);
    assert_eq!(plan_fleet(&snap, &ages(&snap), 8, 0, &polling).start, 6);
}
