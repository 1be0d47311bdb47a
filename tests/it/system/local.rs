//! The in-process servers themselves: fixed ports, file-backed DynamoDB that
//! survives a restart (of the process, or of the server alone mid-run), and enhanced fan-out SubscribeToShard through the SDK.

use crate::support::common::{active_efo_consumer, create_stream, ctx, stream_arn};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{ShardIteratorType, StartingPosition, SubscribeToShardEventStream};
use shardkeeper::state::{ConsumerId, ConsumerInfo, StateStore, StoreConfig, TableOptions};
use shardkeeper_local::{unique_name, AwsClients, Endpoints, LocalOptions, LocalServers};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn file_backed_dynamodb_keeps_state_across_a_restart_on_fixed_ports() {
    let dir = std::env::temp_dir().join(unique_name("sk-local"));
    std::fs::create_dir_all(&dir).unwrap();
    let options = LocalOptions {
        dynamodb_port: free_port(),
        kinesis_port: free_port(),
        dynamodb_file: Some(dir.join("state.sqlite")),
        ..LocalOptions::default()
    };
    let me = ConsumerId::new("survivor").unwrap();
    let servers = LocalServers::start(options.clone()).unwrap();
    assert_eq!(
        servers.dynamodb_endpoint(),
        format!("http://127.0.0.1:{}", options.dynamodb_port)
    );
    let aws = AwsClients::connect(&Endpoints::local(&servers)).await;
    let store = StateStore::new(aws.dynamodb.clone(), StoreConfig::new("g", "s").unwrap());
    store
        .table()
        .ensure(&TableOptions::default())
        .await
        .unwrap();
    store
        .consumers()
        .heartbeat(&ConsumerInfo::for_this_process(me.clone(), 42))
        .await
        .unwrap();
    drop(aws);
    servers.stop();

    let servers = LocalServers::start(options).unwrap();
    let aws = AwsClients::connect(&Endpoints::local(&servers)).await;
    let store = StateStore::new(aws.dynamodb.clone(), StoreConfig::new("g", "s").unwrap());
    let report = store
        .table()
        .ensure(&TableOptions::default())
        .await
        .unwrap();
    assert!(!report.created, "the table survived the restart");
    let back = store
        .consumers()
        .get(&me)
        .await
        .unwrap()
        .expect("consumer survived");
    assert_eq!(back.info.started, 42);
    drop(aws);
    servers.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_stopped_dynamodb_fails_calls_as_transient_and_comes_back_on_its_file() {
    let dir = std::env::temp_dir().join(unique_name("sk-restart"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut servers = LocalServers::start(LocalOptions {
        dynamodb_file: Some(dir.join("state.sqlite")),
        ..LocalOptions::default()
    })
    .unwrap();
    let endpoint = servers.dynamodb_endpoint();
    let aws = AwsClients::connect(&Endpoints::local(&servers)).await;
    let store = StateStore::new(aws.dynamodb.clone(), StoreConfig::new("g", "s").unwrap());
    store
        .table()
        .ensure(&TableOptions::default())
        .await
        .unwrap();
    let me = ConsumerId::new("steady").unwrap();
    store
        .consumers()
        .heartbeat(&ConsumerInfo::for_this_process(me.clone(), 7))
        .await
        .unwrap();

    servers.stop_dynamodb().unwrap();
    assert!(!servers.dynamodb_running());
    let err = store.consumers().get(&me).await.unwrap_err();
    assert!(err.is_transient(), "no answer is transient: {err}");
    assert!(!err.is_lease_lost());

    servers.start_dynamodb().unwrap();
    assert_eq!(servers.dynamodb_endpoint(), endpoint, "the same port");
    // The same client, whose pooled connections died with the server.
    let back = store.consumers().get(&me).await.unwrap().expect("kept");
    assert_eq!(back.info.started, 7);
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_in_memory_dynamodb_refuses_to_stop() {
    let mut servers = LocalServers::start(LocalOptions::default()).unwrap();
    let err = servers.stop_dynamodb().unwrap_err();
    assert!(
        matches!(err, shardkeeper_local::LocalError::Restart(_)),
        "{err}"
    );
    assert!(servers.dynamodb_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enhanced_fan_out_subscribe_to_shard_delivers_records() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let stream_arn = stream_arn(&ctx.aws, &stream).await;
    let consumer_arn = active_efo_consumer(&ctx.aws, &stream_arn, "efo-test").await;
    let put = ctx
        .aws
        .kinesis
        .put_record()
        .stream_name(&stream)
        .partition_key("k")
        .data(Blob::new("fan-out"))
        .send()
        .await
        .unwrap();
    let mut out = ctx
        .aws
        .kinesis
        .subscribe_to_shard()
        .consumer_arn(&consumer_arn)
        .shard_id(put.shard_id())
        .starting_position(
            StartingPosition::builder()
                .r#type(ShardIteratorType::TrimHorizon)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..20 {
        match out.event_stream.recv().await.unwrap() {
            Some(SubscribeToShardEventStream::SubscribeToShardEvent(event)) => {
                seen.extend(event.records().iter().map(|r| r.data().as_ref().to_vec()));
                if !seen.is_empty() {
                    break;
                }
            }
            Some(_) => {}
            None => break,
        }
    }
    assert_eq!(seen, vec![b"fan-out".to_vec()]);
}
