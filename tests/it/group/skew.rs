//! Leases and heartbeats under clock skew: consumers and the rebalancer on
//! wall clocks 30 s apart, each judging only by what it observed on its own
//! clock (KCL's rule: a lease has expired when its counter went unchanged
//! for the lease term since this observer first saw it).

use crate::support::common::{create_stream, ctx, rebalancer, Ctx};
use shardkeeper::consumer::ConsumerSession;
use shardkeeper::functions::Rebalancer;
use shardkeeper::state::{
    Checkpoint, ConsumerId, ConsumerInfo, ShardId, ShardScope, SkewedClock, StateStore,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const TERM: Duration = Duration::from_secs(10);
const SKEW_MS: i64 = 30_000;

fn no_progress(_: &ShardId) -> Option<(Checkpoint, Option<i64>)> {
    None
}

/// `store` as seen from a machine whose clock is `offset_ms` off.
fn skewed(ctx: &Ctx, store: &StateStore, offset_ms: i64) -> StateStore {
    StateStore::with_clock(
        store.client().clone(),
        store.config().clone(),
        Arc::new(SkewedClock::new(Arc::new(ctx.clock.clone()), offset_ms)),
    )
}

fn session(store: &StateStore, name: &str) -> ConsumerSession {
    let info = ConsumerInfo::for_this_process(ConsumerId::new(name).unwrap(), store.now());
    ConsumerSession::new(store.clone(), info, TERM)
}

/// Owner and counter of every shard.
async fn owners(store: &StateStore) -> BTreeMap<ShardId, (Option<String>, u64)> {
    store
        .shards()
        .list(&ShardScope::Group)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.shard_id, (s.owner.map(|o| o.to_string()), s.counter)))
        .collect()
}

async fn round(ctx: &Ctx, rebalancer: &Rebalancer, sessions: &mut [&mut ConsumerSession]) {
    ctx.clock.advance(Duration::from_secs(3));
    for s in sessions.iter_mut() {
        s.tick(no_progress).await.unwrap();
    }
    rebalancer.tick().await.unwrap();
}

#[tokio::test]
async fn clocks_thirty_seconds_apart_neither_steal_live_leases_nor_keep_dead_ones() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 4).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    // One consumer's clock runs 30 s behind the rebalancer's (every lease it
    // renews looks expired by the rebalancer's clock the moment it is
    // written), the other's 30 s ahead (every lease the rebalancer gives it
    // looks expired by its own clock).
    let mut behind = session(&skewed(&ctx, &store, -SKEW_MS), "behind");
    let mut ahead = session(&skewed(&ctx, &store, SKEW_MS), "ahead");
    behind.tick(no_progress).await.unwrap();
    ahead.tick(no_progress).await.unwrap();
    rebalancer.tick().await.unwrap();
    for _ in 0..2 {
        round(&ctx, &rebalancer, &mut [&mut behind, &mut ahead]).await;
    }
    assert_eq!(
        behind.leases().count(),
        2,
        "the slow clock's consumer holds its share"
    );
    assert_eq!(
        ahead.leases().count(),
        2,
        "the fast clock's consumer took up its share"
    );

    // Many rounds of renewals: no lease moves.
    let settled = owners(&store).await;
    for _ in 0..10 {
        round(&ctx, &rebalancer, &mut [&mut behind, &mut ahead]).await;
    }
    assert_eq!(owners(&store).await, settled, "no live lease changed hands");

    // "behind" goes silent. Its leases are not taken before the rebalancer
    // has seen them unrenewed for the lease term, and are taken after.
    let silent: Vec<ShardId> = behind.leases().map(|l| l.shard_id.clone()).collect();
    round(&ctx, &rebalancer, &mut [&mut ahead]).await;
    round(&ctx, &rebalancer, &mut [&mut ahead]).await;
    let after_6s = owners(&store).await;
    for shard in &silent {
        assert_eq!(after_6s[shard].0.as_deref(), Some("behind"), "taken early");
    }
    for _ in 0..4 {
        round(&ctx, &rebalancer, &mut [&mut ahead]).await;
    }
    assert_eq!(ahead.leases().count(), 4, "{:?}", owners(&store).await);
}
