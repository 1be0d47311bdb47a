//! The baseline of the init benchmark (`benches/init.rs`): the smallest
//! lambda_runtime function, which echoes its event. It does nothing at init
//! but start the runtime, so its process start to first
//! `GET /runtime/invocation/next` is the floor every function pays.
//!
//! Built with the release profile like the functions:
//! `cargo build --release --example hello-lambda`.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| async move {
        Ok::<Value, Error>(event.payload)
    }))
    .await
}
