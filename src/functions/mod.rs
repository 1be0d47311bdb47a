//! The functions the binaries in `functions/` run: the scheduled
//! lease-rebalancer and heartbeat-reaper (their ticks, the loop that runs
//! ticks until the Lambda deadline, their handlers), the shard worker's
//! invocation, the fleet of workers the rebalancer keeps, and each
//! function's whole `main` from the environment (`entry`).

mod entry;
#[cfg(feature = "fleet")]
mod fleet;
mod logs;
pub(crate) use logs::PowertoolsJson;
#[cfg(feature = "fleet")]
mod reaper;
#[cfg(feature = "fleet")]
mod rebalancer;
#[cfg(feature = "fleet")]
mod ticker;
#[cfg(feature = "worker")]
mod worker;

#[cfg(feature = "fleet")]
pub use entry::{run_reaper, run_rebalancer};
#[cfg(feature = "fleet")]
pub use fleet::{Fleet, FleetTick, LambdaStarter, StartWorkers, Started, TaskStarter};
#[cfg(feature = "fleet")]
pub use reaper::{handle_reap, ReapTick, Reaper};
#[cfg(feature = "fleet")]
pub use rebalancer::{handle_rebalance, RebalanceTick, Rebalancer};
#[cfg(feature = "fleet")]
pub use ticker::{run_ticks, InvocationSummary, TickLoop};
#[cfg(feature = "worker")]
pub use worker::{invocation_consumer_id, worker_metrics, WorkerFunction};

/// Checks the state table and the stream once and records the stream's
/// creation time (resetting the state if the stream was re-created): what
/// the scheduled functions do at init, which also warms both connections.
/// A new group is laid out over the configured buckets, or as many as the
/// stream's open shards need.
#[cfg(feature = "worker")]
pub async fn start_store(
    config: &crate::config::ScheduledConfig,
    dynamodb: aws_sdk_dynamodb::Client,
    kinesis: &aws_sdk_kinesis::Client,
) -> crate::Result<crate::state::StateStore> {
    use crate::state::{kinesis_stream_summary, Buckets, SpreadPolicy, StartOptions, StateStore};
    let summary =
        kinesis_stream_summary(kinesis, &config.store.stream, &config.store.retry).await?;
    let buckets = config
        .buckets
        .unwrap_or_else(|| Buckets::for_shards(summary.open_shards, &SpreadPolicy::default()));
    let store = StateStore::new(dynamodb, config.store.clone().buckets(buckets));
    store
        .start(&StartOptions::new(summary.created).stream_arn(Some(summary.arn)))
        .await?;
    Ok(store)
}

/// What every scheduled function (rebalancer, reaper, shard worker) builds
/// once at init.
#[cfg(feature = "worker")]
pub struct ScheduledInit {
    /// Its configuration, from the environment.
    pub config: crate::config::ScheduledConfig,
    /// The started state store.
    pub store: crate::state::StateStore,
    /// Kinesis, from the standard credential and region chains.
    pub kinesis: aws_sdk_kinesis::Client,
    /// The AWS configuration the clients were made from.
    pub aws: aws_config::SdkConfig,
}

/// The init of a scheduled function: logging, configuration from the
/// environment, AWS clients from the standard chains, then [`start_store`].
#[cfg(feature = "worker")]
pub async fn init_scheduled() -> crate::Result<ScheduledInit> {
    init_tracing();
    let config = crate::config::ScheduledConfig::from_env()?;
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kinesis = crate::state::own_kinesis_client(
        &aws_sdk_kinesis::Client::new(&aws),
        &config.store.timeouts,
    );
    let store = start_store(&config, aws_sdk_dynamodb::Client::new(&aws), &kinesis).await?;
    Ok(ScheduledInit {
        config,
        store,
        kinesis,
        aws,
    })
}

/// Sets up logging so Lambda's logging controls apply. When the function's
/// log format is JSON (`AWS_LAMBDA_LOG_FORMAT`; the templates set it), the
/// lines are in Powertools' shape (its standard keys, the spans' and the
/// event's fields beside them; `POWERTOOLS_SERVICE_NAME`, and the level from
/// `POWERTOOLS_LOG_LEVEL`, else `AWS_LAMBDA_LOG_LEVEL`, else `RUST_LOG`,
/// else `info`); otherwise `lambda_runtime`'s text lines. It does nothing
/// when the process has set a global subscriber of its own.
pub fn init_tracing() {
    if tracing::dispatcher::has_been_set() {
        return;
    }
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    if !json {
        lambda_runtime::tracing::init_default_subscriber();
        return;
    }
    // Another thread may have set one meanwhile: that one stays.
    let _ = tracing::subscriber::set_global_default(powertools_lines(std::io::stdout));
}

/// The subscriber of Powertools-shaped lines that [`init_tracing`] installs,
/// writing to `writer`.
fn powertools_lines<W>(writer: W) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
        .event_format(logs::PowertoolsJson::from_env())
        .with_env_filter(logs::PowertoolsJson::filter_from_env())
        .with_writer(writer)
        .finish()
}

/// For this workspace's benchmarks: the subscriber [`init_tracing`]
/// installs on a function whose log format is JSON, writing nowhere.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub fn powertools_lines_to_nowhere() -> tracing::Dispatch {
    tracing::Dispatch::new(powertools_lines(std::io::sink))
}
