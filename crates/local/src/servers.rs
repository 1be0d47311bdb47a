//! The DynamoDB and Kinesis servers, started in this process on loopback ports.

use crate::LocalError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How to start the in-process servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalOptions {
    /// DynamoDB port on 127.0.0.1; 0 picks a free one.
    pub dynamodb_port: u16,
    /// Kinesis port on 127.0.0.1; 0 picks a free one.
    pub kinesis_port: u16,
    /// Keep DynamoDB state in this SQLite file (survives restarts); `None` keeps it in memory.
    pub dynamodb_file: Option<PathBuf>,
    /// Time a new Kinesis stream stays CREATING.
    pub stream_create_delay: Duration,
    /// Time a Kinesis stream stays UPDATING after a split, merge or consumer change.
    pub stream_update_delay: Duration,
    /// Time a Kinesis stream stays DELETING.
    pub stream_delete_delay: Duration,
    /// How long a Kinesis shard iterator stays valid.
    pub iterator_ttl: Duration,
    /// Most open shards across all Kinesis streams.
    pub shard_limit: u32,
    /// How long the Kinesis server keeps a SubscribeToShard subscription open
    /// (AWS: 5 minutes).
    pub subscription_lifetime: Duration,
}

impl Default for LocalOptions {
    /// Ephemeral ports, in-memory DynamoDB, no stream delays (what tests want),
    /// the AWS iterator lifetime of 5 minutes, and room for 10,000 shards.
    fn default() -> Self {
        LocalOptions {
            dynamodb_port: 0,
            kinesis_port: 0,
            dynamodb_file: None,
            stream_create_delay: Duration::ZERO,
            stream_update_delay: Duration::ZERO,
            stream_delete_delay: Duration::ZERO,
            iterator_ttl: Duration::from_secs(300),
            shard_limit: 10_000,
            subscription_lifetime: Duration::from_secs(300),
        }
    }
}

/// Running DynamoDB (with Streams) and Kinesis (with enhanced fan-out) servers.
///
/// They run on a runtime of their own, on a thread of their own, so they
/// outlive any test's runtime and can be shared by every test of a binary.
/// Dropping this stops them.
#[derive(Debug)]
pub struct LocalServers {
    dynamodb: SocketAddr,
    kinesis: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LocalServers {
    /// Starts both servers; returns once they accept connections.
    pub fn start(options: LocalOptions) -> Result<Self, LocalError> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("shardkeeper-local".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("shardkeeper-local-io")
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(LocalError::Start(e.to_string())));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match serve(&options).await {
                        Ok((addrs, mut servers)) => {
                            let _ = ready_tx.send(Ok(addrs));
                            let _ = stop_rx.await;
                            servers.abort_all();
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
            })
            .map_err(|e| LocalError::Start(e.to_string()))?;
        let (dynamodb, kinesis) = ready_rx
            .recv()
            .map_err(|_| LocalError::Start("server thread ended before it was ready".into()))??;
        tracing::debug!(%dynamodb, %kinesis, "local DynamoDB and Kinesis servers started");
        Ok(LocalServers {
            dynamodb,
            kinesis,
            shutdown: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The DynamoDB (and DynamoDB Streams) endpoint URL.
    pub fn dynamodb_endpoint(&self) -> String {
        format!("http://{}", self.dynamodb)
    }

    /// The Kinesis endpoint URL.
    pub fn kinesis_endpoint(&self) -> String {
        format!("http://{}", self.kinesis)
    }

    /// Stops both servers and waits for them to end.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for LocalServers {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

async fn bind(port: u16) -> Result<tokio::net::TcpListener, LocalError> {
    tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| LocalError::Start(format!("cannot listen on 127.0.0.1:{port}: {e}")))
}

async fn serve(
    options: &LocalOptions,
) -> Result<((SocketAddr, SocketAddr), tokio::task::JoinSet<()>), LocalError> {
    let db = match &options.dynamodb_file {
        Some(path) => {
            let path = path.to_str().ok_or_else(|| {
                LocalError::Start(format!("DynamoDB file path {path:?} is not UTF-8"))
            })?;
            dynoxide::Database::new(path)
        }
        None => dynoxide::Database::memory(),
    }
    .map_err(|e| LocalError::Start(format!("DynamoDB storage: {e}")))?;
    let ddb_listener = bind(options.dynamodb_port).await?;
    let kinesis_listener = bind(options.kinesis_port).await?;
    let addrs = (
        ddb_listener
            .local_addr()
            .map_err(|e| LocalError::Start(e.to_string()))?,
        kinesis_listener
            .local_addr()
            .map_err(|e| LocalError::Start(e.to_string()))?,
    );
    let store_options = ferrokinesis::store::StoreOptions {
        create_stream_ms: options.stream_create_delay.as_millis() as u64,
        delete_stream_ms: options.stream_delete_delay.as_millis() as u64,
        update_stream_ms: options.stream_update_delay.as_millis() as u64,
        shard_limit: options.shard_limit,
        iterator_ttl_seconds: options.iterator_ttl.as_secs().max(1),
        subscribe_to_shard_session_ms: options.subscription_lifetime.as_millis() as u64,
        ..ferrokinesis::store::StoreOptions::default()
    };
    let (app, _store) = ferrokinesis::create_app(store_options);
    let mut servers = tokio::task::JoinSet::new();
    servers.spawn(async move {
        let never = std::future::pending::<()>();
        if let Err(e) = dynoxide::server::serve_with_shutdown(ddb_listener, db, never).await {
            tracing::error!(error = %e, "local DynamoDB server stopped");
        }
    });
    servers.spawn(async move {
        if let Err(e) = axum::serve(kinesis_listener, app).await {
            tracing::error!(error = %e, "local Kinesis server stopped");
        }
    });
    Ok((addrs, servers))
}
