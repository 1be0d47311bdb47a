//! The processors served on the Lambda runtime API, each event read once
//! from the invocation's bytes. `lambda_runtime` deserializes an event into
//! the handler's payload type before the handler runs, so a processor given
//! `LambdaEvent<Box<RawValue>>` pays that pass (a validation of the whole
//! event, and a copy) before its own. Here a layer of the runtime takes the
//! invocation body as the runtime received it and runs the processor on it;
//! the runtime's inner services are given only the answer (the response,
//! or the error) to read back and post, so posting, error reporting and
//! tracing stay the runtime's own.

use crate::lambda::processor::BatchProcessor;
use crate::lambda::source::EventSource;
use crate::processing::handler::RecordHandler;
use crate::processing::panic::{panic_message, CatchUnwind};
use bytes::Bytes;
use lambda_runtime::layers::TracingLayer;
use lambda_runtime::tower::{Layer, Service, ServiceExt};
use lambda_runtime::{service_fn, Diagnostic, LambdaEvent, LambdaInvocation, Runtime};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

type BoxError = lambda_runtime::Error;

impl<H: RecordHandler, S: EventSource> BatchProcessor<H, S> {
    /// Serves the Lambda runtime API with this processor, as
    /// `lambda_runtime::run(processor)` does, but reads each event once,
    /// from the invocation body as the runtime received it (see
    /// [`BatchProcessor::handle_bytes`]), instead of after the runtime's own
    /// pass into a `RawValue`. A handler's panic fails its invocation with a
    /// `Panic` error, as `lambda_runtime` reports one, and the process goes
    /// on to the next event.
    pub async fn run(self) -> crate::Result<()> {
        self.runtime().run().await.map_err(crate::Error::Runtime)
    }

    /// The runtime [`BatchProcessor::run`] serves, for tower layers of your
    /// own around it (OpenTelemetry, your metrics): add them with
    /// [`Runtime::layer`], then call [`Runtime::run`]. A layer added here
    /// runs before the processor's: it sees each invocation as the runtime
    /// received it (`LambdaInvocation`: the body's bytes, the context) and
    /// its inner service runs the processor on it, reading the body once,
    /// and posts the answer. Like `lambda_runtime::Runtime::new`, it panics
    /// outside Lambda's environment (no `AWS_LAMBDA_RUNTIME_API`).
    ///
    /// ```no_run
    /// # async fn example(processor: shardkeeper::KinesisProcessor<fn(shardkeeper::processing::StreamRecord) -> std::future::Ready<Result<(), std::io::Error>>>) -> Result<(), lambda_runtime::Error> {
    /// use lambda_runtime::tower::layer::layer_fn;
    /// processor
    ///     .runtime()
    ///     .layer(layer_fn(|inner| inner)) // your layer
    ///     .run()
    ///     .await
    /// # }
    /// ```
    pub fn runtime(
        self,
    ) -> Runtime<
        impl Service<
                LambdaInvocation,
                Response = (),
                Error = BoxError,
                Future = impl Future<Output = Result<(), BoxError>> + Send,
            > + Send
            + 'static,
    > {
        let post =
            service_fn(|event: LambdaEvent<Answer>| async move { event.payload.into_result() });
        Runtime::new(post)
            .layer(ReadOnce { processor: self })
            .layer(TracingLayer::new())
    }
}

/// What the processor answered an invocation, as the runtime's inner
/// services read it back and post it. The response is a `Value` (a few
/// batch item failures), which any deserializer reads back, `serde_json`
/// or the runtime's path-tracking wrapper of it.
#[derive(Debug, Serialize, Deserialize)]
enum Answer {
    /// The response (batch item failures).
    Response(serde_json::Value),
    /// The invocation failed.
    Failed(Diagnostic),
}

impl Answer {
    fn into_result(self) -> Result<serde_json::Value, Diagnostic> {
        match self {
            Answer::Response(response) => Ok(response),
            Answer::Failed(diagnostic) => Err(diagnostic),
        }
    }

    /// The answer of one invocation: the processor run on its body.
    async fn of<H: RecordHandler, S: EventSource>(
        processor: &BatchProcessor<H, S>,
        body: Bytes,
        context: &lambda_runtime::Context,
    ) -> Answer {
        let handled = CatchUnwind(Box::pin(processor.handle_bytes(body, context))).await;
        match handled {
            Ok(Ok(response)) => match serde_json::to_value(&response) {
                Ok(value) => Answer::Response(value),
                Err(e) => Answer::Failed(Diagnostic::from(e.to_string())),
            },
            Ok(Err(error)) => Answer::Failed(Diagnostic::from(error)),
            Err(panic) => Answer::Failed(Diagnostic {
                error_type: "Panic".to_owned(),
                error_message: panic_message(&*panic),
            }),
        }
    }
}

/// The layer that reads each invocation's body with the processor.
struct ReadOnce<P> {
    processor: P,
}

impl<P: Clone, I> Layer<I> for ReadOnce<P> {
    type Service = ReadOnceService<P, I>;

    fn layer(&self, inner: I) -> Self::Service {
        ReadOnceService {
            processor: self.processor.clone(),
            inner: Arc::new(tokio::sync::Mutex::new(inner)),
        }
    }
}

/// Runs the processor on an invocation's body, then gives the runtime's
/// inner services the answer in its place.
struct ReadOnceService<P, I> {
    processor: P,
    /// The runtime's services that read the answer back and post it (one
    /// invocation at a time).
    inner: Arc<tokio::sync::Mutex<I>>,
}

impl<H, S, I> Service<LambdaInvocation> for ReadOnceService<BatchProcessor<H, S>, I>
where
    H: RecordHandler,
    S: EventSource,
    I: Service<LambdaInvocation, Response = (), Error = BoxError> + Send + 'static,
    I::Future: Send,
{
    type Response = ();
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, invocation: LambdaInvocation) -> Self::Future {
        let processor = self.processor.clone();
        let inner = self.inner.clone();
        Box::pin(async move {
            let LambdaInvocation {
                parts,
                body,
                context,
            } = invocation;
            let answer = Answer::of(&processor, body, &context).await;
            let body = Bytes::from(serde_json::to_vec(&answer)?);
            let mut inner = inner.lock().await;
            let invocation = LambdaInvocation {
                parts,
                body,
                context,
            };
            inner.ready().await?.call(invocation).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lambda::{DynamoDbProcessor, KinesisProcessor};
    use crate::processing::StreamRecord;
    use std::sync::Mutex;

    /// What the runtime's inner services were given.
    #[derive(Clone, Default)]
    struct Posted(Arc<Mutex<Vec<Bytes>>>);

    impl Service<LambdaInvocation> for Posted {
        type Response = ();
        type Error = BoxError;
        type Future = std::future::Ready<Result<(), BoxError>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, invocation: LambdaInvocation) -> Self::Future {
            self.0.lock().unwrap().push(invocation.body);
            std::future::ready(Ok(()))
        }
    }

    fn invocation(body: &str) -> LambdaInvocation {
        let mut context = lambda_runtime::Context::default();
        context.deadline = (std::time::SystemTime::now() + std::time::Duration::from_secs(60))
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        LambdaInvocation {
            parts: http::Response::new(()).into_parts().0,
            body: Bytes::from(body.to_owned()),
            context,
        }
    }

    /// The answer the inner services get, read back as the runtime reads
    /// an event (`lambda_runtime`'s `deserializer::deserialize`).
    fn answer_of(posted: &Posted) -> Result<serde_json::Value, Diagnostic> {
        let body = posted.0.lock().unwrap().pop().expect("an answer");
        let json = &mut serde_json::Deserializer::from_slice(&body);
        let answer: Answer = serde_path_to_error::deserialize(json).unwrap();
        answer.into_result()
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn the_response_of_an_event_read_from_its_bytes_is_posted() {
        let processor = KinesisProcessor::new(|record: StreamRecord| async move {
            if &*record.data == b"bad" {
                Err("bad record")
            } else {
                Ok(())
            }
        });
        let posted = Posted::default();
        let mut service = ReadOnce { processor }.layer(posted.clone());
        let event = serde_json::json!({ "Records": [
            { "eventID": "shardId-000000000000:1", "kinesis": { "partitionKey": "k", "sequenceNumber": "1", "data": "b2s=" } },
            { "eventID": "shardId-000000000000:2", "kinesis": { "partitionKey": "k", "sequenceNumber": "2", "data": "YmFk" } },
        ]});
        block_on(service.call(invocation(&event.to_string()))).unwrap();
        let response = answer_of(&posted).unwrap();
        assert_eq!(
            response,
            serde_json::json!({ "batchItemFailures": [{ "itemIdentifier": "2" }] })
        );
    }

    #[test]
    fn an_event_of_another_kind_fails_its_invocation() {
        let processor = DynamoDbProcessor::new(|_: StreamRecord| async { Ok::<(), BoxError>(()) });
        let posted = Posted::default();
        let mut service = ReadOnce { processor }.layer(posted.clone());
        block_on(service.call(invocation("{\"not\": \"an event\"}"))).unwrap();
        let error = answer_of(&posted).unwrap_err();
        // Lambda records the error's type as the invocation's `errorType`.
        assert_eq!(error.error_type, "shardkeeper::Event");
        assert!(
            error.error_message.contains("not a DynamoDB Streams event"),
            "{error:?}"
        );
    }

    #[test]
    fn a_handler_that_panics_fails_its_record_and_the_next_invocation_is_served() {
        let processor = KinesisProcessor::new(|record: StreamRecord| async move {
            assert_ne!(&*record.data, b"bad", "the handler panics");
            Ok::<(), BoxError>(())
        });
        let posted = Posted::default();
        let mut service = ReadOnce { processor }.layer(posted.clone());
        let event = |data: &str| {
            serde_json::json!({ "Records": [
                { "eventID": "shardId-000000000000:1", "kinesis": { "partitionKey": "k", "sequenceNumber": "1", "data": data } },
            ]})
            .to_string()
        };
        // The panic is caught at the handler's call: its record failed. It
        // is the batch's first, so the answer is a function error naming it
        // (a panic outside a handler call fails the invocation, as `Panic`).
        block_on(service.call(invocation(&event("YmFk")))).unwrap();
        let error = answer_of(&posted).unwrap_err();
        assert_eq!(error.error_type, "shardkeeper::BatchFailed");
        assert!(
            error.error_message.contains("handler panicked"),
            "{error:?}"
        );
        block_on(service.call(invocation(&event("b2s=")))).unwrap();
        assert_eq!(
            answer_of(&posted).unwrap(),
            serde_json::json!({ "batchItemFailures": [] })
        );
    }
}
