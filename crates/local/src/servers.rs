//! The DynamoDB and Kinesis servers, started in this process on loopback ports.

use crate::server_thread::ServerThread;
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
/// Each runs on a runtime of its own, on a thread of its own, so they
/// outlive any test's runtime and can be shared by every test of a binary.
/// A file-backed DynamoDB can be stopped and started again on its port
/// ([`LocalServers::stop_dynamodb`], [`LocalServers::start_dynamodb`]), as a
/// server restart in the middle of a run. Dropping this stops them.
#[derive(Debug)]
pub struct LocalServers {
    options: LocalOptions,
    dynamodb_addr: SocketAddr,
    dynamodb: Option<ServerThread>,
    kinesis: ServerThread,
}

impl LocalServers {
    /// Starts both servers; returns once they accept connections.
    pub fn start(options: LocalOptions) -> Result<Self, LocalError> {
        let dynamodb = start_dynamodb(&options, options.dynamodb_port)?;
        let kinesis = start_kinesis(&options)?;
        tracing::debug!(dynamodb = %dynamodb.addr(), kinesis = %kinesis.addr(), "local DynamoDB and Kinesis servers started");
        Ok(LocalServers {
            dynamodb_addr: dynamodb.addr(),
            dynamodb: Some(dynamodb),
            kinesis,
            options,
        })
    }

    /// The DynamoDB (and DynamoDB Streams) endpoint URL.
    pub fn dynamodb_endpoint(&self) -> String {
        format!("http://{}", self.dynamodb_addr)
    }

    /// The Kinesis endpoint URL.
    pub fn kinesis_endpoint(&self) -> String {
        format!("http://{}", self.kinesis.addr())
    }

    /// Stops the DynamoDB server: its connections close and new ones are
    /// refused until [`LocalServers::start_dynamodb`]. Only a file-backed
    /// server ([`LocalOptions::dynamodb_file`]) can be stopped, since an
    /// in-memory one would lose its state. Blocks until the server is down.
    pub fn stop_dynamodb(&mut self) -> Result<(), LocalError> {
        if self.options.dynamodb_file.is_none() {
            return Err(LocalError::Restart(
                "an in-memory DynamoDB would lose its state; set LocalOptions::dynamodb_file"
                    .into(),
            ));
        }
        if let Some(mut server) = self.dynamodb.take() {
            server.stop();
            tracing::debug!(dynamodb = %self.dynamodb_addr, "local DynamoDB server stopped");
        }
        Ok(())
    }

    /// Starts the DynamoDB server again on its port, from its file, after
    /// [`LocalServers::stop_dynamodb`] (nothing to do if it runs).
    pub fn start_dynamodb(&mut self) -> Result<(), LocalError> {
        if self.dynamodb.is_none() {
            let server = start_dynamodb(&self.options, self.dynamodb_addr.port())
                .map_err(|e| LocalError::Restart(e.to_string()))?;
            tracing::debug!(dynamodb = %self.dynamodb_addr, "local DynamoDB server started again");
            self.dynamodb = Some(server);
        }
        Ok(())
    }

    /// Whether the DynamoDB server is running (not stopped by
    /// [`LocalServers::stop_dynamodb`]).
    pub fn dynamodb_running(&self) -> bool {
        self.dynamodb.is_some()
    }

    /// Stops both servers and waits for them to end.
    pub fn stop(self) {}
}

fn start_dynamodb(options: &LocalOptions, port: u16) -> Result<ServerThread, LocalError> {
    let file = options.dynamodb_file.clone();
    ServerThread::start("dynamodb", port, move || {
        let db = match &file {
            Some(path) => {
                let path = path.to_str().ok_or_else(|| {
                    LocalError::Start(format!("DynamoDB file path {path:?} is not UTF-8"))
                })?;
                dynoxide::Database::new(path)
            }
            None => dynoxide::Database::memory(),
        }
        .map_err(|e| LocalError::Start(format!("DynamoDB storage: {e}")))?;
        Ok(move |listener| async move {
            let never = std::future::pending::<()>();
            if let Err(e) = dynoxide::server::serve_with_shutdown(listener, db, never).await {
                tracing::error!(error = %e, "local DynamoDB server stopped");
            }
        })
    })
}

fn start_kinesis(options: &LocalOptions) -> Result<ServerThread, LocalError> {
    let store_options = ferrokinesis::store::StoreOptions {
        create_stream_ms: options.stream_create_delay.as_millis() as u64,
        delete_stream_ms: options.stream_delete_delay.as_millis() as u64,
        update_stream_ms: options.stream_update_delay.as_millis() as u64,
        shard_limit: options.shard_limit,
        iterator_ttl_seconds: options.iterator_ttl.as_secs().max(1),
        subscribe_to_shard_session_ms: options.subscription_lifetime.as_millis() as u64,
        ..ferrokinesis::store::StoreOptions::default()
    };
    ServerThread::start("kinesis", options.kinesis_port, move || {
        Ok(move |listener| async move {
            let (app, _store) = ferrokinesis::create_app(store_options);
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "local Kinesis server stopped");
            }
        })
    })
}
