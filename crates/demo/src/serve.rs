//! The embedded servers as a deployed stack has them before any function
//! starts (the stream, the state table, the example application's orders
//! and projection tables), and the environment a function needs to reach
//! them: what `shardkeeper-demo --serve` runs for `cargo lambda watch`, and
//! what the init benchmark starts the function binaries with.

use crate::Error;
use shardkeeper::state::{StateStore, StoreConfig, TableOptions};
use shardkeeper_local::{AwsClients, Endpoints, LocalOptions, LocalServers};
use std::path::Path;

/// The consumer group the functions are given.
pub const GROUP: &str = "orders-app";
/// The Kinesis stream created.
pub const STREAM: &str = "orders";
/// Its shards.
pub const SHARD_COUNT: i32 = 4;

fn err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Demo(format!("{what}: {e}"))
}

/// Starts the servers and creates the stream and the state table.
pub async fn start_servers(options: LocalOptions) -> Result<(LocalServers, AwsClients), Error> {
    let servers = LocalServers::start(options).map_err(|e| err("servers", e))?;
    let aws = AwsClients::connect(&Endpoints::local(&servers)).await;
    aws.kinesis
        .create_stream()
        .stream_name(STREAM)
        .shard_count(SHARD_COUNT)
        .send()
        .await
        .map_err(|e| err("create stream", aws_sdk_kinesis::Error::from(e)))?;
    let store = StateStore::new(aws.dynamodb.clone(), StoreConfig::new(GROUP, STREAM)?);
    store.table().ensure(&TableOptions::default()).await?;
    Ok((servers, aws))
}

/// A table keyed by the string `order_id`, as the application's orders and
/// projection tables are.
pub async fn order_table(aws: &AwsClients, name: &str) -> Result<(), Error> {
    shardkeeper_local::create_keyed_table(&aws.dynamodb, name, "order_id", false)
        .await
        .map_err(|e| err("create table", e))?;
    Ok(())
}

/// The environment of one function: the Lambda variables, the local
/// endpoints with dummy credentials, and the function's own configuration
/// (`orders` and `projection` are the example application's).
pub fn environment(function: &str, servers: &LocalServers) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("AWS_LAMBDA_FUNCTION_NAME", function.to_owned()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256".to_owned()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", "local".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "local".to_owned()),
        ("AWS_ENDPOINT_URL_DYNAMODB", servers.dynamodb_endpoint()),
        ("AWS_ENDPOINT_URL_KINESIS", servers.kinesis_endpoint()),
        // No shared config files and no instance metadata, as in Lambda.
        ("AWS_CONFIG_FILE", "/nonexistent/config".to_owned()),
        (
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/credentials".to_owned(),
        ),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ("RUST_LOG", "info".to_owned()),
        ("SHARDKEEPER_TABLE", "shardkeeper-state".to_owned()),
        ("SHARDKEEPER_GROUP", GROUP.to_owned()),
        ("SHARDKEEPER_STREAM", STREAM.to_owned()),
    ];
    match function {
        "orders" => {
            env.push(("ORDERS_TABLE", "orders".to_owned()));
            env.push(("SHARDKEEPER_MAX_ATTEMPTS", "3".to_owned()));
        }
        "projection" => {
            env.push(("PROJECTION_TABLE", "projection".to_owned()));
            env.push(("SHARDKEEPER_STREAM", "orders-table-stream".to_owned()));
        }
        _ => {}
    }
    env
}

/// Serves until Ctrl-C on fixed ports (DynamoDB 8000, Kinesis 4567),
/// printing (and writing to `env_file`) one environment for every function,
/// as `cargo lambda watch --env-file` gives all of them the same variables.
pub async fn serve(env_file: Option<&Path>) -> Result<(), Error> {
    let (servers, aws) = start_servers(LocalOptions {
        dynamodb_port: 8000,
        kinesis_port: 4567,
        ..LocalOptions::default()
    })
    .await?;
    order_table(&aws, "orders").await?;
    order_table(&aws, "projection").await?;
    println!("DynamoDB at {}", servers.dynamodb_endpoint());
    println!("Kinesis at {}", servers.kinesis_endpoint());
    println!(
        "created: stream {STREAM:?} ({SHARD_COUNT} shards), tables \"shardkeeper-state\", \"orders\", \"projection\""
    );
    let mut env: Vec<String> = environment("lease-rebalancer", &servers)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("AWS_LAMBDA_") && !k.ends_with("_FILE"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.push("ORDERS_TABLE=orders".to_owned());
    env.push("PROJECTION_TABLE=projection".to_owned());
    let env = env.join("\n") + "\n";
    println!("the functions reach them with this environment:\n{env}");
    if let Some(path) = env_file {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, &env)?;
        println!(
            "(written to {0}: cargo lambda watch --env-file {0})",
            path.display()
        );
    }
    println!("Ctrl-C stops them.");
    tokio::signal::ctrl_c().await?;
    servers.stop();
    Ok(())
}
