//! The local demo: a consumer group on a Kinesis stream, on DynamoDB and
//! Kinesis servers started in this process. Nothing to install, no AWS account.
//!
//! `cargo run --example demo` — it creates a 4-shard stream, writes records,
//! lets three consumers take leases, read their shards and checkpoint (fenced),
//! hands a lease over by a claim, splits a shard and shows that the children
//! wait for their parent, and prints the group's state at each step.

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::ShardIteratorType;
use shardkeeper::state::{
    kinesis_stream_created, Checkpoint, ConsumerId, ConsumerInfo, GroupSnapshot, Lease,
    RetryPolicy, ShardScope, ShardSpec, StartOptions, StateStore, StoreConfig, TableOptions,
};
use shardkeeper_local::{AwsClients, Endpoints, LocalOptions, LocalServers};
use std::time::Duration;

type Error = Box<dyn std::error::Error + Send + Sync>;
const TERM: Duration = Duration::from_secs(30);

fn print_group(title: &str, snapshot: &GroupSnapshot) {
    println!("\n== {title}");
    println!(
        "{:<24} {:<10} {:>7} {:<9} checkpoint",
        "shard", "owner", "counter", "state"
    );
    for shard in &snapshot.shards {
        let state = if shard.depleted {
            "depleted"
        } else if !shard.pending_parents.is_empty() {
            "waiting"
        } else {
            "open"
        };
        println!(
            "{:<24} {:<10} {:>7} {:<9} {}",
            shard.shard_id.as_str(),
            shard.owner.as_ref().map(|o| o.as_str()).unwrap_or("-"),
            shard.counter,
            state,
            shard
                .checkpoint
                .as_ref()
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
        );
    }
    for (consumer, assignment) in snapshot.assignments() {
        let shards: Vec<_> = assignment.shards.iter().map(|s| s.as_str()).collect();
        println!("  {consumer}: {shards:?}");
    }
}

async fn discover(
    aws: &AwsClients,
    store: &StateStore,
    stream: &str,
) -> Result<Vec<ShardSpec>, Error> {
    let out = aws.kinesis.list_shards().stream_name(stream).send().await?;
    let mut specs = Vec::new();
    for shard in out.shards() {
        let spec = ShardSpec::from_kinesis(shard)?;
        store.ensure_shard(&ShardScope::Group, &spec).await?;
        specs.push(spec);
    }
    Ok(specs)
}

/// Reads a leased shard from its checkpoint and checkpoints what it read.
async fn read_and_checkpoint(
    aws: &AwsClients,
    store: &StateStore,
    stream: &str,
    lease: &Lease,
) -> Result<usize, Error> {
    let iterator = match store
        .fetch_checkpoint(&ShardScope::Group, &lease.shard_id)
        .await
    {
        Ok(Checkpoint::After { sequence, .. }) => {
            aws.kinesis
                .get_shard_iterator()
                .stream_name(stream)
                .shard_id(lease.shard_id.as_str())
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(sequence.as_str())
                .send()
                .await?
        }
        _ => {
            aws.kinesis
                .get_shard_iterator()
                .stream_name(stream)
                .shard_id(lease.shard_id.as_str())
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await?
        }
    };
    let Some(iterator) = iterator.shard_iterator() else {
        return Ok(0);
    };
    let records = aws
        .kinesis
        .get_records()
        .shard_iterator(iterator)
        .send()
        .await?;
    if let Some(last) = records.records().last() {
        let arrival = last
            .approximate_arrival_timestamp()
            .and_then(|t| t.to_millis().ok());
        store
            .checkpoint(lease, &Checkpoint::after(last.sequence_number())?, arrival)
            .await?;
    }
    Ok(records.records().len())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let servers = LocalServers::start(LocalOptions::default())?;
    println!(
        "DynamoDB at {}, Kinesis at {}",
        servers.dynamodb_endpoint(),
        servers.kinesis_endpoint()
    );
    let aws = AwsClients::connect(&Endpoints::local(&servers)).await;

    let stream = "orders";
    aws.kinesis
        .create_stream()
        .stream_name(stream)
        .shard_count(4)
        .send()
        .await?;
    for i in 0..40 {
        aws.kinesis
            .put_record()
            .stream_name(stream)
            .partition_key(format!("customer-{i}"))
            .data(Blob::new(format!("{{\"order\":{i}}}")))
            .send()
            .await?;
    }

    let store = StateStore::new(aws.dynamodb.clone(), StoreConfig::new("billing", stream)?);
    let created = kinesis_stream_created(&aws.kinesis, stream, &RetryPolicy::default()).await?;
    let report = store
        .start(&StartOptions {
            table: TableOptions::default(),
            stream_created: created,
        })
        .await?;
    println!(
        "state table {} (created: {}), stream state {:?}",
        report.table.arn, report.table.created, report.stream
    );
    let shards = discover(&aws, &store, stream).await?;

    let consumers: Vec<ConsumerId> = ["alpha", "beta", "gamma"]
        .iter()
        .map(|c| ConsumerId::new(*c))
        .collect::<Result<_, _>>()?;
    for c in &consumers {
        store
            .heartbeat(&ConsumerInfo::for_this_process(c.clone(), store.now()))
            .await?;
    }
    let mut leases = Vec::new();
    for (i, shard) in shards.iter().enumerate() {
        let owner = &consumers[i % consumers.len()];
        if let Some(lease) = store.acquire_lease(&shard.shard_id, owner, TERM).await? {
            leases.push(lease);
        }
    }
    let mut read = 0;
    for lease in &leases {
        read += read_and_checkpoint(&aws, &store, stream, lease).await?;
    }
    println!("read and checkpointed {read} records");
    print_group("leases taken, shards read", &store.load_group().await?);

    // gamma claims alpha's first shard; alpha honours it at its next renewal.
    let first = leases[0].clone();
    store
        .claim_lease(&first.shard_id, &consumers[2], first.counter)
        .await?;
    let renewal = store.renew_lease(&first, TERM).await?;
    if let Some(claim) = renewal.claim {
        println!(
            "\n{} sees a claim by {} on {}: hands it over",
            first.owner, claim.by, first.shard_id
        );
        store.release_lease(&first, TERM).await?;
    }
    match store
        .checkpoint(&first, &Checkpoint::after("99999999999999999999")?, None)
        .await
    {
        Err(e) if e.is_lease_lost() => println!("{} can no longer checkpoint: {e}", first.owner),
        other => println!("unexpected: {other:?}"),
    }

    // Split a shard: the children wait until the parent is read to its end.
    let parent = &shards[1];
    let (lo, hi) = parent.hash_range.clone().unwrap_or_default();
    let mid = (lo.parse::<u128>()? + hi.parse::<u128>()?) / 2;
    aws.kinesis
        .split_shard()
        .stream_name(stream)
        .shard_to_split(parent.shard_id.as_str())
        .new_starting_hash_key(mid.to_string())
        .send()
        .await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = discover(&aws, &store, stream).await?;
    print_group(
        "after SplitShard: children wait for their parent",
        &store.load_group().await?,
    );
    let children: Vec<ShardSpec> = after
        .into_iter()
        .filter(|s| s.parents.contains(&parent.shard_id))
        .collect();
    let parent_lease = leases
        .iter()
        .find(|l| l.shard_id == parent.shard_id)
        .cloned()
        .ok_or("parent lease")?;
    read_and_checkpoint(&aws, &store, stream, &parent_lease).await?;
    store.mark_depleted(&parent_lease, &children).await?;
    for child in &children {
        store
            .acquire_lease(&child.shard_id, &parent_lease.owner, TERM)
            .await?;
    }
    print_group(
        "parent depleted: children leased, starting at their first sequence number",
        &store.load_group().await?,
    );
    servers.stop();
    Ok(())
}
