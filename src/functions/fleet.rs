//! A fleet of shard workers kept by the rebalancer: at each tick it sizes
//! the fleet ([`plan_fleet`]) and starts the workers missing, through a
//! [`StartWorkers`] (asynchronous Lambda invocations of the shard-worker
//! function in production, [`LambdaStarter`]).

use crate::group::{plan_fleet, Ages, FleetConfig, FleetPlan, Starts};
use crate::state::{call_aws, GroupSnapshot, RetryPolicy, Service, StateStore};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// What starting workers returns: how many were started.
pub type Started<'a> = Pin<Box<dyn Future<Output = crate::Result<usize>> + Send + 'a>>;

/// Starts shard workers.
pub trait StartWorkers: Send + Sync + std::fmt::Debug {
    /// Starts `count` workers, each one consumer instance whose run ends (an
    /// invocation); returns how many were started.
    fn start(&self, count: usize) -> Started<'_>;
}

/// The fleet the rebalancer keeps: its sizing, its starter, and its memory
/// of workers started and not registered yet (kept across ticks and
/// invocations of a warm rebalancer).
#[derive(Debug, Clone)]
pub struct Fleet {
    /// How the fleet is sized.
    pub config: FleetConfig,
    /// How workers are started.
    pub starter: Arc<dyn StartWorkers>,
    /// Workers started and not registered yet.
    pub starts: Arc<Mutex<Starts>>,
}

/// What the fleet did at one tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FleetTick {
    /// The plan.
    pub plan: FleetPlan,
    /// Workers started.
    pub started: usize,
}

impl Fleet {
    /// A fleet sized by `config`, started by `starter`.
    pub fn new(config: FleetConfig, starter: Arc<dyn StartWorkers>) -> Self {
        Fleet {
            config,
            starter,
            starts: Arc::new(Mutex::new(Starts::default())),
        }
    }

    /// Sizes the fleet for `open_shards` and starts what is missing. A
    /// start that fails is logged and tried again at the next tick.
    pub async fn tick(
        &self,
        store: &StateStore,
        snapshot: &GroupSnapshot,
        ages: &Ages,
        open_shards: usize,
    ) -> FleetTick {
        let now = store.monotonic_now();
        let starting = self
            .starts
            .lock()
            .map(|mut s| s.observe(snapshot, now, self.config.start_timeout))
            .unwrap_or(0);
        let plan = plan_fleet(snapshot, ages, open_shards, starting, &self.config);
        if plan.start == 0 {
            return FleetTick { plan, started: 0 };
        }
        let started = match self.starter.start(plan.start).await {
            Ok(started) => started,
            Err(error) => {
                tracing::warn!(%error, wanted = plan.start, "starting shard workers failed");
                0
            }
        };
        if let Ok(mut starts) = self.starts.lock() {
            starts.started(started, now);
        }
        tracing::info!(
            wanted = plan.wanted,
            staying = plan.staying,
            started,
            "shard workers started"
        );
        FleetTick { plan, started }
    }
}

/// Starts shard workers as tasks of this process: each start spawns the
/// future `invoke` makes (a host that runs its workers itself, or a test
/// that plays the Lambda service, invoking the worker function's handler
/// with a deadline).
pub struct TaskStarter<F> {
    invoke: F,
}

impl<F> TaskStarter<F> {
    /// A starter that spawns `invoke()` for each worker.
    pub fn new(invoke: F) -> Self {
        TaskStarter { invoke }
    }
}

impl<F> std::fmt::Debug for TaskStarter<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TaskStarter")
    }
}

impl<F, Fut> StartWorkers for TaskStarter<F>
where
    F: Fn() -> Fut + Send + Sync,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn start(&self, count: usize) -> Started<'_> {
        for _ in 0..count {
            tokio::spawn((self.invoke)());
        }
        Box::pin(async move { Ok(count) })
    }
}

/// Starts shard workers as asynchronous invocations of a Lambda function
/// (`InvocationType=Event`, an empty JSON payload).
#[derive(Debug, Clone)]
pub struct LambdaStarter {
    /// Lambda.
    pub lambda: aws_sdk_lambda::Client,
    /// The shard-worker function's name or ARN.
    pub function: String,
    /// Retries of throttled or failed invocations (the one budget: the
    /// client does not retry).
    pub retry: RetryPolicy,
}

impl LambdaStarter {
    /// A starter of `function`'s invocations, with a Lambda client made
    /// from `aws` whose attempts time out as the store's do
    /// ([`SdkTimeouts`](crate::state::SdkTimeouts): an asynchronous Invoke
    /// answers at once, so a start never holds a rebalancer tick) and that
    /// does not retry: `retry` is the one retry budget of each Invoke.
    pub fn new(aws: &aws_config::SdkConfig, function: String, retry: RetryPolicy) -> Self {
        let config = aws_sdk_lambda::config::Builder::from(aws)
            .retry_config(aws_smithy_types::retry::RetryConfig::disabled())
            .timeout_config(crate::state::SdkTimeouts::default().sdk_config())
            .build();
        LambdaStarter {
            lambda: aws_sdk_lambda::Client::from_conf(config),
            function,
            retry,
        }
    }
}

impl StartWorkers for LambdaStarter {
    fn start(&self, count: usize) -> Started<'_> {
        Box::pin(async move {
            let req = self
                .lambda
                .invoke()
                .function_name(&self.function)
                .invocation_type(aws_sdk_lambda::types::InvocationType::Event)
                .payload(aws_sdk_lambda::primitives::Blob::new("{}"));
            let mut started = 0;
            for _ in 0..count {
                call_aws(&self.retry, Service::Lambda, "Invoke", || {
                    req.clone().send()
                })
                .await?;
                started += 1;
            }
            Ok(started)
        })
    }
}
