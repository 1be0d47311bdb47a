//! SDK clients for the local servers, for external endpoints, or for real AWS.

use crate::counter::RequestCounter;
use crate::servers::{LocalOptions, LocalServers};
use crate::LocalError;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;
use std::sync::OnceLock;

/// Environment variable: DynamoDB endpoint URL the tests use instead of the in-process server.
pub const DYNAMODB_ENDPOINT_VAR: &str = "SHARDKEEPER_TEST_DYNAMODB_ENDPOINT";
/// Environment variable: Kinesis endpoint URL the tests use instead of the in-process server.
pub const KINESIS_ENDPOINT_VAR: &str = "SHARDKEEPER_TEST_KINESIS_ENDPOINT";
/// Environment variable: set to `1` to run the tests against real AWS (standard credential chain).
pub const REAL_AWS_VAR: &str = "SHARDKEEPER_TEST_REAL_AWS";

/// Where the clients send their requests.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Endpoints {
    /// DynamoDB and DynamoDB Streams endpoint; `None` is the AWS default.
    pub dynamodb: Option<String>,
    /// Kinesis endpoint; `None` is the AWS default.
    pub kinesis: Option<String>,
    /// Use dummy static credentials and us-east-1 (local servers) instead of
    /// the standard credential chain and region.
    pub dummy_credentials: bool,
}

impl Endpoints {
    /// The endpoints of running in-process servers.
    pub fn local(servers: &LocalServers) -> Self {
        Endpoints {
            dynamodb: Some(servers.dynamodb_endpoint()),
            kinesis: Some(servers.kinesis_endpoint()),
            dummy_credentials: true,
        }
    }
}

/// Ready SDK clients built from one [`SdkConfig`], each counting its requests.
#[derive(Debug, Clone)]
pub struct AwsClients {
    /// The shared configuration (region, credentials, behaviour version).
    pub config: SdkConfig,
    /// DynamoDB.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// Kinesis.
    pub kinesis: aws_sdk_kinesis::Client,
    /// DynamoDB Streams.
    pub streams: aws_sdk_dynamodbstreams::Client,
    /// Requests the DynamoDB client sent.
    pub dynamodb_requests: RequestCounter,
    /// Requests the Kinesis client sent.
    pub kinesis_requests: RequestCounter,
    /// Requests the DynamoDB Streams client sent.
    pub streams_requests: RequestCounter,
    /// Where the clients point.
    pub endpoints: Endpoints,
}

impl AwsClients {
    /// Builds the clients for `endpoints`.
    pub async fn connect(endpoints: &Endpoints) -> Self {
        let config = if endpoints.dummy_credentials {
            aws_config::defaults(BehaviorVersion::latest())
                .region(Region::new("us-east-1"))
                .credentials_provider(Credentials::new(
                    "local",
                    "local",
                    None,
                    None,
                    "shardkeeper-local",
                ))
                .load()
                .await
        } else {
            aws_config::load_defaults(BehaviorVersion::latest()).await
        };
        let dynamodb_requests = RequestCounter::new();
        let kinesis_requests = RequestCounter::new();
        let mut ddb =
            aws_sdk_dynamodb::config::Builder::from(&config).interceptor(dynamodb_requests.clone());
        let mut kin =
            aws_sdk_kinesis::config::Builder::from(&config).interceptor(kinesis_requests.clone());
        let streams_requests = RequestCounter::new();
        let mut streams = aws_sdk_dynamodbstreams::config::Builder::from(&config)
            .interceptor(streams_requests.clone());
        if let Some(url) = &endpoints.dynamodb {
            ddb = ddb.endpoint_url(url);
            streams = streams.endpoint_url(url);
        }
        if let Some(url) = &endpoints.kinesis {
            kin = kin.endpoint_url(url);
        }
        AwsClients {
            dynamodb: aws_sdk_dynamodb::Client::from_conf(ddb.build()),
            kinesis: aws_sdk_kinesis::Client::from_conf(kin.build()),
            streams: aws_sdk_dynamodbstreams::Client::from_conf(streams.build()),
            config,
            dynamodb_requests,
            kinesis_requests,
            streams_requests,
            endpoints: endpoints.clone(),
        }
    }
}

static SHARED: OnceLock<Result<LocalServers, String>> = OnceLock::new();

/// The in-process servers shared by every caller in this process (started on first use).
pub fn shared_servers() -> Result<&'static LocalServers, LocalError> {
    SHARED
        .get_or_init(|| LocalServers::start(LocalOptions::default()).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| LocalError::Start(e.clone()))
}

/// The endpoints the test suite runs against: [`REAL_AWS_VAR`] selects real
/// AWS; [`DYNAMODB_ENDPOINT_VAR`] and [`KINESIS_ENDPOINT_VAR`] select
/// external servers one by one; whatever is not given is served by the
/// shared in-process servers.
pub fn test_endpoints() -> Result<Endpoints, LocalError> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if var(REAL_AWS_VAR).is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) {
        return Ok(Endpoints::default());
    }
    let dynamodb = var(DYNAMODB_ENDPOINT_VAR);
    let kinesis = var(KINESIS_ENDPOINT_VAR);
    let (dynamodb, kinesis) = match (dynamodb, kinesis) {
        (Some(d), Some(k)) => (d, k),
        (d, k) => {
            let local = shared_servers()?;
            (
                d.unwrap_or_else(|| local.dynamodb_endpoint()),
                k.unwrap_or_else(|| local.kinesis_endpoint()),
            )
        }
    };
    Ok(Endpoints {
        dynamodb: Some(dynamodb),
        kinesis: Some(kinesis),
        dummy_credentials: true,
    })
}

/// Clients for the test suite (see [`test_endpoints`]).
pub async fn test_clients() -> Result<AwsClients, LocalError> {
    Ok(AwsClients::connect(&test_endpoints()?).await)
}
