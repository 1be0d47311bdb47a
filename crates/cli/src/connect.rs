//! SDK clients from the standard chains, or for given endpoints.

use crate::args::{Connection, Target};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::ProvideCredentials as _;
use shardkeeper::state::{StateStore, StoreConfig};

/// The SDK configuration of `conn`: the standard credential and region
/// chains, with `--profile` and `--region` applied. Against an endpoint
/// (`--endpoint-url`, `--kinesis-endpoint-url`) the chain's credentials are
/// used whenever it finds some (a VPC endpoint, or a local server that
/// checks them); only when it finds none are dummy static credentials used
/// (what local servers accept), and `us-east-1` when no region is set.
async fn sdk_config(conn: &Connection) -> SdkConfig {
    sdk_config_from(conn, None).await
}

/// [`sdk_config`], reading the shared config and credentials files given
/// (`None`: the standard ones). The files' type is named by aws-config's
/// alias, deprecated for its home in aws-runtime, which is not a dependency
/// of this crate.
#[allow(deprecated)]
async fn sdk_config_from(
    conn: &Connection,
    files: Option<&aws_config::profile::profile_file::ProfileFiles>,
) -> SdkConfig {
    let loader = || {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(files) = files {
            loader = loader.profile_files(files.clone());
        }
        if let Some(profile) = &conn.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(region) = &conn.region {
            loader = loader.region(Region::new(region.clone()));
        }
        loader
    };
    let config = loader().load().await;
    let local = conn.endpoint_url.is_some()
        || conn.kinesis_endpoint_url.is_some()
        || conn.s3_endpoint_url.is_some();
    if !local {
        return config;
    }
    let found = match config.credentials_provider() {
        Some(chain) => chain.provide_credentials().await.is_ok(),
        None => false,
    };
    if found && config.region().is_some() {
        return config;
    }
    let mut local_loader = loader();
    if !found {
        local_loader =
            local_loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "local",
                "local",
                None,
                None,
                "shardkeeper-cli",
            ));
    }
    if config.region().is_none() {
        local_loader = local_loader.region(Region::new("us-east-1"));
    }
    local_loader.load().await
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

/// The state store of `target`'s group (its names resolved, see
/// [`crate::stack::resolve`]).
pub async fn store(target: &Target) -> Result<StateStore, crate::Error> {
    let name = |v: &Option<String>, arg: &'static str| {
        v.clone()
            .ok_or_else(|| crate::Error::bad(arg, "give it, or --stack"))
    };
    let store_config = StoreConfig::new(
        &name(&target.group, "--group")?,
        &name(&target.stream, "--stream")?,
    )?
    .table(
        target
            .table
            .as_deref()
            .unwrap_or(crate::stack::DEFAULT_TABLE),
    )?;
    Ok(StateStore::new(dynamodb(&target.conn).await, store_config))
}

/// A CloudFormation client for `conn` (for `--stack`).
pub async fn cloudformation(conn: &Connection) -> aws_sdk_cloudformation::Client {
    aws_sdk_cloudformation::Client::new(&sdk_config(conn).await)
}

/// A Lambda client (for an event source mapping's description), at
/// `endpoint_url` when one is given.
pub async fn lambda(conn: &Connection, endpoint_url: Option<&str>) -> aws_sdk_lambda::Client {
    let mut builder = aws_sdk_lambda::config::Builder::from(&sdk_config(conn).await);
    if let Some(url) = endpoint_url {
        builder = builder.endpoint_url(url);
    }
    aws_sdk_lambda::Client::from_conf(builder.build())
}

/// A Kinesis client for `conn` (`--kinesis-endpoint-url` applied), with
/// the SDK's retries.
pub async fn kinesis(conn: &Connection) -> aws_sdk_kinesis::Client {
    let config = sdk_config(conn).await;
    let mut builder = aws_sdk_kinesis::config::Builder::from(&config);
    if let Some(url) = &conn.kinesis_endpoint_url {
        builder = builder.endpoint_url(url);
    }
    aws_sdk_kinesis::Client::from_conf(builder.build())
}

/// An S3 client for `conn` (`--s3-endpoint-url` applied, path-style).
pub async fn s3(conn: &Connection) -> aws_sdk_s3::Client {
    let config = sdk_config(conn).await;
    let mut builder = aws_sdk_s3::config::Builder::from(&config);
    if let Some(url) = &conn.s3_endpoint_url {
        builder = builder.endpoint_url(url).force_path_style(true);
    }
    aws_sdk_s3::Client::from_conf(builder.build())
}

/// [`store`], and the library's own Kinesis client
/// ([`own_kinesis_client`](shardkeeper::state::own_kinesis_client),
/// `--kinesis-endpoint-url` applied).
pub async fn clients(
    target: &Target,
) -> Result<(StateStore, aws_sdk_kinesis::Client), crate::Error> {
    let store = store(target).await?;
    let kinesis = shardkeeper::state::own_kinesis_client(
        &kinesis(&target.conn).await,
        &store.config().timeouts,
    );
    Ok((store, kinesis))
}

#[cfg(test)]
#[allow(deprecated)] // aws-config's aliases, see `sdk_config_from`
mod tests {
    use super::*;
    use aws_config::profile::profile_file::{ProfileFileKind, ProfileFiles};

    fn conn() -> Connection {
        Connection {
            profile: None,
            region: Some("eu-west-1".into()),
            endpoint_url: Some("http://127.0.0.1:1".into()),
            kinesis_endpoint_url: None,
            s3_endpoint_url: None,
        }
    }

    async fn key_of(config: &SdkConfig) -> String {
        let chain = config.credentials_provider().expect("a provider");
        chain
            .provide_credentials()
            .await
            .expect("credentials")
            .access_key_id()
            .to_owned()
    }

    /// With `--endpoint-url`, credentials the chain finds (here the default
    /// profile of a credentials file, with no variable naming it) are used,
    /// not swapped for dummy ones; dummy ones only when it finds none.
    #[tokio::test]
    async fn an_endpoint_keeps_the_credentials_the_chain_finds() {
        if std::env::var_os("AWS_ACCESS_KEY_ID").is_some() {
            return; // the environment's own keys come first in the chain
        }
        let dir = std::env::temp_dir().join(format!("shardkeeper-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let with_keys = dir.join("credentials");
        std::fs::write(
            &with_keys,
            "[default]\naws_access_key_id = AKIATEAMKEY\naws_secret_access_key = secret\n",
        )
        .unwrap();
        let config = dir.join("config");
        std::fs::write(&config, "").unwrap();
        let files = |path: &std::path::Path| {
            ProfileFiles::builder()
                .with_file(ProfileFileKind::Credentials, path)
                .with_file(ProfileFileKind::Config, &config)
                .build()
        };
        let found = sdk_config_from(&conn(), Some(&files(&with_keys))).await;
        assert_eq!(key_of(&found).await, "AKIATEAMKEY");
        let none = dir.join("empty");
        std::fs::write(&none, "").unwrap();
        let local = sdk_config_from(&conn(), Some(&files(&none))).await;
        assert_eq!(key_of(&local).await, "local");
        std::fs::remove_dir_all(&dir).ok();
    }
}
