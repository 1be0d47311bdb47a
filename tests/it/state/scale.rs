//! A group of 10,000 shard items: created concurrently, read back by a paginated Query.

use crate::support::common::ctx;
use shardkeeper::state::{ConsumerId, ShardScope, ShardSpec};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_ten_thousand_shards_reads_back_whole() {
    let ctx = ctx().await;
    let store = ctx.store("big");
    let count = 10_000usize;
    let workers = 16;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let store = store.clone();
        tasks.spawn(async move {
            for i in (w..count).step_by(workers) {
                let spec = ShardSpec::new(&format!("shardId-{i:012}")).unwrap();
                store
                    .shards()
                    .ensure(&ShardScope::Group, &spec)
                    .await
                    .unwrap();
            }
        });
    }
    tasks.join_all().await;
    let me = ConsumerId::new("w").unwrap();
    let last = "shardId-000000009999".try_into().unwrap();
    store
        .leases()
        .acquire(&last, &me, Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();

    let before = ctx.aws.dynamodb_requests.snapshot();
    let snapshot = store.load_group().await.unwrap();
    let pages = ctx.aws.dynamodb_requests.since(&before)["Query"].requests;
    assert_eq!(snapshot.shards.len(), count);
    assert!(
        pages > 1,
        "10,000 items take more than one 1 MB page, got {pages}"
    );
    let mut ids: Vec<_> = snapshot
        .shards
        .iter()
        .map(|s| s.shard_id.to_string())
        .collect();
    ids.dedup();
    assert_eq!(ids.len(), count);
    assert_eq!(store.leases().owned_shards(&me).await.unwrap().len(), 1);
}
