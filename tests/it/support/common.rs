//! Shared set-up: clients for the test servers, one state table per test run, unique groups.

use shardkeeper::state::{
    Buckets, Clock as _, ConsumerId, Lease, ManualClock, RetryPolicy, ShardId, ShardScope,
    ShardSpec, StateStore, StoreConfig, TableOptions,
};
use shardkeeper_local::{test_clients, unique_name, AwsClients};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

static TABLE: OnceCell<String> = OnceCell::const_new();

/// One test's view: SDK clients, the run's state table and a clock it moves by hand.
pub struct Ctx {
    pub aws: AwsClients,
    pub table: String,
    pub clock: ManualClock,
}

/// Clients for the configured servers (in-process unless the environment
/// names others) and the run's state table, created once.
pub async fn ctx() -> Ctx {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let aws = test_clients().await.expect("test servers");
    let table = TABLE
        .get_or_init(|| async {
            let table = unique_name("sk-it");
            let config = StoreConfig::new("setup", "setup")
                .unwrap()
                .table(&table)
                .unwrap();
            let clients = test_clients().await.expect("test servers");
            StateStore::new(clients.dynamodb.clone(), config)
                .table()
                .ensure(&TableOptions::default().poll_interval(Duration::from_millis(50)))
                .await
                .expect("state table");
            table
        })
        .await
        .clone();
    Ctx {
        aws,
        table,
        // Starts at the real time: a LATEST start's pin is a time on this
        // clock, which the servers compare with the records' arrival times.
        clock: ManualClock::new(shardkeeper::state::SystemClock.now_millis()),
    }
}

impl Ctx {
    /// Now, by the test's clock.
    pub fn clock_now(&self) -> i64 {
        use shardkeeper::state::Clock;
        self.clock.now_millis()
    }

    /// Starts `store`'s group: its stream item, as the table's start writes
    /// it, at the test clock's now.
    pub async fn start_group_item(&self, store: &StateStore) {
        store
            .stream_item()
            .init(self.clock_now(), None)
            .await
            .unwrap();
    }

    /// A store for a fresh, unique group on `stream`, on the manual clock.
    pub fn store(&self, stream: &str) -> StateStore {
        self.store_for(&unique_name("g"), stream)
    }

    /// A store for `group` on `stream`, on the manual clock, laying new
    /// groups out over [`test_buckets`].
    pub fn store_for(&self, group: &str, stream: &str) -> StateStore {
        let config = StoreConfig::new(group, stream)
            .unwrap()
            .table(&self.table)
            .unwrap()
            .retry(RetryPolicy::default())
            .buckets(test_buckets());
        StateStore::with_clock(
            self.aws.dynamodb.clone(),
            config,
            Arc::new(self.clock.clone()),
        )
    }
}

/// The bucket count the tests lay their groups out with: 4, so every test
/// runs on the spread layout, or `SHARDKEEPER_TEST_BUCKETS` (1 runs the
/// suite on the layout of groups written before buckets existed).
pub fn test_buckets() -> Buckets {
    let count = std::env::var("SHARDKEEPER_TEST_BUCKETS")
        .ok()
        .map_or(4, |v| {
            v.parse().expect("SHARDKEEPER_TEST_BUCKETS: a number")
        });
    Buckets::new(count).expect("SHARDKEEPER_TEST_BUCKETS: a power of two up to 1024")
}

/// Creates `count` root shards `shardId-000000000000`... in the group scope.
pub async fn seed_shards(store: &StateStore, count: usize) -> Vec<ShardId> {
    let mut ids = Vec::with_capacity(count);
    for i in 0..count {
        let spec = ShardSpec::new(&format!("shardId-{i:012}")).unwrap();
        store
            .shards()
            .ensure(&ShardScope::Group, &spec)
            .await
            .unwrap();
        ids.push(spec.shard_id);
    }
    ids
}

/// A Kinesis stream with `shards` shards, ACTIVE.
pub async fn create_stream(aws: &AwsClients, shards: i32) -> String {
    let name = unique_name("s");
    aws.kinesis
        .create_stream()
        .stream_name(&name)
        .shard_count(shards)
        .send()
        .await
        .expect("create stream");
    wait_stream_active(aws, &name).await;
    name
}

/// Waits until the stream is ACTIVE (bounded).
pub async fn wait_stream_active(aws: &AwsClients, name: &str) {
    for _ in 0..600 {
        let out = aws
            .kinesis
            .describe_stream_summary()
            .stream_name(name)
            .send()
            .await;
        if let Ok(out) = out {
            if out
                .stream_description_summary()
                .is_some_and(|d| d.stream_status().as_str() == "ACTIVE")
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("stream {name} never became ACTIVE");
}

/// Every shard of the stream, paged by stream name + exclusive start shard id.
pub async fn list_shards(aws: &AwsClients, stream: &str) -> Vec<aws_sdk_kinesis::types::Shard> {
    let mut shards = Vec::new();
    let mut start: Option<String> = None;
    loop {
        let out = aws
            .kinesis
            .list_shards()
            .stream_name(stream)
            .set_exclusive_start_shard_id(start.clone())
            .send()
            .await
            .expect("list shards");
        let page = out.shards().to_vec();
        if page.is_empty() {
            return shards;
        }
        start = page.last().map(|s| s.shard_id().to_owned());
        shards.extend(page);
        if out.next_token().is_none() {
            return shards;
        }
    }
}

/// A plain table keyed by a string `id` (not the state table), optionally with
/// a NEW_AND_OLD_IMAGES stream.
pub async fn create_id_table(
    aws: &AwsClients,
    name: &str,
    with_stream: bool,
) -> aws_sdk_dynamodb::operation::create_table::CreateTableOutput {
    shardkeeper_local::create_keyed_table(&aws.dynamodb, name, "id", with_stream)
        .await
        .expect("create table")
}

/// A new table keyed by `id` with a NEW_AND_OLD_IMAGES stream: its name and
/// its stream's ARN.
pub async fn create_stream_table(aws: &AwsClients) -> (String, String) {
    let table = unique_name("orders");
    let out = create_id_table(aws, &table, true).await;
    let arn = out
        .table_description()
        .unwrap()
        .latest_stream_arn()
        .unwrap()
        .to_owned();
    (table, arn)
}

/// Registers `name` as a consumer of the store's group (one heartbeat).
pub async fn register(store: &StateStore, name: &str) {
    let info = shardkeeper::state::ConsumerInfo::for_this_process(
        ConsumerId::new(name).unwrap(),
        store.now(),
    );
    store.consumers().heartbeat(&info).await.unwrap();
}

/// Acquires a lease the test expects to be free.
pub async fn lease(store: &StateStore, shard: &ShardId, owner: &str) -> Lease {
    store
        .leases()
        .acquire(
            shard,
            &ConsumerId::new(owner).unwrap(),
            Duration::from_secs(30),
        )
        .await
        .unwrap()
        .expect("the shard is free")
}

/// Registers an enhanced fan-out consumer `name` on the stream and waits
/// (bounded) until it is ACTIVE; its ARN.
pub async fn active_efo_consumer(aws: &AwsClients, stream_arn: &str, name: &str) -> String {
    let consumer_arn = aws
        .kinesis
        .register_stream_consumer()
        .stream_arn(stream_arn)
        .consumer_name(name)
        .send()
        .await
        .expect("register consumer")
        .consumer()
        .expect("consumer")
        .consumer_arn()
        .to_owned();
    for _ in 0..100 {
        let out = aws
            .kinesis
            .describe_stream_consumer()
            .consumer_arn(&consumer_arn)
            .send()
            .await
            .expect("describe consumer");
        if out
            .consumer_description()
            .is_some_and(|d| d.consumer_status().as_str() == "ACTIVE")
        {
            return consumer_arn;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("consumer {name} never became ACTIVE");
}

/// The stream's ARN.
pub async fn stream_arn(aws: &AwsClients, stream: &str) -> String {
    aws.kinesis
        .describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
        .expect("describe stream")
        .stream_description_summary()
        .expect("stream summary")
        .stream_arn()
        .to_owned()
}

/// A Lambda context whose deadline is `deadline_in` from now.
pub fn lambda_context(deadline_in: Duration) -> lambda_runtime::Context {
    let mut context = lambda_runtime::Context::default();
    context.deadline = (std::time::SystemTime::now() + deadline_in)
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    context
}

/// A rebalancer of the store's group with the default settings and a 10 s lease term.
pub fn rebalancer(aws: &AwsClients, store: &StateStore) -> shardkeeper::functions::Rebalancer {
    shardkeeper::functions::Rebalancer::new(
        store.clone(),
        aws.kinesis.clone(),
        shardkeeper::group::RebalanceConfig::default(),
    )
}

/// Splits the stream's first shard in the middle of its hash range, waits
/// until the stream is ACTIVE again, and returns the parent.
pub async fn split_first(aws: &AwsClients, stream: &str) -> aws_sdk_kinesis::types::Shard {
    let parent = list_shards(aws, stream).await[0].clone();
    let range = parent.hash_key_range().unwrap();
    let mid = (range.starting_hash_key().parse::<u128>().unwrap()
        + range.ending_hash_key().parse::<u128>().unwrap())
        / 2;
    aws.kinesis
        .split_shard()
        .stream_name(stream)
        .shard_to_split(parent.shard_id())
        .new_starting_hash_key(mid.to_string())
        .send()
        .await
        .unwrap();
    wait_stream_active(aws, stream).await;
    parent
}

/// Registers enhanced fan-out consumers `names` on the stream, waits until
/// each is ACTIVE (a server may keep a new consumer CREATING for a while,
/// as Kinesis does), and records each in the group's pool; their names and
/// ARNs.
pub async fn register_pool(
    aws: &AwsClients,
    store: &StateStore,
    stream_arn: &str,
    names: impl IntoIterator<Item = String>,
) -> Vec<(shardkeeper::state::EfoName, String)> {
    let mut pool = Vec::new();
    for name in names {
        let arn = active_efo_consumer(aws, stream_arn, &name).await;
        let name = shardkeeper::state::EfoName::new(name).unwrap();
        store.efo_consumers().register(&name, &arn).await.unwrap();
        pool.push((name, arn));
    }
    pool
}

/// The names in the group's EFO pool.
pub async fn pool_names(store: &StateStore) -> Vec<shardkeeper::state::EfoName> {
    store
        .efo_consumers()
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect()
}

/// One reaper pass by an observer that sees nothing age (only what needs
/// no timeout: retirements, unregistered holders, state past retention).
pub async fn reap_once(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
) -> shardkeeper::group::ExecutionReport {
    let snapshot = store.load_group().await.unwrap();
    let plan = shardkeeper::group::plan_reap(
        &snapshot,
        &shardkeeper::group::Ages::default(),
        store.now(),
        &shardkeeper::group::ReapConfig::default(),
    );
    shardkeeper::group::execute(store, Some(kinesis), &plan, Duration::ZERO)
        .await
        .unwrap()
}

/// The item at (`pk`, `sk`) of the test's table, raw, read around the
/// store (`None` if there is none).
pub async fn raw_item(ctx: &Ctx, pk: &str, sk: &str) -> Option<shardkeeper::state::RawItem> {
    use aws_sdk_dynamodb::types::AttributeValue::S;
    ctx.aws
        .dynamodb
        .get_item()
        .table_name(&ctx.table)
        .key("pk", S(pk.into()))
        .key("sk", S(sk.into()))
        .send()
        .await
        .unwrap()
        .item
}

/// Starts the store's group on its stream as every function does at init
/// (the stream item, with the stream's creation time and ARN).
pub async fn start_group(ctx: &Ctx, store: &StateStore) {
    store
        .start_on_stream(
            &ctx.aws.kinesis,
            TableOptions::default().poll_interval(Duration::from_millis(50)),
        )
        .await
        .unwrap();
}

/// The store's group as the CLI names it (`--table`, `--group`, `--stream`).
pub fn cli_target(store: &StateStore) -> shardkeeper_cli::args::Target {
    let config = store.config();
    shardkeeper_cli::args::Target {
        stack: None,
        table: Some(config.table.clone()),
        group: Some(config.group.to_string()),
        stream: Some(config.stream.to_string()),
        conn: Default::default(),
    }
}

/// A change as a script makes it: no question, JSON out.
pub fn scripted() -> shardkeeper_cli::args::ChangeOptions {
    shardkeeper_cli::args::ChangeOptions {
        dry_run: false,
        yes: true,
        json: true,
    }
}

/// A parent shard and its one child: `shardId-000000000000` and
/// `shardId-000000000001`.
pub fn parent_and_child() -> (ShardSpec, ShardSpec) {
    let parent = ShardSpec::new("shardId-000000000000").unwrap();
    let child = ShardSpec::new("shardId-000000000001")
        .unwrap()
        .with_parents(&["shardId-000000000000"])
        .unwrap();
    (parent, child)
}
