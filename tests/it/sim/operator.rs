//! What a stalled simulated run prints (the operator's moves are
//! `support::operator`).

use shardkeeper::state::StateStore;
use std::time::Duration;

/// Where a stalled group stands: every shard not depleted, every consumer.
pub async fn stalled(store: &StateStore, heartbeat_timeout: Duration) -> Vec<String> {
    let Ok(snapshot) = store.load_group().await else {
        return vec!["the group could not be read".into()];
    };
    let status = shardkeeper::group::GroupStatus::from_snapshot(&snapshot, heartbeat_timeout);
    let mut out: Vec<String> = status
        .shards
        .iter()
        .filter(|r| r.state != "depleted")
        .map(|r| format!("shard: {r:?}"))
        .collect();
    out.extend(status.consumers.iter().map(|c| format!("consumer: {c:?}")));
    // What the rows leave out (the parents still waited for, rewind marks).
    out.extend(
        snapshot
            .shards
            .iter()
            .filter(|s| !s.depleted)
            .map(|s| format!("stored: {s:?}")),
    );
    if let Some(stream) = &snapshot.stream {
        out.push(format!("stream: {stream:?}"));
    }
    out
}
