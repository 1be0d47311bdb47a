//! The scheduled functions (lease-rebalancer, heartbeat-reaper): their ticks,
//! the loop that runs ticks until the Lambda deadline, and their handlers.
//! The binaries in `functions/` only build clients and call these.

mod reaper;
mod rebalancer;
mod ticker;

pub use reaper::{handle_reap, ReapTick, Reaper};
pub use rebalancer::{handle_rebalance, RebalanceTick, Rebalancer};
pub use ticker::{run_ticks, InvocationSummary, TickLoop};

/// Sets up logging: JSON lines in Lambda (where `AWS_LAMBDA_FUNCTION_NAME`
/// is set), human-readable text elsewhere; the level from `RUST_LOG`
/// (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let result = if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some() {
        builder
            .json()
            .with_current_span(false)
            .without_time()
            .with_target(false)
            .try_init()
    } else {
        builder.try_init()
    };
    if let Err(e) = result {
        eprintln!("logging was set up already: {e}");
    }
}
