//! template.yaml against the code: every environment variable a function
//! reads is set, and every action a function calls is in its policy.

use serde_yaml::Value;
use std::collections::BTreeSet;

fn template() -> Value {
    let text =
        std::fs::read_to_string(format!("{}/template.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_mapping()
        .map(|m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Environment variables a function's code reads, found in its source.
fn variables_read(binary: &str) -> BTreeSet<String> {
    let dir = format!("{}/functions/{binary}/src", env!("CARGO_MANIFEST_DIR"));
    let mut vars = BTreeSet::new();
    for file in ["main.rs", "lib.rs"] {
        let Ok(src) = std::fs::read_to_string(format!("{dir}/{file}")) else {
            continue;
        };
        for call in ["required_var(\"", "optional_var(\""] {
            for part in src.split(call).skip(1) {
                vars.insert(part.split('"').next().unwrap().to_owned());
            }
        }
        // `init_scheduled` reads `ScheduledConfig::from_env`.
        if [
            "ScheduledConfig::from_env",
            "init_scheduled",
            "store_config_from_env",
        ]
        .iter()
        .any(|reader| src.contains(reader))
        {
            for v in [
                "SHARDKEEPER_TABLE",
                "SHARDKEEPER_GROUP",
                "SHARDKEEPER_STREAM",
            ] {
                vars.insert(v.to_owned());
            }
        }
    }
    vars
}

fn actions(function: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for policy in function["Properties"]["Policies"]
        .as_sequence()
        .into_iter()
        .flatten()
    {
        for statement in policy["Statement"].as_sequence().into_iter().flatten() {
            for action in statement["Action"].as_sequence().into_iter().flatten() {
                out.insert(action.as_str().unwrap().to_owned());
            }
        }
    }
    out
}

#[test]
fn every_function_has_its_variables_and_permissions() {
    let t = template();
    let globals = keys(&t["Globals"]["Function"]["Environment"]["Variables"]);
    let state = ["dynamodb:GetItem", "dynamodb:UpdateItem"];
    let scheduled_state = [
        "dynamodb:DescribeTable",
        "dynamodb:Query",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
    ];
    let expected: Vec<(&str, Vec<&str>)> = vec![
        (
            "LeaseRebalancer",
            [
                &state[..],
                &scheduled_state[..],
                &[
                    "kinesis:DescribeStreamSummary",
                    "kinesis:ListShards",
                    "lambda:InvokeFunction",
                ],
            ]
            .concat(),
        ),
        (
            "HeartbeatReaper",
            [
                &state[..],
                &scheduled_state[..],
                &[
                    "kinesis:DescribeStreamSummary",
                    "kinesis:DeregisterStreamConsumer",
                ],
            ]
            .concat(),
        ),
        (
            "ShardWorker",
            [
                &state[..],
                &scheduled_state[..],
                &[
                    "kinesis:DescribeStreamSummary",
                    "kinesis:ListShards",
                    "kinesis:GetShardIterator",
                    "kinesis:GetRecords",
                    "kinesis:RegisterStreamConsumer",
                    "kinesis:DescribeStreamConsumer",
                    "kinesis:SubscribeToShard",
                ],
            ]
            .concat(),
        ),
        (
            "KinesisProcessor",
            [
                &state[..],
                &[
                    "dynamodb:PutItem",
                    "kinesis:PutRecord",
                    "kinesis:GetRecords",
                    "kinesis:GetShardIterator",
                    "sqs:SendMessage",
                ],
            ]
            .concat(),
        ),
        (
            "StreamProcessor",
            [
                &state[..],
                &[
                    "dynamodb:PutItem",
                    "dynamodb:GetRecords",
                    "dynamodb:GetShardIterator",
                    "sqs:SendMessage",
                ],
            ]
            .concat(),
        ),
    ];
    for (name, needed) in expected {
        let f = &t["Resources"][name];
        assert_eq!(f["Type"], "AWS::Serverless::Function", "{name}");
        assert_eq!(f["Metadata"]["BuildMethod"], "rust-cargolambda", "{name}");
        let binary = f["Metadata"]["BuildProperties"]["Binary"].as_str().unwrap();
        let mut env = globals.clone();
        env.extend(keys(&f["Properties"]["Environment"]["Variables"]));
        let read = variables_read(binary);
        assert!(
            !read.is_empty(),
            "{binary}: found no variables in its source"
        );
        let missing: Vec<_> = read.difference(&env).collect();
        assert!(
            missing.is_empty(),
            "{name} ({binary}) reads {missing:?}, not set in template.yaml"
        );
        let granted = actions(f);
        let not_granted: Vec<_> = needed.iter().filter(|a| !granted.contains(**a)).collect();
        assert!(
            not_granted.is_empty(),
            "{name} calls {not_granted:?} without permission"
        );
        assert!(
            !granted.iter().any(|a| a.ends_with(":*")),
            "{name}: no wildcard actions"
        );
    }
    let table = &t["Resources"]["StateTable"];
    assert_eq!(table["DeletionPolicy"], "Retain");
    assert_eq!(
        table["Properties"]["TimeToLiveSpecification"]["AttributeName"],
        shardkeeper::state::schema::TTL
    );
    assert_eq!(
        t["Resources"]["LeaseRebalancer"]["Properties"]["ReservedConcurrentExecutions"],
        1
    );
    // The rebalancer starts the shard workers: it names their function, and
    // nothing else starts them (no schedule: a schedule's invocations would
    // come on top of the fleet's).
    let rebalancer = &t["Resources"]["LeaseRebalancer"]["Properties"];
    let names = &rebalancer["Environment"]["Variables"][shardkeeper::config::WORKER_FUNCTION];
    assert!(
        matches!(names, Value::Tagged(v) if v.tag == "Ref" && v.value == "ShardWorker"),
        "{names:?}"
    );
    assert!(t["Resources"]["ShardWorker"]["Properties"]["Events"].is_null());
    // The pool size reaches the shard workers, within the Kinesis limit.
    let size = &t["Parameters"]["EfoPoolSize"];
    assert_eq!(
        (size["Default"].as_u64(), size["MaxValue"].as_u64()),
        (Some(0), Some(20))
    );
    let set = &t["Resources"]["ShardWorker"]["Properties"]["Environment"]["Variables"]
        [shardkeeper::config::EFO_POOL_SIZE];
    assert!(
        matches!(set, Value::Tagged(v) if v.tag == "Ref" && v.value == "EfoPoolSize"),
        "{set:?}"
    );
}

/// Every permission and event source on an existing stream follows the
/// stream the functions are given: an ARN is made from `ExistingStreamName`
/// only where `ExistingStreamArn` is empty (a stream shared by another
/// account is granted by its own ARN), and the functions are given that ARN.
#[test]
fn an_existing_stream_is_granted_by_its_arn_when_given_one() {
    fn walk(v: &Value, arn_given_else: bool, found: &mut usize) {
        match v {
            Value::Tagged(t) if t.tag == "If" => {
                let seq = t.value.as_sequence().unwrap();
                let on_arn = seq[0].as_str() == Some("StreamByArn");
                walk(&seq[1], false, found);
                walk(&seq[2], on_arn, found);
            }
            Value::Tagged(t) if t.tag == "Sub" => {
                let text = t.value.as_str().unwrap_or_default();
                if text.contains("stream/${ExistingStreamName}") {
                    assert!(arn_given_else, "{text} without the ARN beside it");
                    *found += 1;
                }
            }
            Value::Tagged(t) => walk(&t.value, false, found),
            Value::Sequence(items) => items.iter().for_each(|i| walk(i, false, found)),
            Value::Mapping(m) => m.values().for_each(|i| walk(i, false, found)),
            _ => {}
        }
    }
    let t = template();
    let mut found = 0;
    walk(&t["Resources"], false, &mut found);
    assert!(found >= 7, "the stream's ARN, made from its name: {found}");
    let given = serde_yaml::to_string(
        &t["Globals"]["Function"]["Environment"]["Variables"][shardkeeper::config::STREAM],
    )
    .unwrap();
    assert!(given.contains("ExistingStreamArn"), "{given}");
    let pattern = t["Parameters"]["ExistingStreamArn"]["AllowedPattern"]
        .as_str()
        .unwrap();
    assert!(
        pattern.contains("kinesis") && pattern.contains("[0-9]{12}"),
        "{pattern}"
    );
}

/// What `sam build` needs of each function (it was run: docs/DEPLOY.md):
/// SAM's cargo-lambda builder runs `cargo lambda build --bin <Binary>` in the
/// function's `CodeUri`, so that directory must be the package with that
/// binary (at the workspace root, itself a package, cargo answers "no bin
/// target named ... in default-run packages").
#[test]
fn every_function_builds_from_the_package_that_has_its_binary() {
    let template = template();
    let root = env!("CARGO_MANIFEST_DIR");
    let mut functions = 0;
    for (_, resource) in template["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        functions += 1;
        assert_eq!(
            resource["Metadata"]["BuildMethod"].as_str(),
            Some("rust-cargolambda")
        );
        let binary = resource["Metadata"]["BuildProperties"]["Binary"]
            .as_str()
            .unwrap();
        let code = resource["Properties"]["CodeUri"].as_str().unwrap();
        let manifest = std::fs::read_to_string(format!("{root}/{code}/Cargo.toml"))
            .unwrap_or_else(|e| panic!("{code}: {e}"));
        assert!(
            manifest.contains(&format!("name = \"{binary}\"")),
            "{code}/Cargo.toml is not the package {binary}"
        );
        assert!(
            std::path::Path::new(&format!("{root}/{code}/src/main.rs")).exists(),
            "{code} has no binary"
        );
    }
    assert_eq!(functions, 5);
}

/// Every metric of the functions' namespace (the `MetricsNamespace`
/// parameter) an alarm or the dashboard watches, in every metric of the
/// alarms' math: the code writes it (an alarm on a name nobody writes would
/// never fire), under the dimensions every function writes (`Function`,
/// `Group`, `Stream`).
#[test]
fn every_alarm_and_dashboard_metric_is_one_the_code_writes() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut written = BTreeSet::new();
    for file in [
        "src/functions/worker.rs",
        "src/functions/rebalancer.rs",
        "src/functions/reaper.rs",
        "src/lambda/processor.rs",
    ] {
        // (Whitespace dropped: a call may span lines.)
        let src: String = std::fs::read_to_string(format!("{root}/{file}"))
            .unwrap()
            .split_whitespace()
            .collect();
        for call in ["Metric::count(\"", "Metric::of(\"", "name:\""] {
            for part in src.split(call).skip(1) {
                written.insert(part.split('"').next().unwrap().to_owned());
            }
        }
    }
    let template = template();
    let mut watched = BTreeSet::new();
    let (mut alarms, mut ours) = (0, 0);
    for (_, resource) in template["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::CloudWatch::Alarm") {
            continue;
        }
        alarms += 1;
        let p = &resource["Properties"];
        let mut metrics: Vec<&serde_yaml::Value> = vec![p];
        if let Some(math) = p["Metrics"].as_sequence() {
            metrics.extend(math.iter().map(|m| &m["MetricStat"]["Metric"]));
        }
        for m in metrics {
            if is_ref(&m["Namespace"], "MetricsNamespace") {
                ours += 1;
                watched.insert(m["MetricName"].as_str().unwrap().to_owned());
                // Every function writes the same three dimensions.
                let names: BTreeSet<&str> = m["Dimensions"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .map(|d| d["Name"].as_str().unwrap())
                    .collect();
                assert_eq!(
                    names,
                    BTreeSet::from(["Function", "Group", "Stream"]),
                    "{:?}",
                    m["MetricName"]
                );
            }
        }
    }
    let text = std::fs::read_to_string(format!("{root}/template.yaml")).unwrap();
    for part in text.split("[\"${MetricsNamespace}\", \"").skip(1) {
        watched.insert(part.split('"').next().unwrap().to_owned());
        let line = part.split(']').next().unwrap();
        for dimension in ["\"Function\"", "\"Group\"", "\"Stream\""] {
            assert!(
                line.contains(dimension),
                "dashboard line without {dimension}: {line}"
            );
        }
    }
    assert!(
        !text.contains("[\"shardkeeper\""),
        "the dashboard reads the namespace parameter"
    );
    assert!(alarms >= 7, "{alarms} alarms");
    assert!(
        ours >= 6,
        "{ours} alarm metrics in the functions' namespace"
    );
    let unknown: Vec<_> = watched.difference(&written).collect();
    assert!(unknown.is_empty(), "watched but never written: {unknown:?}");
}

/// `value` is `!Ref <name>`.
fn is_ref(value: &Value, name: &str) -> bool {
    match value {
        Value::Tagged(t) => t.tag == "Ref" && t.value.as_str() == Some(name),
        _ => false,
    }
}
