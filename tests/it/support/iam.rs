//! The IAM audit's parts: the actions a request needs as AWS authorizes it,
//! the statements a template grants a function (its intrinsic functions
//! resolved for one deployment), and their evaluation.
//!
//! - [`needs`]: a request a client sent (its operation, URI and body, kept
//!   by [`RequestCounter`](shardkeeper_local::RequestCounter)) as the IAM
//!   actions it needs, each on its resource ARN with the partition keys it
//!   touches (`dynamodb:LeadingKeys`). A `TransactWriteItems` needs the
//!   item-level action of each part (Put → `PutItem`, Update →
//!   `UpdateItem`, Delete → `DeleteItem`, ConditionCheck →
//!   `ConditionCheckItem`:
//!   <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html>);
//!   a `BatchWriteItem` needs `BatchWriteItem` and, stricter than AWS asks,
//!   the item-level action of each part too.
//! - [`Deployment`]: a template's parameters, resources and attributes as
//!   one deployment has them; [`Deployment::statements`] resolves a
//!   function's `Policies` (inline statements, and managed policies the
//!   deployment knows by ARN) under it.
//! - [`allowed`]: IAM's evaluation for what these policies use: an explicit
//!   deny wins, then any allow whose action, resource and conditions match.
//!   A condition operator or key the audit does not know fails the test
//!   instead of passing it.

use serde_json::Value as Json;
use serde_yaml::Value;
use shardkeeper_local::LoggedRequest;
use std::collections::BTreeMap;

/// The service a client speaks (the service prefix of its actions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    DynamoDb,
    DynamoDbStreams,
    Kinesis,
    Lambda,
}

/// One action on one resource, as IAM authorizes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Need {
    /// `service:Action`.
    pub action: String,
    /// The resource's ARN (`*` for actions on no resource).
    pub resource: String,
    /// The partition keys the action touches (`dynamodb:LeadingKeys`).
    pub leading_keys: Vec<String>,
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} on {}", self.action, self.resource)?;
        if !self.leading_keys.is_empty() {
            write!(f, " (pk {})", self.leading_keys.join(", "))?;
        }
        Ok(())
    }
}

/// Where requests that name no ARN point: the account and region of the
/// deployment, and the streams a shard iterator belongs to.
#[derive(Debug, Clone)]
pub struct Place {
    pub partition: String,
    pub region: String,
    pub account: String,
    /// The Kinesis stream a `GetRecords` by iterator reads.
    pub kinesis_stream: Option<String>,
    /// The DynamoDB stream a `GetRecords` by iterator reads.
    pub table_stream: Option<String>,
}

impl Place {
    /// The partition, region and account of `stream_arn`.
    pub fn of(stream_arn: &str) -> Place {
        let parts: Vec<&str> = stream_arn.split(':').collect();
        Place {
            partition: parts[1].to_owned(),
            region: parts[3].to_owned(),
            account: parts[4].to_owned(),
            kinesis_stream: Some(stream_arn.to_owned()),
            table_stream: None,
        }
    }

    fn arn(&self, service: &str, resource: &str) -> String {
        format!(
            "arn:{}:{service}:{}:{}:{resource}",
            self.partition, self.region, self.account
        )
    }

    /// A DynamoDB table's ARN.
    pub fn table_arn(&self, table: &str) -> String {
        self.arn("dynamodb", &format!("table/{table}"))
    }

    /// A Kinesis stream's ARN.
    pub fn stream_arn(&self, stream: &str) -> String {
        self.arn("kinesis", &format!("stream/{stream}"))
    }
}

fn str_at<'a>(v: &'a Json, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_str()
}

/// The partition key of a DynamoDB key or item in request JSON.
fn pk(key: &Json) -> Vec<String> {
    str_at(key, &["pk", "S"])
        .map(|s| vec![s.to_owned()])
        .unwrap_or_default()
}

/// The partition key value a Query's key condition binds `pk` to.
fn query_pk(body: &Json) -> Vec<String> {
    let Some(expr) = body["KeyConditionExpression"].as_str() else {
        return Vec::new();
    };
    let names = &body["ExpressionAttributeNames"];
    let tokens: Vec<&str> = expr.split_whitespace().collect();
    tokens
        .windows(3)
        .filter(|w| w[1] == "=")
        .find(|w| w[0] == "pk" || names[w[0]].as_str() == Some("pk"))
        .and_then(|w| str_at(&body["ExpressionAttributeValues"], &[w[2], "S"]))
        .map(|s| vec![s.to_owned()])
        .unwrap_or_default()
}

/// The IAM actions a request needs.
pub fn needs(api: Api, request: &LoggedRequest, place: &Place) -> Vec<Need> {
    let body: Json = serde_json::from_slice(&request.body).unwrap_or(Json::Null);
    let op = request.operation.as_str();
    let need = |action: &str, resource: String, leading_keys: Vec<String>| Need {
        action: action.to_owned(),
        resource,
        leading_keys,
    };
    match api {
        Api::DynamoDb => {
            let table = |v: &Json| place.table_arn(v["TableName"].as_str().unwrap_or("?"));
            let action = |a: &str| format!("dynamodb:{a}");
            match op {
                "TransactWriteItems" => body["TransactItems"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|part| {
                        [
                            ("Put", "PutItem", "Item"),
                            ("Update", "UpdateItem", "Key"),
                            ("Delete", "DeleteItem", "Key"),
                            ("ConditionCheck", "ConditionCheckItem", "Key"),
                        ]
                        .into_iter()
                        .filter_map(|(kind, item_action, key)| {
                            let p = part.get(kind)?;
                            Some(need(&action(item_action), table(p), pk(&p[key])))
                        })
                        .collect::<Vec<_>>()
                    })
                    .collect(),
                "BatchWriteItem" | "BatchGetItem" => body["RequestItems"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .flat_map(|(name, parts)| {
                        let arn = place.table_arn(name);
                        let mut out = Vec::new();
                        if op == "BatchGetItem" {
                            for key in parts["Keys"].as_array().into_iter().flatten() {
                                out.push(need(&action(op), arn.clone(), pk(key)));
                            }
                            return out;
                        }
                        for part in parts.as_array().into_iter().flatten() {
                            let (item_action, key) = match part.get("PutRequest") {
                                Some(p) => ("PutItem", pk(&p["Item"])),
                                None => ("DeleteItem", pk(&part["DeleteRequest"]["Key"])),
                            };
                            out.push(need(&action(op), arn.clone(), key.clone()));
                            out.push(need(&action(item_action), arn.clone(), key));
                        }
                        out
                    })
                    .collect(),
                "GetItem" | "UpdateItem" | "DeleteItem" => {
                    vec![need(&action(op), table(&body), pk(&body["Key"]))]
                }
                "PutItem" => vec![need(&action(op), table(&body), pk(&body["Item"]))],
                "Query" => vec![need(&action(op), table(&body), query_pk(&body))],
                "ListTables" => vec![need(&action(op), "*".to_owned(), Vec::new())],
                _ => vec![need(&action(op), table(&body), Vec::new())],
            }
        }
        Api::DynamoDbStreams => {
            let stream = body["StreamArn"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| place.table_stream.clone())
                .unwrap_or_else(|| "?".to_owned());
            let resource = if op == "ListStreams" {
                match body["TableName"].as_str() {
                    Some(t) => format!("{}/stream/*", place.table_arn(t)),
                    None => "*".to_owned(),
                }
            } else {
                stream
            };
            vec![need(&format!("dynamodb:{op}"), resource, Vec::new())]
        }
        Api::Kinesis => {
            let stream = body["StreamARN"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| body["StreamName"].as_str().map(|n| place.stream_arn(n)));
            let resource = match (body["ConsumerARN"].as_str(), op) {
                (Some(consumer), _) => consumer.to_owned(),
                (None, "ListStreams") => "*".to_owned(),
                (None, "DescribeStreamConsumer" | "DeregisterStreamConsumer") => format!(
                    "{}/consumer/{}:*",
                    stream.clone().unwrap_or_default(),
                    body["ConsumerName"].as_str().unwrap_or("?")
                ),
                (None, _) => stream
                    .or_else(|| place.kinesis_stream.clone())
                    .unwrap_or_else(|| "?".to_owned()),
            };
            vec![need(&format!("kinesis:{op}"), resource, Vec::new())]
        }
        Api::Lambda => {
            let function = request
                .uri
                .split("/functions/")
                .nth(1)
                .and_then(|rest| rest.split('/').next())
                .unwrap_or("?")
                .replace("%3A", ":");
            let resource = if function.starts_with("arn:") {
                function
            } else {
                place.arn("lambda", &format!("function:{function}"))
            };
            let action = match op {
                "Invoke" => "lambda:InvokeFunction".to_owned(),
                other => format!("lambda:{other}"),
            };
            vec![need(&action, resource, Vec::new())]
        }
    }
}

/// One statement of a policy, resolved.
#[derive(Debug, Clone)]
pub struct Statement {
    pub allow: bool,
    pub actions: Vec<String>,
    pub resources: Vec<String>,
    /// (operator, key, values).
    pub conditions: Vec<(String, String, Vec<String>)>,
}

/// A template's parameters, resources and attributes as one deployment has
/// them: what `Ref`, `Fn::GetAtt`, `Fn::Sub` and `Fn::If` resolve to.
#[derive(Debug, Clone, Default)]
pub struct Deployment {
    /// Parameters given (the others take the template's defaults).
    pub parameters: BTreeMap<String, String>,
    /// `Ref` of resources and pseudo parameters.
    pub refs: BTreeMap<String, String>,
    /// `Fn::GetAtt` values, by `Resource.Attribute`.
    pub attributes: BTreeMap<String, String>,
    /// Managed policies by ARN: their statements.
    pub managed: BTreeMap<String, Vec<Statement>>,
}

impl Deployment {
    /// A deployment in `place` (the pseudo parameters set from it).
    pub fn in_place(place: &Place, stack: &str) -> Deployment {
        let mut d = Deployment::default();
        for (k, v) in [
            ("AWS::Partition", place.partition.as_str()),
            ("AWS::Region", place.region.as_str()),
            ("AWS::AccountId", place.account.as_str()),
            ("AWS::StackName", stack),
        ] {
            d.refs.insert(k.to_owned(), v.to_owned());
        }
        d
    }

    fn lookup(&self, template: &Value, name: &str) -> String {
        if let Some(v) = self.refs.get(name).or_else(|| self.parameters.get(name)) {
            return v.clone();
        }
        if let Some(v) = self.attributes.get(name) {
            return v.clone();
        }
        let param = &template["Parameters"][name];
        if !param.is_null() {
            return match &param["Default"] {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                other => panic!("parameter {name} without a default: {other:?}"),
            };
        }
        panic!("the deployment does not say what {name} is");
    }

    /// The value of condition `name` of `template`.
    fn condition(&self, template: &Value, name: &str) -> bool {
        let c = &template["Conditions"][name];
        assert!(!c.is_null(), "no condition {name}");
        self.truth(template, c)
    }

    fn truth(&self, template: &Value, v: &Value) -> bool {
        match v {
            Value::Tagged(t) => {
                let args = t.value.as_sequence();
                match t.tag.to_string().trim_start_matches('!') {
                    "Equals" => {
                        let a = args.unwrap();
                        self.resolve(template, &a[0]) == self.resolve(template, &a[1])
                    }
                    "Not" => !self.truth(template, &args.unwrap()[0]),
                    "And" => args.unwrap().iter().all(|a| self.truth(template, a)),
                    "Or" => args.unwrap().iter().any(|a| self.truth(template, a)),
                    "Condition" => self.condition(template, t.value.as_str().unwrap()),
                    other => panic!("condition function {other} unknown to the audit"),
                }
            }
            Value::Mapping(m) if m.contains_key("Condition") => {
                self.condition(template, m["Condition"].as_str().unwrap())
            }
            other => panic!("not a condition: {other:?}"),
        }
    }

    fn sub(&self, template: &Value, text: &str, vars: &BTreeMap<String, String>) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find('}').unwrap() + start;
            let name = &rest[start + 2..end];
            let value = match vars.get(name) {
                Some(v) => v.clone(),
                None => self.lookup(template, name),
            };
            out.push_str(&value);
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// `v` with its intrinsic functions resolved (`AWS::NoValue` as null).
    pub fn resolve(&self, template: &Value, v: &Value) -> Value {
        match v {
            Value::Tagged(t) => {
                let tag = t.tag.to_string();
                let tag = tag.trim_start_matches('!');
                let arg = &t.value;
                let text = |v: &Value| match self.resolve(template, v) {
                    Value::String(s) => s,
                    Value::Number(n) => n.to_string(),
                    other => panic!("{tag}: not text: {other:?}"),
                };
                match tag {
                    "Ref" if arg.as_str() == Some("AWS::NoValue") => Value::Null,
                    "Ref" => Value::String(self.lookup(template, arg.as_str().unwrap())),
                    "GetAtt" => Value::String(self.lookup(template, arg.as_str().unwrap())),
                    "Sub" => match arg {
                        Value::String(s) => Value::String(self.sub(template, s, &BTreeMap::new())),
                        Value::Sequence(parts) => {
                            let vars = parts[1]
                                .as_mapping()
                                .unwrap()
                                .iter()
                                .map(|(k, v)| (k.as_str().unwrap().to_owned(), text(v)))
                                .collect();
                            Value::String(self.sub(template, parts[0].as_str().unwrap(), &vars))
                        }
                        other => panic!("Sub of {other:?}"),
                    },
                    "If" => {
                        let a = arg.as_sequence().unwrap();
                        let branch = if self.condition(template, a[0].as_str().unwrap()) {
                            &a[1]
                        } else {
                            &a[2]
                        };
                        self.resolve(template, branch)
                    }
                    "Join" => {
                        let a = arg.as_sequence().unwrap();
                        let parts = self.resolve(template, &a[1]);
                        let parts: Vec<String> = parts
                            .as_sequence()
                            .unwrap()
                            .iter()
                            .map(|p| p.as_str().unwrap().to_owned())
                            .collect();
                        Value::String(parts.join(a[0].as_str().unwrap()))
                    }
                    "Split" => {
                        let a = arg.as_sequence().unwrap();
                        let whole = text(&a[1]);
                        Value::Sequence(
                            whole
                                .split(a[0].as_str().unwrap())
                                .map(|s| Value::String(s.to_owned()))
                                .collect(),
                        )
                    }
                    "Select" => {
                        let a = arg.as_sequence().unwrap();
                        let i = a[0].as_u64().unwrap() as usize;
                        self.resolve(template, &a[1]).as_sequence().unwrap()[i].clone()
                    }
                    other => panic!("intrinsic function {other} unknown to the audit"),
                }
            }
            Value::Sequence(items) => Value::Sequence(
                items
                    .iter()
                    .map(|i| self.resolve(template, i))
                    .filter(|i| !i.is_null())
                    .collect(),
            ),
            Value::Mapping(m) => Value::Mapping(
                m.iter()
                    .map(|(k, v)| (k.clone(), self.resolve(template, v)))
                    .filter(|(_, v)| !v.is_null())
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// The statements of a resolved policy document's `Statement`.
    pub fn document(&self, statements: &Value) -> Vec<Statement> {
        let list = |v: &Value| -> Vec<String> {
            match v {
                Value::String(s) => vec![s.clone()],
                Value::Sequence(items) => items
                    .iter()
                    .map(|i| i.as_str().unwrap().to_owned())
                    .collect(),
                Value::Null => Vec::new(),
                other => panic!("not a list of strings: {other:?}"),
            }
        };
        let statements = match statements {
            Value::Sequence(s) => s.clone(),
            one => vec![one.clone()],
        };
        statements
            .iter()
            .map(|s| {
                assert!(
                    s["NotAction"].is_null() && s["NotResource"].is_null(),
                    "NotAction/NotResource unknown to the audit: {s:?}"
                );
                let mut conditions = Vec::new();
                for (op, keys) in s["Condition"].as_mapping().into_iter().flatten() {
                    for (key, values) in keys.as_mapping().unwrap() {
                        conditions.push((
                            op.as_str().unwrap().to_owned(),
                            key.as_str().unwrap().to_owned(),
                            list(values),
                        ));
                    }
                }
                Statement {
                    allow: s["Effect"] == "Allow",
                    actions: list(&s["Action"]),
                    resources: list(&s["Resource"]),
                    conditions,
                }
            })
            .collect()
    }

    /// The statements of managed policy `resource` of `template` (an
    /// `AWS::IAM::ManagedPolicy`), resolved under this deployment.
    pub fn managed_policy(&self, template: &Value, resource: &str) -> Vec<Statement> {
        let r = &template["Resources"][resource];
        assert_eq!(r["Type"], "AWS::IAM::ManagedPolicy", "{resource}");
        let doc = self.resolve(template, &r["Properties"]["PolicyDocument"]);
        self.document(&doc["Statement"])
    }

    /// What function `name` of `template` is granted: its inline
    /// statements, and the managed policies it attaches (by a reference
    /// this deployment knows).
    pub fn statements(&self, template: &Value, name: &str) -> Vec<Statement> {
        let f = &template["Resources"][name];
        assert_eq!(f["Type"], "AWS::Serverless::Function", "{name}");
        let policies = self.resolve(template, &f["Properties"]["Policies"]);
        let mut out = Vec::new();
        for policy in policies.as_sequence().into_iter().flatten() {
            match policy {
                Value::String(arn) => match self.managed.get(arn) {
                    Some(statements) => out.extend(statements.iter().cloned()),
                    None => panic!("{name}: managed policy {arn} unknown to the audit"),
                },
                Value::Mapping(m) if m.contains_key("Statement") => {
                    out.extend(self.document(&policy["Statement"]))
                }
                other => panic!("{name}: a policy the audit cannot read: {other:?}"),
            }
        }
        out
    }
}

/// `text` matches `pattern` (`*` any run, `?` one character).
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn condition_holds(op: &str, key: &str, values: &[String], need: &Need) -> bool {
    let context: &[String] = match key {
        "dynamodb:LeadingKeys" => &need.leading_keys,
        other => panic!("condition key {other} unknown to the audit"),
    };
    let matches = |v: &String| -> bool {
        values.iter().any(|p| match op.rsplit(':').next().unwrap() {
            "StringLike" => glob(p, v),
            "StringEquals" => p == v,
            other => panic!("condition operator {other} unknown to the audit"),
        })
    };
    match op.split_once(':') {
        // No value in the request: true, as IAM evaluates it.
        Some(("ForAllValues", _)) => context.iter().all(matches),
        Some(("ForAnyValue", _)) => context.iter().any(matches),
        _ => panic!("single-valued operator {op} on multivalued key {key}"),
    }
}

fn statement_matches(s: &Statement, need: &Need) -> bool {
    let action = need.action.to_ascii_lowercase();
    s.actions
        .iter()
        .any(|a| glob(&a.to_ascii_lowercase(), &action))
        && s.resources.iter().any(|r| glob(r, &need.resource))
        && s.conditions
            .iter()
            .all(|(op, key, values)| condition_holds(op, key, values, need))
}

/// IAM's decision on `need` under `statements`: an explicit deny wins;
/// otherwise any allow grants it.
pub fn allowed(statements: &[Statement], need: &Need) -> bool {
    !statements
        .iter()
        .any(|s| !s.allow && statement_matches(s, need))
        && statements
            .iter()
            .any(|s| s.allow && statement_matches(s, need))
}

/// Each need not allowed by `statements`, once, as a line naming `who`.
pub fn denied(who: &str, statements: &[Statement], needs: &[Need]) -> Vec<String> {
    let mut out: Vec<String> = needs
        .iter()
        .filter(|n| !allowed(statements, n))
        .map(|n| format!("{who}: {n}"))
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_iam_matches() {
        assert!(glob(
            "arn:aws:kinesis:*:*:stream/s/consumer/g-*",
            "arn:aws:kinesis:r:1:stream/s/consumer/g-00:17"
        ));
        assert!(!glob(
            "arn:aws:kinesis:*:*:stream/s/consumer/g-*",
            "arn:aws:kinesis:r:1:stream/s/consumer/h-00:17"
        ));
        assert!(glob("g#*", "g#s#3") && !glob("g#*", "g-esm#s"));
        assert!(glob("a?c", "abc") && !glob("a?c", "abbc"));
    }
}
