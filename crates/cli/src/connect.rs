//! SDK clients from the standard chains, or for given endpoints.

use crate::args::{Connection, Target};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use shardkeeper::state::{StateStore, StoreConfig};

/// The SDK configuration of `conn`: the standard credential and region
/// chains, with `--profile` and `--region` applied. Against an endpoint
/// with no credentials in the environment, dummy static credentials are
/// used (what local servers accept).
async fn sdk_config(conn: &Connection) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(profile) = &conn.profile {
        loader = loader.profile_name(profile);
    }
    if let Some(region) = &conn.region {
        loader = loader.region(Region::new(region.clone()));
    }
    let local = conn.endpoint_url.is_some() || conn.kinesis_endpoint_url.is_some();
    let has_credentials = conn.profile.is_some()
        || [
            "AWS_ACCESS_KEY_ID",
            "AWS_PROFILE",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
        ]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if local && !has_credentials {
        loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "local",
            "local",
            None,
            None,
            "shardkeeper-cli",
        ));
        if conn.region.is_none() {
            loader = loader.region(Region::new("us-east-1"));
        }
    }
    loader.load().await
}

/// A DynamoDB client for `conn` (`--endpoint-url` applied), without the
/// SDK's retries: the commands' [`RetryPolicy`](shardkeeper::state::RetryPolicy)
/// is the one retry budget of each call.
pub async fn dynamodb(conn: &Connection) -> aws_sdk_dynamodb::Client {
    let config = sdk_config(conn).await;
    let mut builder = aws_sdk_dynamodb::config::Builder::from(&config)
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled());
    if let Some(url) = &conn.endpoint_url {
        builder = builder.endpoint_url(url);
    }
    aws_sdk_dynamodb::Client::from_conf(builder.build())
}

/// The state store of `target`'s group.
pub async fn store(target: &Target) -> Result<StateStore, crate::Error> {
    let store_config = StoreConfig::new(&target.group, &target.stream)?.table(&target.table)?;
    Ok(StateStore::new(dynamodb(&target.conn).await, store_config))
}

/// [`store`], and the library's own Kinesis client
/// ([`own_kinesis_client`](shardkeeper::state::own_kinesis_client),
/// `--kinesis-endpoint-url` applied).
pub async fn clients(
    target: &Target,
) -> Result<(StateStore, aws_sdk_kinesis::Client), crate::Error> {
    let config = sdk_config(&target.conn).await;
    let mut builder = aws_sdk_kinesis::config::Builder::from(&config);
    if let Some(url) = &target.conn.kinesis_endpoint_url {
        builder = builder.endpoint_url(url);
    }
    let store = store(target).await?;
    let kinesis = shardkeeper::state::own_kinesis_client(
        &aws_sdk_kinesis::Client::from_conf(builder.build()),
        &store.config().timeouts,
    );
    Ok((store, kinesis))
}
