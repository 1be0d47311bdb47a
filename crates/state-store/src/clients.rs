//! The library's own copies of the AWS clients it is given: the same
//! connections, credentials, region and endpoint, with the SDK's retries
//! off and [`SdkTimeouts`] on connecting and on each attempt. The
//! [`RetryPolicy`](crate::RetryPolicy) of the call (`call_aws`, the store's
//! calls) is then the one retry budget of every request, instead of the
//! SDK's three attempts under each of the policy's.

use crate::retry::SdkTimeouts;
use aws_smithy_types::retry::RetryConfig;

/// The library's own Kinesis client of `client`: no SDK retries, `timeouts`
/// on every attempt. A SubscribeToShard attempt ends with its first answer,
/// so the event stream after it stays open past the attempt timeout
/// (`consumer::efo_worker::a_subscription_outlives_the_clients_attempt_timeout`).
pub fn own_kinesis_client(
    client: &aws_sdk_kinesis::Client,
    timeouts: &SdkTimeouts,
) -> aws_sdk_kinesis::Client {
    let config = client
        .config()
        .to_builder()
        .retry_config(RetryConfig::disabled())
        .timeout_config(timeouts.sdk_config())
        .build();
    aws_sdk_kinesis::Client::from_conf(config)
}

/// The store's own DynamoDB client of `client`: no SDK retries, `timeouts`
/// on every attempt.
pub(crate) fn own_dynamodb_client(
    client: &aws_sdk_dynamodb::Client,
    timeouts: &SdkTimeouts,
) -> aws_sdk_dynamodb::Client {
    let config = client
        .config()
        .to_builder()
        .retry_config(RetryConfig::disabled())
        .timeout_config(timeouts.sdk_config())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}
