//! The shard-worker function: each scheduled invocation is one consumer
//! instance that reads the shards it is given until its deadline, then
//! releases them (checkpointed) so the next invocation takes over at once.

use crate::consumer::ConsumerSession;
use crate::consumer::{ShardWorker, WorkerConfig, WorkerReport};
use crate::processing::RecordHandler;
use crate::state::{ConsumerId, ConsumerInfo, StateStore};
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::LambdaEvent;
use std::time::{Duration, Instant, SystemTime};

/// What the shard-worker function needs for every invocation.
pub struct WorkerFunction<F> {
    /// The group's state.
    pub store: StateStore,
    /// Kinesis.
    pub kinesis: aws_sdk_kinesis::Client,
    /// Lease term of the session.
    pub lease_term: Duration,
    /// Reading settings.
    pub config: WorkerConfig,
    /// Time kept free before the deadline.
    pub margin: Duration,
    /// Makes the record handler of one invocation.
    pub handler: F,
}

/// The consumer id of one invocation: the request id (letters, digits, `-`).
pub fn invocation_consumer_id(request_id: &str) -> Result<ConsumerId, crate::state::StateError> {
    let cleaned: String = request_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    ConsumerId::new(format!("worker-{cleaned}"))
}

impl<F, H> WorkerFunction<F>
where
    F: Fn() -> H,
    H: RecordHandler,
{
    /// The Lambda handler: one consumer instance until the deadline minus the margin.
    pub async fn handle(
        &self,
        event: LambdaEvent<EventBridgeEvent>,
    ) -> Result<WorkerReport, lambda_runtime::Error> {
        let id = invocation_consumer_id(&event.context.request_id)?;
        let info = ConsumerInfo::for_this_process(id, self.store.now());
        let session = ConsumerSession::new(self.store.clone(), info, self.lease_term);
        let mut worker = ShardWorker::new(
            session,
            self.store.clone(),
            self.kinesis.clone(),
            (self.handler)(),
            self.config.clone(),
        );
        let left = event
            .context
            .deadline()
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
            .saturating_sub(self.margin);
        let report = worker
            .run_until(Some(Instant::now() + left), || false)
            .await?;
        Ok(report.clone())
    }
}
