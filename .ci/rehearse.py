#!/usr/bin/env python3
"""Deploy rehearsal of the control plane without an AWS account.

Run by .ci/rehearse, which installs the packages and starts a moto server
with IAM enforcement on. This helper

1. translates the SAM template to plain CloudFormation with SAM's own
   translator (offline; local CodeUri / Location become S3 locations on
   the moto server);
2. removes what moto's CloudFormation cannot create, saying what and why,
   and creates the stack on moto;
3. repairs what moto's CloudFormation leaves out of the functions' roles
   (managed policies are not attached; inline policies are stored in a form
   its own IAM check cannot read), saying so;
4. for every function of FUNCTIONS takes its role's credentials (sts
   AssumeRole on moto) and replays the calls of CALLS below with them.

Two verdicts per call:

* "policy": the role's policies as CloudFormation resolved them on moto
  (real table, stream, consumer and function ARNs), evaluated here the way
  IAM evaluates identity policies: the IAM actions the API call is
  authorized as (a TransactWriteItems by its parts' actions, e.g.
  dynamodb:ConditionCheckItem; Invoke as lambda:InvokeFunction), on the
  resource ARN, with the request's condition keys (dynamodb:LeadingKeys,
  dynamodb:EnclosingOperation). This verdict decides the exit status.
* "moto": what moto answered to the call made with the role's credentials.
  moto 5.2 checks the API action name only, against the resource "*", and
  ignores conditions (moto/iam/access_control.py), so a policy scoped to
  ARNs is denied there whatever it grants; the column is shown for what it
  is, and a call moto denies is run again with administrator credentials to
  show that it runs on the deployed resources.

Exit status: 0 when every call is allowed by the policies (and every call
marked expect="denied" is denied), 1 when not, 2 when the rehearsal itself
failed (translation, stack creation, or a call that does not run on moto
even as administrator).

What it cannot show: the alarms and the schedules (moto's CloudFormation
has no model for AWS::CloudWatch::Alarm nor AWS::Scheduler::Schedule, so
they are left out, and nothing checks that they would deploy), properties
moto ignores (e.g. Lambda Architectures and LoggingConfig), service-side
validation of names and values, and anything IAM checks beyond identity
policies (resource policies, SCPs, KMS key policies, the scheduler's
invoke permission at run time). That the calls list is complete is up
to the table below: it is not derived from the code.
"""

from __future__ import annotations

import argparse
import ast
import copy
import io
import json
import re
import sys
import time
import zipfile
from dataclasses import dataclass, field

# --------------------------------------------------------------------------
# The functions and the calls they make. Extend here.
#
# FUNCTIONS: the function's name in the table -> its logical id in the
# template (the rehearsal takes the role of that AWS::Serverless::Function).
#
# CALLS: one Call per API call a function makes.
#   fn        the function (a key of FUNCTIONS)
#   service   boto3 client name
#   op        the API operation (boto3 method in CamelCase)
#   request   its parameters; placeholders are filled from the deployed
#             stack: {table} {table_arn} {stream} {stream_arn} {group}
#             {pk} (the group's partition key, <group>#<stream>) {other_pk}
#             (another group's) {worker} {worker_arn} (WorkerFunctionName)
#             {consumer_arn} (an EFO consumer <group>-00 of the stream, as
#             moto names it) {consumer_arn_aws} (the same as AWS names it,
#             ending in :<timestamp>) {region} {account} {partition}
#   authz     what IAM authorizes the call as: (IAM action, resource ARN,
#             condition-key context) for each part; a TransactWriteItems
#             is authorized by each part's own action, never by a
#             "TransactWriteItems" action (DynamoDB developer guide, "Using
#             IAM with DynamoDB transactions").
#   where     the code that makes it (for the reader)
#   expect    "allowed" (default): the function needs it; "denied": the
#             role must not grant it (a check of the policy's scoping)
# --------------------------------------------------------------------------

FUNCTIONS = {
    "lease-rebalancer": "LeaseRebalancer",
    "heartbeat-reaper": "HeartbeatReaper",
}

LEADING = {"dynamodb:LeadingKeys": ["{pk}"]}
IN_TX = {"dynamodb:LeadingKeys": ["{pk}"], "dynamodb:EnclosingOperation": ["TransactWriteItems"]}


@dataclass
class Call:
    fn: str
    service: str
    op: str
    request: dict
    authz: list  # [(action, resource, context)]
    where: str = ""
    expect: str = "allowed"  # "denied": a call the role must not be granted
    note: str = ""  # shown beside the API call


def state_table_calls(fn: str) -> list[Call]:
    key = {"pk": {"S": "{pk}"}, "sk": {"S": "lease#shardId-000000000000"}}
    key2 = {"pk": {"S": "{pk}"}, "sk": {"S": "consumer#rehearsal"}}
    return [
        Call(fn, "dynamodb", "DescribeTable", {"TableName": "{table}"},
             [("dynamodb:DescribeTable", "{table_arn}", {})],
             "state-store table.rs"),
        Call(fn, "dynamodb", "Query",
             {"TableName": "{table}", "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :p)",
              "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
              "ExpressionAttributeValues": {":pk": {"S": "{pk}"}, ":p": {"S": "lease#"}}},
             [("dynamodb:Query", "{table_arn}", LEADING)],
             "state-store store.rs query_key"),
        Call(fn, "dynamodb", "GetItem", {"TableName": "{table}", "Key": key, "ConsistentRead": True},
             [("dynamodb:GetItem", "{table_arn}", LEADING)],
             "state-store store.rs"),
        Call(fn, "dynamodb", "UpdateItem",
             {"TableName": "{table}", "Key": key2, "UpdateExpression": "SET #hb = :now",
              "ExpressionAttributeNames": {"#hb": "heartbeat"},
              "ExpressionAttributeValues": {":now": {"N": "1"}}, "ReturnValues": "ALL_NEW"},
             [("dynamodb:UpdateItem", "{table_arn}", LEADING)],
             "state-store store.rs"),
        Call(fn, "dynamodb", "DeleteItem", {"TableName": "{table}", "Key": key2},
             [("dynamodb:DeleteItem", "{table_arn}", LEADING)],
             "state-store store.rs"),
        Call(fn, "dynamodb", "BatchWriteItem",
             {"RequestItems": {"{table}": [{"DeleteRequest": {"Key": key}}, {"DeleteRequest": {"Key": key2}}]}},
             [("dynamodb:BatchWriteItem", "{table_arn}", LEADING)],
             "state-store stream.rs"),
        Call(fn, "dynamodb", "TransactWriteItems",
             {"TransactItems": [
                 {"ConditionCheck": {"TableName": "{table}", "Key": key2,
                                     "ConditionExpression": "attribute_not_exists(#o) OR #o = :me",
                                     "ExpressionAttributeNames": {"#o": "owner"},
                                     "ExpressionAttributeValues": {":me": {"S": "rehearsal"}}}},
                 {"Update": {"TableName": "{table}", "Key": key, "UpdateExpression": "SET #o = :me",
                             "ExpressionAttributeNames": {"#o": "owner"},
                             "ExpressionAttributeValues": {":me": {"S": "rehearsal"}}}}]},
             [("dynamodb:ConditionCheckItem", "{table_arn}", IN_TX),
              ("dynamodb:UpdateItem", "{table_arn}", IN_TX)],
             "state-store store.rs tx_check + transact, checkpoint.rs"),
        # Scoping: another group's items are out of reach (the state
        # policy's dynamodb:LeadingKeys condition).
        Call(fn, "dynamodb", "GetItem",
             {"TableName": "{table}", "Key": {"pk": {"S": "{other_pk}"}, "sk": {"S": "lease#shardId-000000000000"}}},
             [("dynamodb:GetItem", "{table_arn}", {"dynamodb:LeadingKeys": ["{other_pk}"]})],
             "state-store scoping", expect="denied", note="another group's item"),
    ]


CALLS: list[Call] = [
    *state_table_calls("lease-rebalancer"),
    Call("lease-rebalancer", "kinesis", "DescribeStreamSummary", {"StreamName": "{stream}"},
         [("kinesis:DescribeStreamSummary", "{stream_arn}", {})], "state-store stream.rs"),
    Call("lease-rebalancer", "kinesis", "ListShards", {"StreamName": "{stream}"},
         [("kinesis:ListShards", "{stream_arn}", {})], "consumer/reads/discovery.rs"),
    Call("lease-rebalancer", "lambda", "Invoke",
         {"FunctionName": "{worker}", "InvocationType": "Event", "Payload": b"{}"},
         [("lambda:InvokeFunction", "{worker_arn}", {})], "functions/fleet.rs"),
    *state_table_calls("heartbeat-reaper"),
    Call("heartbeat-reaper", "kinesis", "DescribeStreamSummary", {"StreamName": "{stream}"},
         [("kinesis:DescribeStreamSummary", "{stream_arn}", {})], "state-store stream.rs"),
    Call("heartbeat-reaper", "kinesis", "DeregisterStreamConsumer", {"ConsumerARN": "{consumer_arn}"},
         [("kinesis:DeregisterStreamConsumer", "{consumer_arn_aws}", {})], "state-store efo.rs"),
]

# --------------------------------------------------------------------------

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
BUCKET = "rehearse-artifacts"


def say(msg: str = "") -> None:
    print(msg, flush=True)


class RehearsalError(Exception):
    pass


# ------------------------------------------------------------ 1. translate

def translate(path: str) -> dict:
    """SAM -> CloudFormation with SAM's translator, offline."""
    import os

    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse

    with open(path) as f:
        tpl = yaml_parse(f.read())
    for name, res in tpl.get("Resources", {}).items():
        props = res.get("Properties") or {}
        if res.get("Type") == "AWS::Serverless::Function":
            uri = props.get("CodeUri")
            if isinstance(uri, str) and not uri.startswith("s3://"):
                props["CodeUri"] = f"s3://{BUCKET}/{name}.zip"
        if res.get("Type") == "AWS::Serverless::Application":
            loc = props.get("Location")
            if isinstance(loc, str):
                props["Location"] = f"https://s3.amazonaws.com/{BUCKET}/{name}.template.json"

    class ManagedPolicies:
        # Only needed for policies named by name in a function's Policies.
        def load(self) -> dict:
            return {}

    return transform(tpl, {}, ManagedPolicies(), passthrough_metadata=True)


# ------------------------------------------------------------ 2. what moto can create

REMOVED_PREFIX = "rehearsal-removed-"


def for_moto(cfn: dict) -> tuple[dict, dict[str, str]]:
    """The template with the resources moto's CloudFormation has no model
    for taken out, and every reference to them replaced by a placeholder
    string; plus outputs that let the rehearsal read each role's
    ManagedPolicyArns as resolved (moto does not attach them)."""
    from moto.cloudformation.parsing import NULL_MODELS, get_model_map

    supported = set(get_model_map()) | set(NULL_MODELS)
    tpl = copy.deepcopy(cfn)
    removed = {k: r["Type"] for k, r in tpl["Resources"].items()
               if r["Type"] not in supported and not r["Type"].startswith("Custom::")}
    for k in removed:
        del tpl["Resources"][k]

    def placeholder(name: str, attr: str | None = None) -> str:
        return REMOVED_PREFIX + name + (f".{attr}" if attr else "")

    def sub(s: str) -> str:
        def rep(m: re.Match) -> str:
            name, _, attr = m.group(1).partition(".")
            return placeholder(name, attr or None) if name in removed else m.group(0)
        return re.sub(r"\$\{([A-Za-z0-9]+(?:\.[A-Za-z0-9.]+)?)\}", rep, s)

    def walk(x):
        if isinstance(x, dict):
            if set(x) == {"Ref"} and x["Ref"] in removed:
                return placeholder(x["Ref"])
            if set(x) == {"Fn::GetAtt"}:
                g = x["Fn::GetAtt"]
                g = g.split(".", 1) if isinstance(g, str) else g
                if g[0] in removed:
                    return placeholder(g[0], g[1])
            if set(x) == {"Fn::Sub"}:
                a = x["Fn::Sub"]
                return {"Fn::Sub": sub(a) if isinstance(a, str) else [sub(a[0]), walk(a[1])]}
            out = {}
            for k, v in x.items():
                if k == "DependsOn":
                    v = [d for d in ([v] if isinstance(v, str) else v) if d not in removed]
                    if not v:
                        continue
                out[k] = walk(v)
            return out
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    tpl = walk(tpl)
    outputs = tpl.setdefault("Outputs", {})
    for name, res in tpl["Resources"].items():
        if res["Type"] == "AWS::IAM::Role" and res.get("Properties", {}).get("ManagedPolicyArns"):
            cond = {"Condition": res["Condition"]} if "Condition" in res else {}
            outputs[f"RehearsalManagedPolicies{name}"] = {
                **cond, "Value": {"Fn::Join": [",", res["Properties"]["ManagedPolicyArns"]]}}
    return tpl, removed


# ------------------------------------------------------------ moto access

class Moto:
    def __init__(self, endpoint: str):
        import boto3
        import botocore.config

        self.endpoint = endpoint
        self.boto3 = boto3
        self.config = botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"})
        self.admin = None

    def client(self, service: str, creds: dict | None = None):
        creds = creds or self.admin
        return self.boto3.client(service, endpoint_url=self.endpoint, region_name=REGION,
                                 config=self.config, **creds)

    def api(self, path: str, body) -> None:
        import urllib.request

        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        req = urllib.request.Request(self.endpoint + path, data=data, method="POST",
                                     headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()

    def bootstrap_admin(self) -> None:
        # The server enforces IAM after its first INITIAL_NO_AUTH_ACTION_COUNT
        # (3) requests: these three make the administrator everything else
        # runs as.
        bootstrap = {"aws_access_key_id": "AKIAREHEARSALBOOTSTRAP", "aws_secret_access_key": "unused"}
        iam = self.client("iam", bootstrap)
        iam.create_user(UserName="rehearsal-admin")
        iam.put_user_policy(UserName="rehearsal-admin", PolicyName="admin", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="rehearsal-admin")["AccessKey"]
        self.admin = {"aws_access_key_id": key["AccessKeyId"], "aws_secret_access_key": key["SecretAccessKey"]}
        try:
            self.client("iam", bootstrap).list_users()
        except Exception as e:  # noqa: BLE001
            say(f"   IAM enforcement is on: an unknown access key is refused ({error_code(e)})")
        else:
            raise RehearsalError("the moto server does not enforce IAM (INITIAL_NO_AUTH_ACTION_COUNT unset?)")


def error_code(e: Exception) -> str:
    resp = getattr(e, "response", None)
    if resp:
        err = resp.get("Error", {})
        code = err.get("Code", "")
        msg = err.get("Message", "")
        m = re.search(r"<Code>([^<]+)</Code>", msg)
        if code in ("403", "400", "500") and m:
            code = m.group(1)
        return code or str(resp.get("ResponseMetadata", {}).get("HTTPStatusCode"))
    return type(e).__name__


def denied_action(e: Exception) -> str | None:
    resp = getattr(e, "response", None) or {}
    if resp.get("ResponseMetadata", {}).get("HTTPStatusCode") != 403:
        return None
    m = re.search(r"not authorized to perform: ([\w:*-]+)", resp.get("Error", {}).get("Message", ""))
    return m.group(1) if m else "?"


# ------------------------------------------------------------ 4. identity-policy evaluation

def glob(pattern: str, value: str, case: bool) -> bool:
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, value, 0 if case else re.IGNORECASE) is not None


def as_list(x) -> list:
    return x if isinstance(x, list) else [x]


class Undetermined(Exception):
    pass


STRING_OPS = {
    "StringEquals": lambda p, v: p == v,
    "StringEqualsIgnoreCase": lambda p, v: p.lower() == v.lower(),
    "StringLike": lambda p, v: glob(p, v, True),
    "ArnEquals": lambda p, v: glob(p, v, True),
    "ArnLike": lambda p, v: glob(p, v, True),
    "Bool": lambda p, v: str(p).lower() == str(v).lower(),
}
NEGATED = {"StringNotEquals": "StringEquals", "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
           "StringNotLike": "StringLike", "ArnNotEquals": "ArnEquals", "ArnNotLike": "ArnLike"}


def condition_holds(cond: dict, ctx: dict) -> bool:
    ctx = {k.lower(): v for k, v in ctx.items()}
    for op_full, keys in cond.items():
        qualifier, _, op = op_full.rpartition(":")
        if_exists = op.endswith("IfExists")
        op = op[: -len("IfExists")] if if_exists else op
        for key, expected in keys.items():
            expected = [str(v) for v in as_list(expected)]
            if any("${" in v for v in expected):
                raise Undetermined(f"policy variable in condition {op_full} {key}")
            values = ctx.get(key.lower())
            if op == "Null":
                if (values is None) != (expected[0].lower() == "true"):
                    return False
                continue
            negate = op in NEGATED
            base = NEGATED.get(op, op)
            if base not in STRING_OPS:
                raise Undetermined(f"condition operator {op_full} not evaluated here")
            if values is None:
                if key.lower().startswith("aws:") or key.lower() not in KNOWN_KEYS:
                    raise Undetermined(f"condition key {key} not modelled by the rehearsal")
                if qualifier == "ForAllValues" or if_exists:
                    continue  # ForAllValues with no value (and ...IfExists) hold
                return False
            values = [str(v) for v in as_list(values)]

            def one(v: str) -> bool:
                hit = any(STRING_OPS[base](p, v) for p in expected)
                return not hit if negate else hit

            if qualifier == "ForAllValues":
                ok = all(one(v) for v in values)
            elif qualifier == "ForAnyValue":
                ok = any(one(v) for v in values)
            elif len(values) == 1:
                ok = one(values[0])
            else:
                raise Undetermined(f"multi-valued key {key} under {op_full} without a set operator")
            if not ok:
                return False
    return True


# Condition keys the rehearsal knows for the calls it makes; a policy
# conditioned on another key is reported undetermined (not guessed).
KNOWN_KEYS = {"dynamodb:leadingkeys", "dynamodb:enclosingoperation"}


def statement_applies(st: dict, action: str, resource: str, ctx: dict) -> bool:
    if "Action" in st:
        if not any(glob(p, action, False) for p in as_list(st["Action"])):
            return False
    elif "NotAction" in st:
        if any(glob(p, action, False) for p in as_list(st["NotAction"])):
            return False
    if "Resource" in st:
        if not any(glob(p, resource, True) for p in as_list(st["Resource"])):
            return False
    elif "NotResource" in st:
        if any(glob(p, resource, True) for p in as_list(st["NotResource"])):
            return False
    if "Condition" in st:
        return condition_holds(st["Condition"], ctx)
    return True


def evaluate(policies: list[tuple[str, dict]], action: str, resource: str, ctx: dict) -> tuple[str, str]:
    """IAM's evaluation of identity policies alone (no permissions boundary,
    session policy, SCP or resource policy, none of which the stack sets):
    an explicit Deny wins, else an Allow, else implicitly denied."""
    allowed_by, undetermined = None, None
    for name, doc in policies:
        for st in as_list(doc.get("Statement", [])):
            try:
                applies = statement_applies(st, action, resource, ctx)
            except Undetermined as u:
                undetermined = f"{name}: {u}"
                continue
            if applies and st.get("Effect") == "Deny":
                return "denied", f"explicit Deny in {name}"
            if applies and st.get("Effect") == "Allow":
                allowed_by = name
    if allowed_by:
        return "allowed", f"by {allowed_by}"
    if undetermined:
        return "undetermined", undetermined
    return "denied", "no statement allows it"


def self_check() -> int:
    """The evaluator on known cases (IAM's documented semantics)."""
    t = "arn:aws:dynamodb:us-east-1:123456789012:table/T"
    scoped = {"Statement": [{"Effect": "Allow", "Action": ["dynamodb:GetItem", "dynamodb:DescribeTable"],
                             "Resource": t,
                             "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["g#*"]}}}]}
    cases = [
        (scoped, "dynamodb:GetItem", t, {"dynamodb:LeadingKeys": ["g#s"]}, "allowed"),
        (scoped, "dynamodb:GetItem", t, {"dynamodb:LeadingKeys": ["h#s"]}, "denied"),
        (scoped, "dynamodb:GetItem", t, {"dynamodb:LeadingKeys": ["g#s", "h#s"]}, "denied"),
        (scoped, "dynamodb:DescribeTable", t, {}, "allowed"),  # ForAllValues of no value holds
        (scoped, "DynamoDB:getitem", t, {"dynamodb:LeadingKeys": ["g#s"]}, "allowed"),  # actions: any case
        (scoped, "dynamodb:GetItem", t + "2", {"dynamodb:LeadingKeys": ["g#s"]}, "denied"),
        (scoped, "dynamodb:ConditionCheckItem", t, {"dynamodb:LeadingKeys": ["g#s"]}, "denied"),
        ({"Statement": [{"Effect": "Allow", "Action": "dynamodb:*", "Resource": "*"},
                        {"Effect": "Deny", "Action": "dynamodb:GetItem", "Resource": t}]},
         "dynamodb:GetItem", t, {}, "denied"),
        ({"Statement": [{"Effect": "Allow", "NotAction": "kinesis:*", "Resource": "arn:aws:dynamodb:*"}]},
         "dynamodb:GetItem", t, {}, "allowed"),
        ({"Statement": {"Effect": "Allow", "Action": "kinesis:DeregisterStreamConsumer",
                        "Resource": "arn:aws:kinesis:us-east-1:1:stream/s/consumer/g-*"}},
         "kinesis:DeregisterStreamConsumer", "arn:aws:kinesis:us-east-1:1:stream/s/consumer/g-00:17", {},
         "allowed"),
        ({"Statement": [{"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": t,
                         "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}]},
         "dynamodb:GetItem", t, {}, "undetermined"),
    ]
    bad = 0
    for doc, action, resource, ctx, want in cases:
        got, why = evaluate([("case", doc)], action, resource, ctx)
        if got != want:
            bad += 1
            say(f"   evaluator self-check: {action} on {resource} with {ctx}: {got} ({why}), expected {want}")
    return bad


def parse_doc(doc) -> dict:
    """A policy document as moto's IAM returns it: JSON, or (for inline
    policies created by its CloudFormation) a Python dict's repr."""
    if isinstance(doc, dict):
        return doc
    try:
        return json.loads(doc)
    except ValueError:
        return ast.literal_eval(doc)


# ------------------------------------------------------------ the rehearsal

@dataclass
class Row:
    fn: str
    call: str
    action: str
    resource: str
    policy: str
    why: str
    moto: str = ""
    runs: str = ""
    expect: str = "allowed"
    ctx: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.policy == self.expect


@dataclass
class Result:
    rows: list = field(default_factory=list)
    broken: list = field(default_factory=list)


def fill(x, values: dict):
    if isinstance(x, str):
        return x.format_map(values) if "{" in x else x
    if isinstance(x, dict):
        return {fill(k, values): fill(v, values) for k, v in x.items()}
    if isinstance(x, list):
        return [fill(v, values) for v in x]
    return x


def snake(op: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", op).lower()


def run(args) -> int:
    started = time.monotonic()
    moto = Moto(args.endpoint)

    if self_check():
        raise RehearsalError("the policy evaluator fails its own cases")
    say(f"== 1. translate {args.template} (SAM translator, offline)")
    cfn = translate(args.template)
    params_declared = cfn.get("Parameters", {})
    params = dict(p.split("=", 1) for p in args.param)
    stack = args.stack_name
    if "WorkerFunctionName" in params_declared and "WorkerFunctionName" not in params:
        # As examples/consumer-app passes it: the rebalancer then has its
        # lambda:InvokeFunction statement and starts workers.
        params["WorkerFunctionName"] = f"{stack}-shard-worker"
    for k, v in params.items():
        if k not in params_declared:
            raise RehearsalError(f"the template has no parameter {k}")
    say(f"   {len(cfn['Resources'])} resources; parameters given: "
        + (", ".join(f"{k}={v}" for k, v in params.items()) or "none")
        + "; the rest take their defaults")
    types: dict[str, int] = {}
    for r in cfn["Resources"].values():
        types[r["Type"]] = types.get(r["Type"], 0) + 1
    for t, n in sorted(types.items()):
        say(f"     {n} x {t}")

    say("== 2. create the stack on moto")
    tpl, removed = for_moto(cfn)
    for name, typ in removed.items():
        say(f"   left out {name} ({typ}): moto's CloudFormation has no model for {typ}; "
            f"references to it read '{REMOVED_PREFIX}{name}'")
    moto.bootstrap_admin()
    s3 = moto.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as z:
        z.writestr("bootstrap", "#!/bin/sh\nexit 1\n")
    for name, r in tpl["Resources"].items():
        c = (r.get("Properties") or {}).get("Code") or {}
        if r["Type"] == "AWS::Lambda::Function" and c.get("S3Bucket") == BUCKET:
            s3.put_object(Bucket=BUCKET, Key=c["S3Key"], Body=code.getvalue())
    cf = moto.client("cloudformation")
    try:
        cf.create_stack(StackName=stack, TemplateBody=json.dumps(tpl),
                        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
                        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"])
    except Exception as e:  # noqa: BLE001
        raise RehearsalError(f"CreateStack failed: {e}") from e
    for _ in range(120):
        st = cf.describe_stacks(StackName=stack)["Stacks"][0]
        if not st["StackStatus"].endswith("_IN_PROGRESS"):
            break
        time.sleep(0.5)
    say(f"   stack {stack}: {st['StackStatus']}" + (f" ({st['StackStatusReason']})" if st.get("StackStatusReason") else ""))
    if st["StackStatus"] != "CREATE_COMPLETE":
        for ev in cf.describe_stack_events(StackName=stack)["StackEvents"][::-1]:
            say(f"     {ev['LogicalResourceId']} {ev['ResourceStatus']} {ev.get('ResourceStatusReason', '')}")
        raise RehearsalError("the stack was not created")
    physical = {}
    for r in cf.list_stack_resources(StackName=stack)["StackResourceSummaries"]:
        physical[r["LogicalResourceId"]] = r["PhysicalResourceId"]
        say(f"     {r['LogicalResourceId']:34} {r['ResourceType']:30} {r['ResourceStatus']}")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in st.get("Outputs", [])}

    say("== 3. the functions' roles as moto holds them")
    iam = moto.client("iam")
    role_policies: dict[str, list[tuple[str, dict]]] = {}
    roles: dict[str, str] = {}
    for fn, logical in FUNCTIONS.items():
        fres = tpl["Resources"].get(logical)
        if not fres:
            raise RehearsalError(f"the template has no function {logical}")
        role_ref = fres["Properties"]["Role"]
        role_logical = role_ref["Fn::GetAtt"][0] if isinstance(role_ref, dict) and "Fn::GetAtt" in role_ref else None
        if role_logical not in physical:
            raise RehearsalError(f"{logical}'s role is not a role of this stack: {role_ref}")
        role = roles[fn] = physical[role_logical]
        pols: list[tuple[str, dict]] = []
        for pname in iam.list_role_policies(RoleName=role)["PolicyNames"]:
            doc = parse_doc(iam.get_role_policy(RoleName=role, PolicyName=pname)["PolicyDocument"])
            pols.append((f"inline {pname}", doc))
            # moto's CloudFormation stores the document unserialised, which
            # its own IAM check cannot read (KeyError 'policy_document' in
            # moto/iam/access_control.py IAMPolicy); and its PutRolePolicy
            # wants a Version, which SAM's generated policies do not carry.
            fixed = dict(doc)
            fixed.setdefault("Version", "2012-10-17")
            iam.put_role_policy(RoleName=role, PolicyName=pname, PolicyDocument=json.dumps(fixed))
            say(f"   {fn}: inline policy {pname} stored again as JSON"
                + ("" if "Version" in doc else " (with Version 2012-10-17 added for moto)"))
        arns = [a for a in outputs.get(f"RehearsalManagedPolicies{role_logical}", "").split(",") if a]
        for arn in arns:
            # moto's CloudFormation ignores AWS::IAM::Role ManagedPolicyArns.
            try:
                iam.attach_role_policy(RoleName=role, PolicyArn=arn)
                say(f"   {fn}: attached managed policy {arn} (moto's CloudFormation leaves ManagedPolicyArns out)")
            except Exception as e:  # noqa: BLE001
                raise RehearsalError(f"cannot attach {arn} to {role}: {error_code(e)}") from e
            pol = iam.get_policy(PolicyArn=arn)["Policy"]
            ver = iam.get_policy_version(PolicyArn=arn, VersionId=pol["DefaultVersionId"])["PolicyVersion"]
            pols.append((f"managed {arn.rsplit('/', 1)[-1]}", parse_doc(ver["Document"])))
        role_policies[fn] = pols
        if args.show_policies:
            for name, doc in pols:
                say(f"   {fn} {name}: {json.dumps(doc)}")

    say("== 4. scenario: what the calls need to exist")
    # Invoked functions run as no code on moto (no Docker).
    moto.api("/moto-api/config", {"lambda": {"use_docker": False}})
    values = {"region": REGION, "account": ACCOUNT, "partition": "aws"}
    table = outputs.get("StateTableName") or physical.get("StateTable")
    stream = outputs.get("StreamName") or physical.get("Stream")
    values["table"] = table
    values["table_arn"] = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}"
    values["stream"] = stream
    values["stream_arn"] = outputs.get("StreamArn") or f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/{stream}"
    group = outputs.get("ConsumerGroup") or params.get("ConsumerGroup") or params_declared.get("ConsumerGroup", {}).get("Default", "group")
    values["group"] = group
    values["pk"] = f"{group}#{stream}"
    values["other_pk"] = f"another-group#{stream}"
    worker = params.get("WorkerFunctionName") or f"{stack}-shard-worker"
    values["worker"] = worker
    values["worker_arn"] = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{worker}"
    lam = moto.client("lambda")
    any_role = iam.list_roles()["Roles"][0]["Arn"]
    lam.create_function(FunctionName=worker, Runtime="provided.al2023", Role=any_role, Handler="bootstrap",
                        Code={"ZipFile": code.getvalue()})
    say(f"   the application's shard worker {worker} (a stand-in function)")
    kin = moto.client("kinesis")
    consumer = kin.register_stream_consumer(StreamARN=values["stream_arn"], ConsumerName=f"{group}-00")["Consumer"]
    values["consumer_arn"] = consumer["ConsumerARN"]
    # AWS's consumer ARNs end in ":<creation timestamp>"; moto's do not.
    values["consumer_arn_aws"] = consumer["ConsumerARN"] + (
        "" if re.search(r":\d+$", consumer["ConsumerARN"]) else ":1700000000")
    say(f"   an EFO consumer of the group's pool: {consumer['ConsumerName']}")

    say("== 5. the calls, with each function's role credentials")
    sts = moto.client("sts")
    creds: dict[str, dict] = {}
    for fn, logical in FUNCTIONS.items():
        role_arn = iam.get_role(RoleName=roles[fn])["Role"]["Arn"]
        # moto's AssumeRole check fails with a 500 on a trust policy whose
        # principal is a service (lambda.amazonaws.com): TypeError in
        # moto/iam/access_control.py _check_principal. The role is assumed
        # with enforcement paused for that one request.
        moto.api("/moto-api/reset-auth", "inf")
        try:
            c = sts.assume_role(RoleArn=role_arn, RoleSessionName=f"rehearsal-{fn}")["Credentials"]
        finally:
            moto.api("/moto-api/reset-auth", "0")
        creds[fn] = {"aws_access_key_id": c["AccessKeyId"], "aws_secret_access_key": c["SecretAccessKey"],
                     "aws_session_token": c["SessionToken"]}
        say(f"   {fn}: assumed {role_arn.rsplit('/', 1)[-1]}")

    result = Result()
    for call in CALLS:
        if call.fn not in FUNCTIONS:
            raise RehearsalError(f"a call of an unknown function {call.fn}")
        request = fill(call.request, values)
        first = True
        # The moto verdict: the call made with the role's credentials.
        try:
            getattr(moto.client(call.service, creds[call.fn]), snake(call.op))(**request)
            moto_verdict, runs = "allowed", "yes"
        except Exception as e:  # noqa: BLE001
            d = denied_action(e)
            moto_verdict = f"denied ({d})" if d else f"error {error_code(e)}"
            runs = ""
        if not runs:
            try:
                getattr(moto.client(call.service), snake(call.op))(**request)
                runs = "yes (as admin)"
            except Exception as e:  # noqa: BLE001
                runs = f"NO: {error_code(e)}"
                result.broken.append(f"{call.fn} {call.service}:{call.op}: {e}")
        for action, resource, ctx in call.authz:
            resource = fill(resource, values)
            verdict, why = evaluate(role_policies[call.fn], action, resource, fill(ctx, values))
            label = f"{call.service}:{call.op}" + (f" ({call.note})" if call.note else "")
            result.rows.append(Row(call.fn, label if first else "",
                                   action, resource, verdict, why,
                                   moto_verdict if first else "", runs if first else "", call.expect,
                                   fill(ctx, values)))
            first = False

    say()
    print_table(result.rows)
    say()
    failing = [r for r in result.rows if not r.ok]
    say(f"{len(result.rows) - len(failing)} as expected, {len(failing)} not "
        f"(policy verdict; {len(result.rows)} authorizations of {len(CALLS)} calls of "
        f"{len(FUNCTIONS)} functions); {time.monotonic() - started:.1f} s")
    for r in failing:
        if r.expect == "allowed":
            say(f"MISSING: {r.fn} needs {r.action} on {r.resource}: {r.policy}, {r.why}")
        else:
            say(f"TOO BROAD: {r.fn} is granted {r.action} on {r.resource} "
                f"with {json.dumps(r.ctx)}, which it must not be: {r.policy} {r.why}")
    say("The 'moto' column is moto's own check of the call made with the role's credentials: "
        "it matches the API's action name against the resource '*' and ignores conditions, "
        "so it denies ARN-scoped grants and checks dynamodb:TransactWriteItems and lambda:Invoke "
        "instead of the actions IAM authorizes them as. The 'policy' column decides.")
    if result.broken:
        for b in result.broken:
            say(f"BROKEN: {b}")
        return 2
    return 1 if failing else 0


def short(arn: str) -> str:
    return re.sub(r"^arn:aws:[a-z0-9-]+:[a-z0-9-]*:\d{12}:", "", arn)


def print_table(rows: list[Row]) -> None:
    head = Row("function", "API call", "IAM action", "resource", "policy", "", "moto", "runs on moto")
    cols = [
        ("fn", "function"), ("call", "API call"), ("action", "IAM action"),
        ("resource", "resource"), ("policy", "policy"), ("moto", "moto"), ("runs", "runs on moto"),
    ]
    data = [[getattr(head, c) for c, _ in cols]]
    prev_fn = None
    for r in rows:
        line = [getattr(r, c) for c, _ in cols]
        line[3] = short(r.resource)
        line[4] = r.policy if r.expect == "allowed" else f"{r.policy} (must be denied)"
        if not r.ok:
            line[4] += "  <-- FAIL"
        if r.fn == prev_fn:
            line[0] = ""
        prev_fn = r.fn
        data.append(line)
    widths = [max(len(str(line[i])) for line in data) for i in range(len(cols))]
    for n, line in enumerate(data):
        say("  ".join(str(v).ljust(w) for v, w in zip(line, widths)).rstrip())
        if n == 0:
            say("  ".join("-" * w for w in widths))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", required=True, help="the moto server, e.g. http://127.0.0.1:5000")
    ap.add_argument("--template", required=True, help="the control plane's SAM template")
    ap.add_argument("--stack-name", default="rehearsal")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="a stack parameter (repeatable); WorkerFunctionName defaults to <stack>-shard-worker")
    ap.add_argument("--show-policies", action="store_true", help="print each role's policies as deployed")
    args = ap.parse_args()
    try:
        return run(args)
    except RehearsalError as e:
        say(f"REHEARSAL FAILED: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
