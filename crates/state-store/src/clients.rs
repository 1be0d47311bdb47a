//! The library's own copies of the AWS clients it is given: the same
//! connections, credentials, region and endpoint, with the SDK's retries
//! off and [`SdkTimeouts`] on connecting and on each attempt. The
//! [`RetryPolicy`](crate::RetryPolicy) of the call (`call_aws`, the store's
//! calls) is then the one retry budget of every request, instead of the
//! SDK's three attempts under each of the policy's.

use crate::retry::SdkTimeouts;
use aws_smithy_types::retry::RetryConfig;

/// `$client`'s own copy with `$timeouts`, a client of the SDK crate
/// `$sdk`; `$client` itself when it is one already (no SDK retries, the
/// same timeouts), so a client handed on from one part of the library to
/// the next is not copied again.
macro_rules! own_client {
    ($sdk:ident, $client:expr, $timeouts:expr) => {{
        let config = $client.config();
        let timeouts = $timeouts.sdk_config();
        let own = config.retry_config().is_some_and(|r| r.max_attempts() == 1)
            && config.timeout_config() == Some(&timeouts);
        if own {
            $client.clone()
        } else {
            $sdk::Client::from_conf(
                config
                    .to_builder()
                    .retry_config(RetryConfig::disabled())
                    .timeout_config(timeouts)
                    .build(),
            )
        }
    }};
}

/// The library's own Kinesis client of `client`: no SDK retries, `timeouts`
/// on every attempt. A SubscribeToShard attempt ends with its first answer,
/// so the event stream after it stays open past the attempt timeout
/// (`consumer::efo_worker::a_subscription_outlives_the_clients_attempt_timeout`).
pub fn own_kinesis_client(
    client: &aws_sdk_kinesis::Client,
    timeouts: &SdkTimeouts,
) -> aws_sdk_kinesis::Client {
    own_client!(aws_sdk_kinesis, client, timeouts)
}

/// The store's own DynamoDB client of `client`: no SDK retries, `timeouts`
/// on every attempt.
pub(crate) fn own_dynamodb_client(
    client: &aws_sdk_dynamodb::Client,
    timeouts: &SdkTimeouts,
) -> aws_sdk_dynamodb::Client {
    own_client!(aws_sdk_dynamodb, client, timeouts)
}
