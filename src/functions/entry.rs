//! The whole `main` of each function, so a function's binary is a few
//! lines: configuration from the environment, AWS clients from the standard
//! credential and region chains, then the Lambda runtime loop.

#[cfg(feature = "worker")]
use super::init_scheduled;
#[cfg(feature = "esm")]
use super::init_tracing;
#[cfg(feature = "worker")]
use super::WorkerFunction;
#[cfg(feature = "fleet")]
use super::{handle_reap, handle_rebalance, Fleet, LambdaStarter, Reaper, Rebalancer};
#[cfg(feature = "esm")]
use crate::config::{ProcessorConfig, PARKED_IN_TABLE_FOR};
#[cfg(feature = "esm")]
use crate::lambda::{BatchProcessor, EventSource};
#[cfg(feature = "worker")]
use crate::processing::RecordHandler as WorkerHandler;
#[cfg(feature = "esm")]
use crate::processing::RecordHandler;
#[cfg(feature = "esm")]
use crate::processing::{Parking, ProcessingOptions};
#[cfg(feature = "esm")]
use crate::state::StateStore;
#[cfg(any(feature = "worker", feature = "fleet"))]
use lambda_runtime::service_fn;

/// The lease-rebalancer's `main`: configured by the environment
/// ([`ScheduledConfig`](crate::config::ScheduledConfig)), it ticks until
/// each invocation's deadline, and starts the shard workers of
/// `SHARDKEEPER_WORKER_FUNCTION` when that is set.
#[cfg(feature = "fleet")]
pub async fn run_rebalancer() -> crate::Result<()> {
    let init = init_scheduled().await?;
    let fleet = init.config.worker_function.clone().map(|function| {
        let starter = LambdaStarter::new(&init.aws, function, init.config.store.retry);
        Fleet::new(init.config.fleet.clone(), std::sync::Arc::new(starter))
    });
    let rebalancer = Rebalancer {
        emit_metrics: true,
        fleet,
        ..Rebalancer::new(init.store, init.kinesis, init.config.rebalance.clone())
    };
    let timing = init.config.timing;
    lambda_runtime::run(service_fn(|event| {
        handle_rebalance(&rebalancer, timing, event)
    }))
    .await
    .map_err(crate::Error::Runtime)
}

/// The heartbeat-reaper's `main`: configured by the environment
/// ([`ScheduledConfig`](crate::config::ScheduledConfig)), it ticks until
/// each invocation's deadline.
#[cfg(feature = "fleet")]
pub async fn run_reaper() -> crate::Result<()> {
    let init = init_scheduled().await?;
    let reaper = Reaper {
        emit_metrics: true,
        ..Reaper::new(init.store, init.kinesis, init.config.reap.clone())
    };
    let timing = init.config.timing;
    lambda_runtime::run(service_fn(|event| handle_reap(&reaper, timing, event)))
        .await
        .map_err(crate::Error::Runtime)
}

#[cfg(feature = "worker")]
impl<F, H> WorkerFunction<F>
where
    F: Fn() -> H,
    H: WorkerHandler,
{
    /// A shard worker configured by the environment
    /// ([`ScheduledConfig`](crate::config::ScheduledConfig)), its store
    /// started and its connections warmed; `handler` makes the record
    /// handler once per invocation. Sets up logging ([`init_tracing`]).
    pub async fn from_env(handler: F) -> crate::Result<Self> {
        let init = init_scheduled().await?;
        Ok(WorkerFunction {
            store: init.store,
            kinesis: init.kinesis,
            lease_term: init.config.lease_term,
            config: init.config.worker_config(),
            margin: init.config.timing.margin,
            drain: init.config.drain,
            handler,
            emit_metrics: true,
            observer: None,
        })
    }

    /// Runs the Lambda runtime loop with this worker as the handler of
    /// every invocation.
    pub async fn run(self) -> crate::Result<()> {
        lambda_runtime::run(service_fn(|event| self.handle(event)))
            .await
            .map_err(crate::Error::Runtime)
    }
}

#[cfg(feature = "esm")]
impl<H: RecordHandler, S: EventSource> BatchProcessor<H, S> {
    /// A processor configured by the environment ([`ProcessorConfig`]):
    /// its state store on a DynamoDB client made from `aws` (one read at
    /// init warms the connection), parking after the configured attempts in
    /// the dead-letter stream if one is set, else in the state table for
    /// [`PARKED_IN_TABLE_FOR`]. Sets up logging ([`init_tracing`]).
    ///
    /// A state table that cannot be reached at init (throttled, an AWS
    /// internal error, no answer) does not fail it: the processor starts,
    /// and each batch runs without de-duplication while the table stays
    /// out of reach (reported in its `DeduplicationOff` metric), as a batch
    /// does whose table fails in the middle. A missing table, a denied call
    /// or a wrong configuration fails init.
    pub async fn from_env(handler: H, aws: &aws_config::SdkConfig) -> crate::Result<Self> {
        init_tracing();
        Self::from_config(handler, aws, ProcessorConfig::from_env()?).await
    }

    /// [`BatchProcessor::from_env`] with the configuration given (logging
    /// is left as it is).
    pub async fn from_config(
        handler: H,
        aws: &aws_config::SdkConfig,
        config: ProcessorConfig,
    ) -> crate::Result<Self> {
        let store = StateStore::new(aws_sdk_dynamodb::Client::new(aws), config.store);
        match store.stream_item().state().await {
            Ok(_) => {}
            Err(e) if e.is_transient() => tracing::warn!(
                error = %e,
                "the state table cannot be reached at init: batches run without \
                 de-duplication until it can"
            ),
            Err(e) => return Err(e.into()),
        }
        let parking = match config.dead_letter_stream {
            Some(stream) => Parking::DeadLetterStream {
                client: aws_sdk_kinesis::Client::new(aws),
                stream,
            },
            None => Parking::StateTable {
                ttl: PARKED_IN_TABLE_FOR,
            },
        };
        Ok(Self::new(handler).with_store(store).with_options(
            ProcessingOptions {
                max_attempts: config.max_attempts,
                parking,
                ..ProcessingOptions::default()
            }
            .concurrency(config.concurrency),
        ))
    }
}
