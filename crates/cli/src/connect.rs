//! SDK clients from the standard chains, or for a given endpoint.

use crate::args::Target;
use aws_config::{BehaviorVersion, Region};
use shardkeeper::state::{StateStore, StoreConfig};

/// The state store of `target`'s group: the standard credential and region
/// chains, with `--profile`, `--region` and `--endpoint-url` applied. Against an endpoint
/// with no credentials in the environment, dummy static credentials are
/// used (what local servers accept).
pub async fn store(target: &Target) -> Result<StateStore, crate::Error> {
    Ok(clients(target).await?.0)
}

/// [`store`], and a Kinesis client from the same chains (`--endpoint-url`
/// applies to both: local servers answer on one URL each, so point it at
/// the one the command needs).
pub async fn clients(
    target: &Target,
) -> Result<(StateStore, aws_sdk_kinesis::Client), crate::Error> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(profile) = &target.profile {
        loader = loader.profile_name(profile);
    }
    if let Some(region) = &target.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(url) = &target.endpoint_url {
        loader = loader.endpoint_url(url);
        let has_credentials = target.profile.is_some()
            || [
                "AWS_ACCESS_KEY_ID",
                "AWS_PROFILE",
                "AWS_WEB_IDENTITY_TOKEN_FILE",
            ]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        if !has_credentials {
            loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "local",
                "local",
                None,
                None,
                "shardkeeper-cli",
            ));
            if target.region.is_none() {
                loader = loader.region(Region::new("us-east-1"));
            }
        }
    }
    let config = loader.load().await;
    let store_config = StoreConfig::new(&target.group, &target.stream)?.table(&target.table)?;
    Ok((
        StateStore::new(aws_sdk_dynamodb::Client::new(&config), store_config),
        aws_sdk_kinesis::Client::new(&config),
    ))
}
