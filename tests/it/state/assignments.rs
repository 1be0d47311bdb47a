//! Who is assigned what, in the three storage modes, from one read of the group.

use crate::support::common::{ctx, seed_shards};
use shardkeeper::state::{Checkpoint, ConsumerId, ConsumerInfo, EfoName, ShardId, ShardScope};
use std::time::Duration;

#[tokio::test]
async fn assignments_cover_leases_standalone_and_standalone_efo() {
    let ctx = ctx().await;
    let store = ctx.store("modes");
    let shards = seed_shards(&store, 3).await;
    let now = ctx.clock_now();
    let (leased, solo, efo_user) = (
        ConsumerId::new("leased").unwrap(),
        ConsumerId::new("solo").unwrap(),
        ConsumerId::new("efo-user").unwrap(),
    );
    for id in [&leased, &solo, &efo_user] {
        let mut info = ConsumerInfo::for_this_process(id.clone(), now);
        info.standalone = id != &leased;
        store.consumers().heartbeat(&info).await.unwrap();
    }
    store
        .leases()
        .acquire(&shards[2], &leased, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    store
        .leases()
        .acquire(&shards[0], &leased, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let own = ShardScope::Consumer(solo.clone());
    for shard in &shards {
        store
            .checkpoints()
            .save_unleased(&own, shard, &Checkpoint::TrimHorizon, None)
            .await
            .unwrap();
    }
    let efo = EfoName::new("pool-0").unwrap();
    store
        .efo_consumers()
        .register(&efo, "arn:efo:0")
        .await
        .unwrap();
    let lock = store
        .efo_consumers()
        .get_or_lock(&efo_user)
        .await
        .unwrap()
        .unwrap();
    store
        .checkpoints()
        .save_efo(
            &lock,
            &ShardId::new("shardId-000000000001").unwrap(),
            &Checkpoint::Latest,
            None,
        )
        .await
        .unwrap();

    let assignments = store.shard_assignments().await.unwrap();
    let ids = |c: &ConsumerId| -> Vec<String> {
        assignments[c]
            .shards
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    assert_eq!(
        ids(&leased),
        vec!["shardId-000000000000", "shardId-000000000002"]
    );
    assert_eq!(ids(&solo).len(), 3);
    assert_eq!(ids(&efo_user), vec!["shardId-000000000001"]);
    assert!(assignments[&solo].consumer.info.standalone);
    let snapshot = store.load_group().await.unwrap();
    assert_eq!(snapshot.own_shards.len(), 3);
    assert_eq!(snapshot.efo_shards.len(), 1);
    assert_eq!(snapshot.efo.len(), 1);
}
