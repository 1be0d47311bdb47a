//! Servers of one test's own, with fault-injecting proxies in front of
//! both: DynamoDB on a file so it can be restarted mid-run, and clients
//! that go through the proxies (the system under test) or around them (the
//! test's producer and its checks).

use crate::support::common::{ctx, Ctx};
use shardkeeper::state::{StateStore, StoreConfig, TableOptions};
use shardkeeper_local::{
    unique_name, AwsClients, AwsService, Endpoints, FaultCounts, FaultProxy, Faults, LocalOptions,
    LocalServers,
};
use std::path::PathBuf;
use std::time::Duration;

/// Dedicated servers behind fault proxies.
pub struct Faulty {
    /// Clients through the proxies, and a state table of the run.
    pub ctx: Ctx,
    /// Clients straight to the servers.
    pub direct: AwsClients,
    /// The proxy in front of DynamoDB.
    pub dynamodb: FaultProxy,
    /// The proxy in front of Kinesis.
    pub kinesis: FaultProxy,
    servers: LocalServers,
    dir: PathBuf,
}

impl Faulty {
    /// Starts the servers (DynamoDB on a file in a fresh directory), the
    /// proxies with no faults yet (their draws seeded from `seed`) and the
    /// state table.
    pub async fn start(seed: u64) -> Faulty {
        let mut ctx = ctx().await;
        let dir = std::env::temp_dir().join(unique_name("sk-faulty"));
        std::fs::create_dir_all(&dir).unwrap();
        let servers = LocalServers::start(LocalOptions {
            dynamodb_file: Some(dir.join("state.sqlite")),
            ..LocalOptions::default()
        })
        .unwrap();
        let direct = AwsClients::connect(&Endpoints::local(&servers)).await;
        let dynamodb = FaultProxy::start_seeded(
            AwsService::DynamoDb,
            &servers.dynamodb_endpoint(),
            Faults::none(),
            seed,
        )
        .await
        .unwrap();
        let kinesis = FaultProxy::start_seeded(
            AwsService::Kinesis,
            &servers.kinesis_endpoint(),
            Faults::none(),
            seed.wrapping_add(1),
        )
        .await
        .unwrap();
        ctx.aws = AwsClients::connect(&Endpoints {
            dynamodb: Some(dynamodb.url().to_owned()),
            kinesis: Some(kinesis.url().to_owned()),
            dummy_credentials: true,
        })
        .await;
        ctx.table = unique_name("sk-faulty");
        StateStore::new(
            direct.dynamodb.clone(),
            StoreConfig::new("setup", "setup")
                .unwrap()
                .table(&ctx.table)
                .unwrap(),
        )
        .table()
        .ensure(&TableOptions::default().poll_interval(Duration::from_millis(50)))
        .await
        .unwrap();
        Faulty {
            ctx,
            direct,
            dynamodb,
            kinesis,
            servers,
            dir,
        }
    }

    /// The same faults on both proxies.
    pub fn set_faults(&self, faults: &Faults) {
        self.dynamodb.set_faults(faults.clone()).unwrap();
        self.kinesis.set_faults(faults.clone()).unwrap();
    }

    /// Stops the DynamoDB server for `downtime`, then starts it again on its
    /// file. Needs a multi-threaded runtime.
    pub async fn restart_dynamodb(&mut self, downtime: Duration) {
        tokio::task::block_in_place(|| self.servers.stop_dynamodb()).unwrap();
        tokio::time::sleep(downtime).await;
        tokio::task::block_in_place(|| self.servers.start_dynamodb()).unwrap();
    }

    /// What both proxies did, added up.
    pub fn counts(&self) -> FaultCounts {
        self.dynamodb.counts() + self.kinesis.counts()
    }
}

impl Drop for Faulty {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Faults that answer every request with the service's internal error.
pub fn every_request_fails() -> Faults {
    Faults {
        server_error: 1.0,
        ..Faults::none()
    }
}
