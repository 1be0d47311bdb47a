//! The IAM audit: every AWS action each function's code sends, recorded
//! while it runs against the servers, checked against the statements its
//! template grants it (`template.yaml` for the rebalancer and the reaper,
//! `examples/consumer-app/template.yaml`, which nests it, for the shard
//! worker, the orders function and the projection), and the operator CLI's
//! actions against `docs/operator-policy.json`. The servers enforce no IAM;
//! this is the check that AWS would make, per action, resource and
//! `dynamodb:LeadingKeys`.
//!
//! Each function runs with clients of its own (its "role"), each logging
//! its requests, through the paths it takes in production: the functions'
//! init (`start_store`, the processors' stream read), the rebalancer's ticks
//! (discovery, assignment, a take from an unregistered holder, the fleet's
//! Invoke), the shard worker's invocations (polling, and enhanced fan-out
//! with its pool and checkpoints), the reaper's ticks (a dead consumer's
//! leases freed, an idle EFO consumer deregistered) and its init on a
//! re-created stream (the sweep), the processors' batches with a poison
//! record parked. The same audit of the templates of 2026-11-26 (kept in
//! `tests/fixtures/templates-2026-11-26`) fails, naming what they missed.

use crate::support::common::{
    create_stream, create_stream_table, ctx, stream_arn, test_buckets, Ctx,
};
use crate::support::consume::produce;
use crate::support::iam::{denied, needs, Api, Deployment, Need, Place, Statement};
use serde_yaml::Value;
use shardkeeper::config::ScheduledConfig;
use shardkeeper::consumer::{EfoPool, WorkerConfig};
use shardkeeper::functions::{
    start_store, Fleet, LambdaStarter, Reaper, Rebalancer, WorkerFunction,
};
use shardkeeper::group::{FleetConfig, ReapConfig, RebalanceConfig};
use shardkeeper::processing::{Parking, ProcessingOptions, StreamRecord};
use shardkeeper::state::{
    ConsumerId, ConsumerInfo, RetryPolicy, StateStore, StoreConfig, StreamAddress,
};
use shardkeeper::{DynamoDbProcessor, KinesisProcessor};
use shardkeeper_local::{test_endpoints, unique_name, AwsClients, FailingEndpoint, RequestCounter};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The functions of the templates, and the operator.
const REBALANCER: &str = "LeaseRebalancer";
const REAPER: &str = "HeartbeatReaper";
const WORKER: &str = "ShardWorker";
const ORDERS: &str = "Orders";
const PROJECTION: &str = "Projection";
/// The operator running the CLI (`docs/operator-policy.json`).
const OPERATOR: &str = "Operator";

/// One function's clients, each keeping a log of its requests.
struct Role {
    aws: AwsClients,
    lambda: RequestCounter,
}

impl Role {
    async fn new() -> Role {
        let aws = AwsClients::connect(&test_endpoints().expect("test servers")).await;
        let lambda = RequestCounter::new();
        for log in [
            &aws.dynamodb_requests,
            &aws.kinesis_requests,
            &aws.streams_requests,
            &lambda,
        ] {
            log.start_log();
        }
        Role { aws, lambda }
    }

    /// The function's store for `group` on `stream`, on the run's table.
    fn store(&self, ctx: &Ctx, group: &str, stream: &str) -> StateStore {
        StateStore::new(self.aws.dynamodb.clone(), store_config(ctx, group, stream))
    }

    /// What the role's requests so far need (the logs are emptied).
    fn needs(&self, place: &Place) -> Vec<Need> {
        let logs = [
            (Api::DynamoDb, &self.aws.dynamodb_requests),
            (Api::DynamoDbStreams, &self.aws.streams_requests),
            (Api::Kinesis, &self.aws.kinesis_requests),
            (Api::Lambda, &self.lambda),
        ];
        let mut out: Vec<Need> = logs
            .iter()
            .flat_map(|(api, log)| {
                log.take_log()
                    .into_iter()
                    .flat_map(|request| needs(*api, &request, place))
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

fn store_config(ctx: &Ctx, group: &str, stream: &str) -> StoreConfig {
    StoreConfig::new(group, stream)
        .unwrap()
        .table(&ctx.table)
        .unwrap()
        .retry(RetryPolicy::default())
        .buckets(test_buckets())
}

/// A scheduled function's init, as `init_scheduled` does it, on `role`'s clients.
async fn init(role: &Role, ctx: &Ctx, group: &str, stream: &str) -> StateStore {
    let vars: BTreeMap<&str, String> = [
        ("SHARDKEEPER_TABLE", ctx.table.clone()),
        ("SHARDKEEPER_GROUP", group.to_owned()),
        ("SHARDKEEPER_STREAM", stream.to_owned()),
    ]
    .into();
    let config = ScheduledConfig::from_lookup(|k| vars.get(k).cloned()).unwrap();
    start_store(&config, role.aws.dynamodb.clone(), &role.aws.kinesis)
        .await
        .unwrap()
}

/// What one deployment of the application (and its nested control plane)
/// looks like to the audit: names, ARNs, and the recorded needs per function.
struct Run {
    place: Place,
    group: String,
    table: String,
    stream: String,
    stream_arn: String,
    dead_letters: String,
    orders_table: String,
    orders_stream_arn: String,
    worker_function: String,
    /// Function (a template resource, or "Operator") → what it needed.
    needs: BTreeMap<&'static str, Vec<Need>>,
}

/// Runs every function of the application through its production paths,
/// each on its own clients, and records what each needed.
async fn record_a_deployment(ctx: &Ctx) -> Run {
    let group = unique_name("iam");
    let stream = create_stream(&ctx.aws, 2).await;
    let arn = stream_arn(&ctx.aws, &stream).await;
    let place = Place::of(&arn);
    let worker_function = "app-shard-worker".to_owned();
    let (rebalancer_role, reaper_role, worker_role) =
        (Role::new().await, Role::new().await, Role::new().await);
    produce(&ctx.aws.kinesis, &stream, 3, 0..2).await;

    // The group's set-up, around the roles: a consumer that will die
    // holding a lease, and a lease held by a holder never registered.
    let setup = ctx.store_for(&group, &stream);
    crate::support::common::start_group(ctx, &setup).await;

    // Init of each scheduled function.
    let rebalancer_store = Box::pin(init(&rebalancer_role, ctx, &group, &stream)).await;
    let reaper_store = Box::pin(init(&reaper_role, ctx, &group, &stream)).await;
    let worker_store = Box::pin(init(&worker_role, ctx, &group, &stream)).await;

    // The rebalancer: discovery, then a take from an unregistered holder
    // (a transaction with a condition check on the holder's absence), and
    // the fleet's start of a shard worker (an asynchronous Invoke).
    let lambda = FailingEndpoint::start(202, "Accepted").await.unwrap();
    let lambda_config = aws_sdk_lambda::config::Builder::from(&crate::support::classes::config_at(
        ctx,
        lambda.url(),
    ))
    .interceptor(rebalancer_role.lambda.clone())
    .build();
    let mut rebalancer = Rebalancer::new(
        rebalancer_store,
        rebalancer_role.aws.kinesis.clone(),
        RebalanceConfig::default()
            .lease_term(Duration::from_millis(400))
            .heartbeat_timeout(Duration::from_millis(400)),
    );
    rebalancer.fleet = Some(Fleet::new(
        FleetConfig::default(),
        Arc::new(LambdaStarter {
            lambda: aws_sdk_lambda::Client::from_conf(lambda_config),
            function: worker_function.clone(),
            retry: RetryPolicy::default(),
        }),
    ));
    Box::pin(rebalancer.tick()).await.unwrap();
    let shards = setup.load_group().await.unwrap().shards;
    let ghost = ConsumerId::new("never-registered").unwrap();
    crate::support::common::lease(&setup, &shards[0].shard_id, ghost.as_str()).await;
    let dead = ConsumerId::new("dies-holding-a-lease").unwrap();
    setup
        .consumers()
        .heartbeat(&ConsumerInfo::for_this_process(dead.clone(), setup.now()))
        .await
        .unwrap();
    crate::support::common::lease(&setup, &shards[1].shard_id, dead.as_str()).await;
    Box::pin(rebalancer.tick()).await.unwrap();

    // The reaper sees the dead consumer's heartbeat stale and frees its
    // leases (a transaction with a condition check on its item).
    let reaper = Reaper::new(
        reaper_store,
        reaper_role.aws.kinesis.clone(),
        ReapConfig::default()
            .heartbeat_timeout(Duration::from_millis(300))
            .lease_term(Duration::from_millis(300))
            .efo_idle_timeout(Duration::from_millis(300)),
    );
    Box::pin(reaper.tick()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reaped = Box::pin(reaper.tick()).await.unwrap();
    assert!(reaped.execution.leases_released > 0, "{reaped:?}");

    Box::pin(run_workers(
        ctx,
        &group,
        &stream,
        &arn,
        &rebalancer,
        (&rebalancer_role, &reaper_role, &worker_role),
        worker_store,
    ))
    .await;

    // The reaper's init on a group whose state belongs to an earlier
    // stream of the same name (another creation time): the sweep.
    let earlier = ctx.store_for(&format!("{group}-old"), &stream);
    earlier.stream_item().init(1_000, Some(&arn)).await.unwrap();
    crate::support::common::seed_shards(&earlier, 2).await;
    init(&reaper_role, ctx, &format!("{group}-old"), &stream).await;

    let (orders_role, projection_role, dead_letters, orders_table, orders_stream_arn) =
        Box::pin(run_processors(ctx, &group, &stream, &arn, &shards)).await;

    // The operator: every CLI command that reads or changes the group, on
    // the operator's clients.
    let operator_role = Role::new().await;
    Box::pin(operate(ctx, &operator_role, &group, &stream)).await;

    let mut place = place;
    place.table_stream = Some(orders_stream_arn.clone());
    let mut needs = BTreeMap::new();
    needs.insert(REBALANCER, rebalancer_role.needs(&place));
    needs.insert(REAPER, reaper_role.needs(&place));
    needs.insert(WORKER, worker_role.needs(&place));
    needs.insert(ORDERS, orders_role.needs(&place));
    needs.insert(PROJECTION, projection_role.needs(&place));
    needs.insert(OPERATOR, operator_role.needs(&place));
    Run {
        place,
        group,
        table: ctx.table.clone(),
        stream,
        stream_arn: arn,
        dead_letters,
        orders_table,
        orders_stream_arn,
        worker_function,
        needs,
    }
}

/// Two shard-worker invocations while the rebalancer ticks: one polling
/// (the group's own), one with enhanced fan-out (a group of its own, a pool
/// of two, so that the reaper retires one when both are idle). (A function
/// of its own: its futures stay off the deployment's, whose frame a test
/// thread's stack must hold.)
async fn run_workers(
    ctx: &Ctx,
    group: &str,
    stream: &str,
    arn: &str,
    rebalancer: &Rebalancer,
    (rebalancer_role, reaper_role, worker_role): (&Role, &Role, &Role),
    worker_store: StateStore,
) {
    // Two shard-worker invocations while the rebalancer ticks: one polling
    // (a group of its own), one with enhanced fan-out (a pool of two, so
    // that the reaper retires one when both are idle).
    let efo_group = format!("{group}-efo");
    let efo_setup = ctx.store_for(&efo_group, stream);
    crate::support::common::start_group(ctx, &efo_setup).await;
    let efo_rebalancer = Rebalancer::new(
        init(rebalancer_role, ctx, &efo_group, stream).await,
        rebalancer_role.aws.kinesis.clone(),
        RebalanceConfig::default(),
    );
    let efo_reaper = Reaper::new(
        init(reaper_role, ctx, &efo_group, stream).await,
        reaper_role.aws.kinesis.clone(),
        ReapConfig::default().efo_idle_timeout(Duration::from_millis(300)),
    );
    let efo_worker_store = init(worker_role, ctx, &efo_group, stream).await;
    let worker = |store: StateStore, efo: Option<EfoPool>| {
        WorkerFunction::new(store, worker_role.aws.kinesis.clone(), || {
            |record: StreamRecord| async move {
                if &*record.partition_key == "k2" {
                    return Err(std::io::Error::other("poison"));
                }
                Ok(())
            }
        })
        .lease_term(Duration::from_secs(10))
        .config(
            WorkerConfig::default()
                .renew_every(Duration::from_millis(50))
                .min_poll_interval(Duration::ZERO)
                .idle_poll_interval(Duration::from_millis(20))
                .checkpoint_every(Duration::from_millis(100))
                .enhanced_fan_out(efo)
                .processing(ProcessingOptions::default().max_attempts(1).parking(
                    Parking::StateTable {
                        ttl: Duration::from_secs(3_600),
                    },
                )),
        )
        .margin(Duration::from_millis(300))
        .drain(Duration::ZERO)
        .emit_metrics(false)
        .observer(None)
    };
    let polling = worker(worker_store, None);
    let fanning = worker(efo_worker_store, Some(EfoPool::new(&efo_group, 1)));
    let invocation = |id: &str| {
        let mut context = crate::support::common::lambda_context(Duration::from_secs(4));
        context.request_id = id.to_owned();
        lambda_runtime::LambdaEvent::new(serde_json::json!({}), context)
    };
    let ticking = async {
        for _ in 0..30 {
            rebalancer.tick().await.unwrap();
            efo_rebalancer.tick().await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let (a, b, ()) = tokio::join!(
        Box::pin(polling.handle(invocation("11111111-1111-4111-8111-111111111111"))),
        Box::pin(fanning.handle(invocation("22222222-2222-4222-8222-222222222222"))),
        Box::pin(ticking)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(
        a.shards.processed > 0 && b.shards.processed > 0,
        "{a:?} {b:?}"
    );
    // A second pool member, registered beside the worker's, both idle now:
    // the reaper retires one (the pool keeps one).
    let second =
        crate::support::common::active_efo_consumer(&ctx.aws, arn, &format!("{efo_group}-01"))
            .await;
    efo_setup
        .efo_consumers()
        .register(
            &shardkeeper::state::EfoName::new(format!("{efo_group}-01")).unwrap(),
            &second,
        )
        .await
        .unwrap();
    efo_reaper.tick().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let retired = efo_reaper.tick().await.unwrap();
    assert_eq!(retired.execution.efo_deregistered.len(), 1, "{retired:?}");
}

/// The event-source-mapped functions' calls, each as its own role: orders on
/// the stream (its own group, parking to a dead-letter stream), the
/// projection on a table's stream (parking in the state table); a poison
/// record each. Returns the two roles, the dead-letter stream, and the
/// table and its stream's ARN. (A function of its own: its futures stay
/// off the deployment's, whose frame a test thread's stack must hold.)
async fn run_processors(
    ctx: &Ctx,
    group: &str,
    stream: &str,
    arn: &str,
    shards: &[shardkeeper::state::ShardState],
) -> (Role, Role, String, String, String) {
    let (orders_role, projection_role) = (Role::new().await, Role::new().await);
    let dead_letters = create_stream(&ctx.aws, 1).await;
    let orders_store = orders_role.store(ctx, &format!("{group}-esm"), stream);
    orders_store.stream_item().state().await.unwrap();
    let fail_k1 = |record: StreamRecord| async move {
        if &*record.partition_key == "k1" {
            return Err(std::io::Error::other("poison"));
        }
        Ok(())
    };
    let orders = KinesisProcessor::new(fail_k1)
        .with_store(orders_store)
        .with_options(ProcessingOptions::default().max_attempts(1).parking(
            Parking::DeadLetterStream {
                client: orders_role.aws.kinesis.clone(),
                stream: StreamAddress::parse(&dead_letters).unwrap(),
            },
        ));
    let mut with_poison = None;
    for shard in shards {
        let records = crate::support::esm::read_shard(ctx, stream, shard.shard_id.as_str()).await;
        if records.iter().any(|r| r.partition_key() == Some("k1")) {
            with_poison = Some((shard.shard_id.as_str().to_owned(), records));
        }
    }
    let (shard, records) = with_poison.expect("a shard with key k1's records");
    let event = crate::support::esm::kinesis_event(arn, &shard, &records);
    let report = Box::pin(orders.process(&event.to_string(), None))
        .await
        .unwrap();
    assert!(report.parked > 0, "{report:?}");

    let (orders_table, orders_stream_arn) = create_stream_table(&ctx.aws).await;
    for id in ["o-1", "o-2"] {
        ctx.aws
            .dynamodb
            .put_item()
            .table_name(&orders_table)
            .item(
                "id",
                aws_sdk_dynamodb::types::AttributeValue::S(id.to_owned()),
            )
            .send()
            .await
            .unwrap();
    }
    let projection_store = projection_role.store(ctx, group, &orders_table);
    projection_store.stream_item().state().await.unwrap();
    let projection = DynamoDbProcessor::new(|record: StreamRecord| async move {
        if record.partition_key.contains("o-2") {
            return Err(std::io::Error::other("poison"));
        }
        Ok(())
    })
    .with_store(projection_store)
    .with_options(
        ProcessingOptions::default()
            .max_attempts(1)
            .parking(Parking::StateTable {
                ttl: Duration::from_secs(3_600),
            }),
    );
    let changes = crate::support::esm::read_table_stream(ctx, &orders_stream_arn).await;
    let event = crate::support::esm::dynamodb_event(&orders_stream_arn, &changes);
    let report = Box::pin(projection.process(&event.to_string(), None))
        .await
        .unwrap();
    assert!(report.parked > 0, "{report:?}");

    (
        orders_role,
        projection_role,
        dead_letters,
        orders_table,
        orders_stream_arn,
    )
}

/// The CLI's commands on `group`, as an operator runs them: status, the
/// table's groups, parked records listed and replayed, positions exported
/// and imported, a shard reset, the group rewound.
async fn operate(ctx: &Ctx, role: &Role, group: &str, stream: &str) {
    use shardkeeper_cli::args::{
        GroupsArgs, ImportArgs, ParkedArgs, ResetArgs, RewindArgs, StatusArgs, Target,
    };
    use shardkeeper_cli::{commands, positions, rewind};
    let store = role.store(ctx, group, stream);
    let target = Target {
        stack: None,
        table: Some(ctx.table.clone()),
        group: Some(group.to_owned()),
        stream: Some(stream.to_owned()),
        conn: Default::default(),
    };
    let status = StatusArgs {
        target: target.clone(),
        json: false,
        heartbeat_timeout_seconds: 10,
    };
    commands::status(&store, &status).await.unwrap();
    let groups = GroupsArgs {
        table: ctx.table.clone(),
        conn: Default::default(),
        json: false,
    };
    commands::groups(&role.aws.dynamodb, &groups).await.unwrap();
    let parked = ParkedArgs {
        target: target.clone(),
        json: true,
        replay: true,
        to_stream: None,
    };
    commands::parked(&store, &parked).await.unwrap();
    let replayed = commands::replay_parked(&store, &role.aws.kinesis, &parked)
        .await
        .unwrap();
    assert!(!replayed.starts_with("0 of"), "{replayed}");
    let exported = positions::export(&store).await.unwrap();
    let file = std::env::temp_dir().join(format!("{}.json", unique_name("positions")));
    std::fs::write(&file, exported).unwrap();
    let import = ImportArgs {
        target: target.clone(),
        file: file.clone(),
        yes: true,
        force: true,
        dry_run: false,
        json: false,
    };
    positions::import(&store, &import, |_| true).await.unwrap();
    std::fs::remove_file(&file).ok();
    let shard = store.load_group().await.unwrap().shards[0]
        .shard_id
        .to_string();
    let reset = ResetArgs {
        target: target.clone(),
        to: "trim-horizon".to_owned(),
        shard: Some(shard),
        consumer: None,
        efo: None,
        yes: true,
        force: true,
        dry_run: false,
        json: false,
    };
    commands::reset(&store, &reset, |_| true).await.unwrap();
    let rewind = RewindArgs {
        target,
        to: Some("TRIM_HORIZON".to_owned()),
        shard: None,
        to_sequence: None,
        change: crate::support::common::scripted(),
    };
    rewind::rewind(&store, &role.aws.kinesis, &rewind, |_| true)
        .await
        .unwrap();
}

/// The operator's policy as shipped (`docs/operator-policy.json`), its
/// placeholders filled for `run`.
fn operator_policy(run: &Run) -> Vec<Statement> {
    let path = format!("{}/docs/operator-policy.json", env!("CARGO_MANIFEST_DIR"));
    let mut text = std::fs::read_to_string(&path).expect(&path);
    for (name, value) in [
        ("${Partition}", run.place.partition.as_str()),
        ("${Region}", run.place.region.as_str()),
        ("${Account}", run.place.account.as_str()),
        ("${StateTable}", run.table.as_str()),
        ("${Stream}", run.stream.as_str()),
        ("${KclTable}", "kcl-app"),
        ("${Stack}", "orders-app"),
    ] {
        text = text.replace(name, value);
    }
    let doc: Value = serde_yaml::from_str(&text).unwrap();
    Deployment::default().document(&doc["Statement"])
}

/// The templates in `dir` (relative to the repository): the control
/// plane's and the application's.
fn templates(control_plane: &str, app: &str) -> (Value, Value) {
    let read = |file: &str| {
        let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
        serde_yaml::from_str(&std::fs::read_to_string(&path).expect(&path)).unwrap()
    };
    (read(control_plane), read(app))
}

/// What Lambda's event source mappings need of each mapped function's role,
/// as Lambda documents it: Kinesis
/// (<https://docs.aws.amazon.com/lambda/latest/dg/services-kinesis-create.html>)
/// and DynamoDB Streams
/// (<https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-eventsourcemapping.html>).
fn mapping_needs(run: &Run) -> BTreeMap<&'static str, Vec<Need>> {
    let need = |action: &str, resource: &str| Need {
        action: action.to_owned(),
        resource: resource.to_owned(),
        leading_keys: Vec::new(),
    };
    let kinesis = [
        "kinesis:DescribeStream",
        "kinesis:DescribeStreamSummary",
        "kinesis:GetRecords",
        "kinesis:GetShardIterator",
        "kinesis:ListShards",
    ]
    .map(|a| need(a, &run.stream_arn));
    let streams = [
        "dynamodb:DescribeStream",
        "dynamodb:GetRecords",
        "dynamodb:GetShardIterator",
        "dynamodb:ListStreams",
    ]
    .map(|a| need(a, &run.orders_stream_arn));
    [(ORDERS, kinesis.to_vec()), (PROJECTION, streams.to_vec())].into()
}

/// Every need of `run` that the templates do not grant, one line each.
fn audit(run: &Run, control_plane: &Value, app: &Value) -> Vec<String> {
    let place = &run.place;
    let state_policy = format!(
        "arn:{}:iam::{}:policy/state",
        place.partition, place.account
    );
    let mut app_deployment = Deployment::in_place(place, "app");
    for (k, v) in [
        ("OrdersTable", run.orders_table.clone()),
        ("DeadLetterStream", run.dead_letters.clone()),
        ("ShardWorker", run.worker_function.clone()),
    ] {
        app_deployment.refs.insert(k.to_owned(), v);
    }
    for (k, v) in [
        ("ControlPlane.Outputs.StateTableName", run.table.clone()),
        ("ControlPlane.Outputs.StreamArn", run.stream_arn.clone()),
        ("ControlPlane.Outputs.StreamName", run.stream.clone()),
        ("ControlPlane.Outputs.StatePolicyArn", state_policy.clone()),
        ("OrdersTable.Arn", place.table_arn(&run.orders_table)),
        ("OrdersTable.StreamArn", run.orders_stream_arn.clone()),
        ("ProjectionTable.Arn", place.table_arn("projection")),
        ("DeadLetterStream.Arn", place.stream_arn(&run.dead_letters)),
        (
            "FailedBatchQueue.Arn",
            format!(
                "arn:{}:sqs:{}:{}:failed",
                place.partition, place.region, place.account
            ),
        ),
    ] {
        app_deployment.attributes.insert(k.to_owned(), v);
    }
    app_deployment
        .parameters
        .insert("ConsumerGroup".to_owned(), run.group.clone());

    // The control plane as the application nests it: the parameters it passes.
    let passed = app_deployment.resolve(
        app,
        &app["Resources"]["ControlPlane"]["Properties"]["Parameters"],
    );
    let mut control = Deployment::in_place(place, "app-ControlPlane");
    for (k, v) in passed.as_mapping().unwrap() {
        let v = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => panic!("{other:?}"),
        };
        control.parameters.insert(k.as_str().unwrap().to_owned(), v);
    }
    // The run takes three more groups of the stream through the same
    // functions (enhanced fan-out, and the sweep of an earlier stream's
    // state): granted as ExtraGroups grants a deployment's other groups.
    let extra = control
        .parameters
        .get("ExtraGroups")
        .into_iter()
        .cloned()
        .chain(["efo", "old"].map(|g| format!("{}-{g}", run.group)))
        .collect::<Vec<_>>()
        .join(",");
    control.parameters.insert("ExtraGroups".to_owned(), extra);
    for (k, v) in [
        ("StateTable", run.table.clone()),
        ("Stream", run.stream.clone()),
        ("StatePolicy", state_policy.clone()),
    ] {
        control.refs.insert(k.to_owned(), v);
    }
    for (k, v) in [
        ("StateTable.Arn", place.table_arn(&run.table)),
        ("Stream.Arn", run.stream_arn.clone()),
    ] {
        control.attributes.insert(k.to_owned(), v);
    }
    let state: Vec<Statement> = control.managed_policy(control_plane, "StatePolicy");
    control.managed.insert(state_policy.clone(), state.clone());
    app_deployment.managed.insert(state_policy, state);

    let mappings = mapping_needs(run);
    let mut lines = Vec::new();
    for (function, needs) in &run.needs {
        if *function == OPERATOR {
            lines.extend(denied(function, &operator_policy(run), needs));
            continue;
        }
        let (template, deployment) = if [REBALANCER, REAPER].contains(function) {
            (control_plane, &control)
        } else {
            (app, &app_deployment)
        };
        let statements = deployment.statements(template, function);
        lines.extend(denied(function, &statements, needs));
        if let Some(more) = mappings.get(function) {
            lines.extend(denied(function, &statements, more));
        }
    }
    lines
}

/// What the ESM-only template (`examples/esm-only/template.yaml`, no
/// control plane) does not grant its orders function of what the run's
/// orders function sent and its mapping needs, one line each.
fn audit_esm_only(run: &Run, template: &Value) -> Vec<String> {
    let place = &run.place;
    let mut d = Deployment::in_place(place, "esm-only");
    d.parameters
        .insert("ConsumerGroup".to_owned(), format!("{}-esm", run.group));
    d.parameters
        .insert("StreamArn".to_owned(), run.stream_arn.clone());
    for (k, v) in [
        ("StateTable", run.table.clone()),
        ("OrdersTable", run.orders_table.clone()),
        ("DeadLetterStream", run.dead_letters.clone()),
    ] {
        d.refs.insert(k.to_owned(), v);
    }
    for (k, v) in [
        ("StateTable.Arn", place.table_arn(&run.table)),
        ("OrdersTable.Arn", place.table_arn(&run.orders_table)),
        ("DeadLetterStream.Arn", place.stream_arn(&run.dead_letters)),
        (
            "FailedBatchQueue.Arn",
            format!(
                "arn:{}:sqs:{}:{}:failed",
                place.partition, place.region, place.account
            ),
        ),
    ] {
        d.attributes.insert(k.to_owned(), v);
    }
    let statements = d.statements(template, ORDERS);
    let mut lines = denied(ORDERS, &statements, &run.needs[ORDERS]);
    lines.extend(denied(ORDERS, &statements, &mapping_needs(run)[ORDERS]));
    lines
}

/// Every action a function sends is granted by its template, on its
/// resource and partition keys; and the templates of 2026-11-26 fail the
/// same audit, naming `dynamodb:ConditionCheckItem`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_action_a_function_sends_is_granted_by_its_template() {
    let ctx = ctx().await;
    let run = Box::pin(record_a_deployment(&ctx)).await;
    for (function, needs) in &run.needs {
        assert!(!needs.is_empty(), "{function} recorded nothing");
    }
    // What the audit saw, for the report (`--nocapture`).
    for (function, needs) in &run.needs {
        for need in needs {
            println!("{function}: {need}");
        }
    }
    let (control_plane, app) = templates("template.yaml", "examples/consumer-app/template.yaml");
    let lines = audit(&run, &control_plane, &app);
    assert!(lines.is_empty(), "not granted:\n{}", lines.join("\n"));
    // The ESM-only start grants its orders function the same, alone.
    let (esm_only, _) = templates("examples/esm-only/template.yaml", "template.yaml");
    let lines = audit_esm_only(&run, &esm_only);
    assert!(
        lines.is_empty(),
        "ESM-only, not granted:\n{}",
        lines.join("\n")
    );

    // The test of the test: the policies as they were.
    let (old_control, old_app) = templates(
        "tests/fixtures/templates-2026-11-26/template.yaml",
        "tests/fixtures/templates-2026-11-26/consumer-app.yaml",
    );
    let old = audit(&run, &old_control, &old_app);
    // (The shard worker's group mode checkpoints with plain fenced
    // updates; the condition-check checkpoint is the standalone enhanced
    // fan-out mode's, which the state policy grants too.)
    for function in [REBALANCER, REAPER] {
        assert!(
            old.iter()
                .any(|l| l.starts_with(&format!("{function}: dynamodb:ConditionCheckItem"))),
            "{function}: the old templates' gap not found:\n{}",
            old.join("\n")
        );
    }

    // Least privilege: a function of this group may not touch another
    // group's items, nor deregister a consumer outside the pool's names.
    let other_group = Need {
        action: "dynamodb:UpdateItem".to_owned(),
        resource: run.place.table_arn(&run.table),
        leading_keys: vec![format!("other-{}#s", run.group)],
    };
    let foreign_consumer = Need {
        action: "kinesis:DeregisterStreamConsumer".to_owned(),
        resource: format!("{}/consumer/someone-else:1", run.stream_arn),
        leading_keys: Vec::new(),
    };
    let mut probe = Run {
        needs: BTreeMap::new(),
        ..run
    };
    probe
        .needs
        .insert(REAPER, vec![other_group.clone(), foreign_consumer]);
    probe.needs.insert(ORDERS, vec![other_group]);
    let esm_only_refused = audit_esm_only(&probe, &esm_only);
    assert_eq!(esm_only_refused.len(), 1, "{esm_only_refused:?}");
    let refused = audit(&probe, &control_plane, &app);
    assert_eq!(
        refused.len(),
        3,
        "each probe refused:\n{}",
        refused.join("\n")
    );
}
