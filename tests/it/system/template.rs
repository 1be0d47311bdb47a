//! The control plane's template (`template.yaml`) and the example
//! application's (`examples/consumer-app/template.yaml`, which nests it)
//! against the code: every environment variable a function reads is set,
//! every action a function calls is in its policy, every metric watched is
//! written, and the application passes the control plane what it needs.

use serde_yaml::Value;
use std::collections::BTreeSet;

/// The control plane's template (this repository's `template.yaml`).
const CONTROL_PLANE: &str = "";
/// The example application's template, which nests the control plane.
const APP: &str = "examples/consumer-app";
/// The event-source-mapped start: one function and the state table.
const ESM_ONLY: &str = "examples/esm-only";

/// The template in `dir` (relative to the repository).
fn template_in(dir: &str) -> Value {
    let text = std::fs::read_to_string(path(dir, "template.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn template() -> Value {
    template_in(CONTROL_PLANE)
}

/// `file` in `dir`, both relative to the repository.
fn path(dir: &str, file: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    if dir.is_empty() {
        format!("{root}/{file}")
    } else {
        format!("{root}/{dir}/{file}")
    }
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

/// The source of a function's binary: `src/bin/<binary>.rs` or
/// `src/main.rs` of its `CodeUri`.
fn binary_source(dir: &str, code: &str, binary: &str) -> Option<(String, String)> {
    let code = if code == "." {
        dir.to_owned()
    } else if dir.is_empty() {
        code.to_owned()
    } else {
        format!("{dir}/{code}")
    };
    [format!("src/bin/{binary}.rs"), "src/main.rs".to_owned()]
        .into_iter()
        .find_map(|file| {
            let src = std::fs::read_to_string(path(&code, &file)).ok()?;
            Some((format!("{code}/{file}"), src))
        })
}

/// Environment variables a function's code reads, found in its binary's
/// source: its own `required_var`/`optional_var` calls, and the state
/// store's variables where it calls one of the library's `from_env` mains.
fn variables_read(src: &str) -> BTreeSet<String> {
    let mut vars = BTreeSet::new();
    for call in ["required_var(\"", "optional_var(\""] {
        for part in src.split(call).skip(1) {
            vars.insert(part.split('"').next().unwrap().to_owned());
        }
    }
    if ["from_env", "run_rebalancer", "run_reaper"]
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
    vars
}

/// The actions of a policy document's statements (a statement under `!If`
/// counts as its first branch).
fn statement_actions(statements: &Value, out: &mut BTreeSet<String>) {
    for statement in statements.as_sequence().into_iter().flatten() {
        let statement = match statement {
            Value::Tagged(t) if t.tag == "If" => &t.value.as_sequence().unwrap()[1],
            s => s,
        };
        for action in statement["Action"].as_sequence().into_iter().flatten() {
            out.insert(action.as_str().unwrap().to_owned());
        }
    }
}

/// The actions a function is granted: its inline statements, and the
/// control plane's state policy where it attaches that (by `Ref` in the
/// control plane, by the nested stack's output `StatePolicyArn` in the
/// application). The IAM audit (`system::iam`) checks each action on its
/// resource and keys; this checks the variables and that no action is a
/// wildcard.
fn actions(function: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for policy in function["Properties"]["Policies"]
        .as_sequence()
        .into_iter()
        .flatten()
    {
        match policy {
            Value::Tagged(t) if t.tag == "Ref" => {
                assert_eq!(t.value.as_str(), Some("StatePolicy"));
                let document =
                    &template()["Resources"]["StatePolicy"]["Properties"]["PolicyDocument"];
                statement_actions(&document["Statement"], &mut out);
            }
            Value::Tagged(t) if t.tag == "GetAtt" => {
                assert_eq!(
                    t.value.as_str(),
                    Some("ControlPlane.Outputs.StatePolicyArn")
                );
                let document =
                    &template()["Resources"]["StatePolicy"]["Properties"]["PolicyDocument"];
                statement_actions(&document["Statement"], &mut out);
            }
            policy => statement_actions(&policy["Statement"], &mut out),
        }
    }
    out
}

#[test]
fn every_function_has_its_variables_and_permissions() {
    let state = ["dynamodb:GetItem", "dynamodb:UpdateItem"];
    let scheduled_state = [
        "dynamodb:DescribeTable",
        "dynamodb:Query",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
    ];
    let expected: Vec<(&str, &str, Vec<&str>)> = vec![
        (
            CONTROL_PLANE,
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
            CONTROL_PLANE,
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
            APP,
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
            APP,
            "Orders",
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
            ESM_ONLY,
            "Orders",
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
            APP,
            "Projection",
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
    for (dir, name, needed) in expected {
        let t = template_in(dir);
        let globals = keys(&t["Globals"]["Function"]["Environment"]["Variables"]);
        let f = &t["Resources"][name];
        assert_eq!(f["Type"], "AWS::Serverless::Function", "{name}");
        assert_eq!(f["Metadata"]["BuildMethod"], "rust-cargolambda", "{name}");
        let binary = f["Metadata"]["BuildProperties"]["Binary"].as_str().unwrap();
        let code = f["Properties"]["CodeUri"].as_str().unwrap();
        let (file, src) = binary_source(dir, code, binary).expect("the binary's source");
        let mut env = globals.clone();
        env.extend(keys(&f["Properties"]["Environment"]["Variables"]));
        let read = variables_read(&src);
        assert!(!read.is_empty(), "{file}: found no variables in its source");
        let missing: Vec<_> = read.difference(&env).collect();
        assert!(
            missing.is_empty(),
            "{name} ({file}) reads {missing:?}, not set in its template"
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
    let t = template();
    let table = &t["Resources"]["StateTable"];
    assert_eq!(table["DeletionPolicy"], "Retain");
    // The ESM-only start makes the state table as the control plane does.
    let esm_only = template_in(ESM_ONLY);
    let own = &esm_only["Resources"]["StateTable"];
    assert_eq!(own["DeletionPolicy"], "Retain");
    for field in [
        "BillingMode",
        "DeletionProtectionEnabled",
        "AttributeDefinitions",
        "KeySchema",
        "PointInTimeRecoverySpecification",
        "TimeToLiveSpecification",
    ] {
        assert_eq!(
            own["Properties"][field], table["Properties"][field],
            "{field}"
        );
    }
    assert!(esm_only["Resources"]["ControlPlane"].is_null());
    assert_eq!(
        table["Properties"]["TimeToLiveSpecification"]["AttributeName"],
        shardkeeper::state::TTL_ATTRIBUTE
    );
    assert_eq!(
        t["Resources"]["LeaseRebalancer"]["Properties"]["ReservedConcurrentExecutions"],
        1
    );
    // The rebalancer starts the shard workers of the function it is given.
    let rebalancer = &t["Resources"]["LeaseRebalancer"]["Properties"];
    let names = &rebalancer["Environment"]["Variables"][shardkeeper::config::WORKER_FUNCTION];
    assert!(is_ref(names, "WorkerFunctionName"), "{names:?}");

    // The application gives the control plane its shard workers' function
    // by the name that function has, and nothing else starts them (no
    // schedule: a schedule's invocations would come on top of the fleet's).
    let app = template_in(APP);
    let given = &app["Resources"]["ControlPlane"]["Properties"]["Parameters"]["WorkerFunctionName"];
    let worker = &app["Resources"]["ShardWorker"]["Properties"];
    assert_eq!(given, &worker["FunctionName"]);
    assert!(
        matches!(given, Value::Tagged(v) if v.tag == "Sub"),
        "a name, not a reference back to the worker: {given:?}"
    );
    assert!(worker["Events"].is_null());
    // Every parameter the application passes is one the control plane has.
    let passed = keys(&app["Resources"]["ControlPlane"]["Properties"]["Parameters"]);
    let declared = keys(&t["Parameters"]);
    let unknown: Vec<_> = passed.difference(&declared).collect();
    assert!(
        unknown.is_empty(),
        "not control-plane parameters: {unknown:?}"
    );
    assert_eq!(
        app["Resources"]["ControlPlane"]["Properties"]["Location"],
        "../../template.yaml"
    );
    // Every output of the control plane the application reads exists.
    let text = std::fs::read_to_string(path(APP, "template.yaml")).unwrap();
    let outputs = keys(&t["Outputs"]);
    for part in text.split("ControlPlane.Outputs.").skip(1) {
        let output: String = part
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        assert!(
            outputs.contains(&output),
            "no control-plane output {output}"
        );
    }
    // The pool size reaches the shard workers, within the Kinesis limit.
    let size = &app["Parameters"]["EfoPoolSize"];
    assert_eq!(
        (size["Default"].as_u64(), size["MaxValue"].as_u64()),
        (Some(0), Some(20))
    );
    let set = &worker["Environment"]["Variables"][shardkeeper::config::EFO_POOL_SIZE];
    assert!(is_ref(set, "EfoPoolSize"), "{set:?}");
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
    // The output the application's policies and event sources read.
    walk(&t["Outputs"]["StreamArn"], false, &mut found);
    assert!(found >= 4, "the stream's ARN, made from its name: {found}");
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
/// function's `CodeUri`, so that directory must be a package with that
/// binary (at this repository's root, itself a package, cargo answers "no
/// bin target named ... in default-run packages").
#[test]
fn every_function_builds_from_the_package_that_has_its_binary() {
    let mut functions = 0;
    for dir in [CONTROL_PLANE, APP, ESM_ONLY] {
        let template = template_in(dir);
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
            assert_ne!(
                (dir, code),
                (CONTROL_PLANE, "."),
                "the repository's root package has no function binaries"
            );
            let (file, _) = binary_source(dir, code, binary)
                .unwrap_or_else(|| panic!("{dir}/{code}: no source of {binary}"));
            let manifest_dir = file.split("/src/").next().unwrap().to_owned();
            let manifest = std::fs::read_to_string(path(&manifest_dir, "Cargo.toml")).unwrap();
            if file.ends_with("src/main.rs") {
                assert!(
                    manifest.contains(&format!("name = \"{binary}\"")),
                    "{manifest_dir}/Cargo.toml is not the package {binary}"
                );
            }
        }
    }
    assert_eq!(functions, 6);
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
        "src/lambda/summary.rs",
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
    let mut watched = BTreeSet::new();
    let (mut alarms, mut ours) = (0, 0);
    for dir in [CONTROL_PLANE, APP] {
        let template = template_in(dir);
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
        let text = std::fs::read_to_string(path(dir, "template.yaml")).unwrap();
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
    }
    assert!(alarms >= 8, "{alarms} alarms");
    assert!(
        ours >= 6,
        "{ours} alarm metrics in the functions' namespace"
    );
    let unknown: Vec<_> = watched.difference(&written).collect();
    assert!(unknown.is_empty(), "watched but never written: {unknown:?}");
}

/// The example consumes an existing stream as the control plane does: it
/// declares the control plane's stream parameters (the same type, default
/// and bounds) and passes each through, so a team can point it at its own
/// stream and give that stream's retention.
#[test]
fn the_example_passes_the_stream_parameters_to_the_control_plane() {
    let (control_plane, app) = (template(), template_in(APP));
    let passed = &app["Resources"]["ControlPlane"]["Properties"]["Parameters"];
    for name in [
        "ExistingStreamName",
        "ExistingStreamArn",
        "ShardCount",
        "RetentionHours",
    ] {
        let ours = &control_plane["Parameters"][name];
        let theirs = &app["Parameters"][name];
        for field in ["Type", "Default", "AllowedPattern", "MinValue", "MaxValue"] {
            assert_eq!(theirs[field], ours[field], "{name}.{field}");
        }
        assert!(
            is_ref(&passed[name], name),
            "{name} is passed through: {:?}",
            passed[name]
        );
    }
}

/// A project made from the example by `cargo lambda new` nests the control
/// plane of this version from the Serverless Application Repository, and
/// depends on the crates at this version's tag. CI makes such a project
/// outside the repository and builds, tests and validates it (`.ci/run`);
/// this checks that the versions it is given agree with this one.
#[test]
fn the_project_template_nests_the_published_control_plane_of_this_version() {
    let version = env!("CARGO_PKG_VERSION");
    let published = &template()["Metadata"]["AWS::ServerlessRepo::Application"];
    assert_eq!(published["Name"], "shardkeeper-control-plane");
    assert_eq!(published["SemanticVersion"], version);
    for file in ["LicenseUrl", "ReadmeUrl"] {
        let local = published[file].as_str().unwrap();
        assert!(
            std::path::Path::new(&path(CONTROL_PLANE, local)).is_file(),
            "{file}: {local}"
        );
    }
    // Here the application nests the control plane from this repository; a
    // project made from it, from the Location kept under its Metadata.
    let control_plane = &template_in(APP)["Resources"]["ControlPlane"];
    assert_eq!(
        control_plane["Properties"]["Location"],
        "../../template.yaml"
    );
    let kept = control_plane["Metadata"]["ProjectLocation"]
        .as_str()
        .unwrap();
    let kept: Value = serde_yaml::from_str(kept).unwrap();
    assert_eq!(
        kept["Location"]["ApplicationId"],
        "{{ control_plane_application_id }}"
    );
    assert_eq!(
        kept["Location"]["SemanticVersion"],
        "{{ shardkeeper_version }}"
    );
    // The template's version, which names both, is this one.
    let config = std::fs::read_to_string(path(APP, "CargoLambda.toml")).unwrap();
    let prompt = config
        .split("[template.prompts.shardkeeper_version]")
        .nth(1)
        .expect("a prompt for the version");
    let default = prompt
        .lines()
        .find_map(|l| l.strip_prefix("default = "))
        .unwrap();
    assert_eq!(default, format!("\"{version}\""));
    let manifest = std::fs::read_to_string(path(APP, "Cargo.toml")).unwrap();
    assert_eq!(
        manifest
            .matches("tag = \"v{{ shardkeeper_version }}\"")
            .count(),
        2,
        "shardkeeper and shardkeeper-local from the release's tag"
    );
}

/// Every template outputs what the CLI's `--stack` reads.
#[test]
fn every_template_outputs_what_the_cli_reads_of_a_stack() {
    for dir in [CONTROL_PLANE, APP, ESM_ONLY] {
        let outputs = keys(&template_in(dir)["Outputs"]);
        for name in ["StateTableName", "ConsumerGroup", "StreamName"] {
            assert!(
                outputs.contains(name),
                "{dir}/template.yaml: no output {name}"
            );
        }
    }
}

/// `value` is `!Ref <name>`.
fn is_ref(value: &Value, name: &str) -> bool {
    match value {
        Value::Tagged(t) => t.tag == "Ref" && t.value.as_str() == Some(name),
        _ => false,
    }
}

/// What keeps a deployment from losing data or logs to a mistake: the
/// state table cannot be deleted while protected and is kept with the
/// stack; the example's data tables and dead-letter stream are kept; each
/// function logs into a log group of the stack's from its first invocation
/// (its `LoggingConfig` names it, and the group's name does not wait for
/// the function).
#[test]
fn the_templates_keep_data_and_logs_through_mistakes() {
    let control = template();
    let table = &control["Resources"]["StateTable"];
    assert_eq!(table["Properties"]["DeletionProtectionEnabled"], true);
    assert_eq!(table["DeletionPolicy"], "Retain");
    let app = template_in(APP);
    for kept in ["OrdersTable", "ProjectionTable", "DeadLetterStream"] {
        let r = &app["Resources"][kept];
        assert_eq!(r["DeletionPolicy"], "Retain", "{kept}");
        assert_eq!(r["UpdateReplacePolicy"], "Retain", "{kept}");
    }
    for t in [&control, &app] {
        let resources = t["Resources"].as_mapping().unwrap();
        for (name, r) in resources {
            if r["Type"] != "AWS::Serverless::Function" {
                continue;
            }
            let name = name.as_str().unwrap();
            let group = &r["Properties"]["LoggingConfig"]["LogGroup"];
            let Value::Tagged(reference) = group else {
                panic!("{name}: no LoggingConfig.LogGroup");
            };
            assert_eq!(reference.tag, "Ref", "{name}");
            let logs = &t["Resources"][reference.value.as_str().unwrap()];
            assert_eq!(logs["Type"], "AWS::Logs::LogGroup", "{name}");
            let log_name = format!("{:?}", logs["Properties"]["LogGroupName"]);
            assert!(
                !log_name.contains(&format!("${{{name}}}")),
                "{name}: its log group's name waits for the function: {log_name}"
            );
        }
    }
}
