//! The simulated Kinesis: an in-memory model of the calls the toolkit and
//! the simulation's producer send (ListShards, DescribeStreamSummary,
//! GetShardIterator, GetRecords, PutRecord, PutRecords), served in the
//! caller's task as the AWS JSON 1.1 protocol carries them. Resharding
//! (split, merge) is done by the simulation directly.
//!
//! It models what the toolkit depends on, as the Kinesis API reference
//! documents it: sequence numbers that grow within a shard and across a
//! parent and its children; a closed shard's `EndingSequenceNumber`;
//! `GetRecords` at a closed shard's end answers no `NextShardIterator` and
//! the `ChildShards`; iterators expire five minutes after they were issued
//! (`ExpiredIteratorException`); `AT_TIMESTAMP` finds the first record that
//! arrived at or after the time; `MillisBehindLatest`. Records are kept for
//! the whole run (no retention trim).

use super::clock::TimeLine;
use base64_simd::STANDARD as B64;
use md5::{Digest, Md5};
use serde_json::{json, Value};
use shardkeeper::state::EpochMillis;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// How long an iterator stays valid: "A shard iterator expires 5 minutes
/// after it is returned to the requester" (GetShardIterator).
const ITERATOR_TTL_MS: EpochMillis = 300_000;

/// The largest hash key (2^128 - 1).
const MAX_HASH: u128 = u128::MAX;

/// One record in a shard.
#[derive(Debug, Clone)]
struct Rec {
    seq: u128,
    key: String,
    data: Vec<u8>,
    arrived: EpochMillis,
}

/// One shard.
#[derive(Debug, Clone)]
struct Shard {
    id: String,
    parent: Option<String>,
    adjacent: Option<String>,
    range: (u128, u128),
    start: u128,
    end: Option<u128>,
    records: Vec<Rec>,
}

/// One stream.
#[derive(Debug)]
struct Stream {
    name: String,
    created: EpochMillis,
    shards: Vec<Shard>,
}

/// Every stream, and the next sequence number (one counter for all: they
/// grow across parents and children, as Kinesis's do).
pub struct Kinesis {
    line: TimeLine,
    state: Mutex<State>,
}

struct State {
    streams: BTreeMap<String, Stream>,
    next_seq: u128,
}

/// What an operation answered: the status and the body.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

fn err(status: u16, kind: &str, message: &str) -> Answer {
    Answer {
        status,
        body: json!({ "__type": kind, "message": message }).to_string(),
    }
}

fn ok(v: Value) -> Answer {
    Answer {
        status: 200,
        body: v.to_string(),
    }
}

/// A sequence number as Kinesis writes it: a decimal string (56 digits).
fn seq_text(seq: u128) -> String {
    format!("49{seq:054}")
}

fn parse_seq(text: &str) -> Option<u128> {
    text.strip_prefix("49").and_then(|s| s.parse().ok())
}

/// Where a partition key goes: the MD5 of the key as a 128-bit number
/// ("Kinesis Data Streams uses MD5 to map partition keys to 128-bit
/// integer values", PutRecord).
fn hash_key(key: &str) -> u128 {
    u128::from_be_bytes(Md5::digest(key.as_bytes()).into())
}

impl Kinesis {
    /// No streams yet.
    pub fn new(line: TimeLine) -> Self {
        Kinesis {
            line,
            state: Mutex::new(State {
                streams: BTreeMap::new(),
                next_seq: 1_000,
            }),
        }
    }

    /// Creates `name` with `shards` shards of equal hash ranges, ACTIVE at once.
    pub fn create_stream(&self, name: &str, shards: u32) {
        let mut s = self.state.lock().unwrap();
        let width = MAX_HASH / shards as u128;
        let start = s.next_seq;
        let list = (0..shards)
            .map(|i| Shard {
                id: format!("shardId-{i:012}"),
                parent: None,
                adjacent: None,
                range: (
                    width * i as u128,
                    if i + 1 == shards {
                        MAX_HASH
                    } else {
                        width * (i as u128 + 1) - 1
                    },
                ),
                start,
                end: None,
                records: Vec::new(),
            })
            .collect();
        s.next_seq += 1;
        s.streams.insert(
            name.to_owned(),
            Stream {
                name: name.to_owned(),
                created: self.line.now_millis(),
                shards: list,
            },
        );
    }

    /// Every shard's parents, for the history's lineage.
    pub fn parents(&self, stream: &str) -> BTreeMap<String, Vec<String>> {
        let s = self.state.lock().unwrap();
        s.streams[stream]
            .shards
            .iter()
            .map(|sh| {
                let parents = sh.parent.iter().chain(&sh.adjacent).cloned().collect();
                (sh.id.clone(), parents)
            })
            .collect()
    }

    /// When each record of `stream` arrived, by its sequence number.
    pub fn arrivals(&self, stream: &str) -> std::collections::HashMap<String, EpochMillis> {
        let s = self.state.lock().unwrap();
        s.streams[stream]
            .shards
            .iter()
            .flat_map(|sh| sh.records.iter().map(|r| (seq_text(r.seq), r.arrived)))
            .collect()
    }

    /// Splits the open shard `which` (an index among the open shards) in two.
    pub fn split(&self, stream: &str, which: usize) {
        let mut s = self.state.lock().unwrap();
        let seq = s.next_seq;
        let st = s.streams.get_mut(stream).unwrap();
        let open: Vec<usize> = (0..st.shards.len())
            .filter(|&i| st.shards[i].end.is_none())
            .collect();
        let i = open[which % open.len()];
        let (lo, hi) = st.shards[i].range;
        if hi - lo < 2 {
            return;
        }
        st.shards[i].end = Some(seq);
        let parent = st.shards[i].id.clone();
        let mid = lo + (hi - lo) / 2;
        let n = st.shards.len();
        for (k, range) in [(lo, mid), (mid + 1, hi)].into_iter().enumerate() {
            st.shards.push(Shard {
                id: format!("shardId-{:012}", n + k),
                parent: Some(parent.clone()),
                adjacent: None,
                range,
                start: seq + 1,
                end: None,
                records: Vec::new(),
            });
        }
        s.next_seq = seq + 2;
    }

    /// Merges the open shard `which` with its open neighbour above, if any.
    pub fn merge(&self, stream: &str, which: usize) {
        let mut s = self.state.lock().unwrap();
        let seq = s.next_seq;
        let st = s.streams.get_mut(stream).unwrap();
        let mut open: Vec<usize> = (0..st.shards.len())
            .filter(|&i| st.shards[i].end.is_none())
            .collect();
        open.sort_by_key(|&i| st.shards[i].range.0);
        if open.len() < 2 {
            return;
        }
        let k = which % (open.len() - 1);
        let (a, b) = (open[k], open[k + 1]);
        st.shards[a].end = Some(seq);
        st.shards[b].end = Some(seq);
        let n = st.shards.len();
        let shard = Shard {
            id: format!("shardId-{n:012}"),
            parent: Some(st.shards[a].id.clone()),
            adjacent: Some(st.shards[b].id.clone()),
            range: (st.shards[a].range.0, st.shards[b].range.1),
            start: seq + 1,
            end: None,
            records: Vec::new(),
        };
        st.shards.push(shard);
        s.next_seq = seq + 2;
    }

    /// Serves one operation.
    pub fn serve(&self, operation: &str, body: &str) -> Answer {
        let Ok(req) = serde_json::from_str::<Value>(body) else {
            return err(400, "SerializationException", "not JSON");
        };
        let mut s = self.state.lock().unwrap();
        let now = self.line.now_millis();
        let name = req["StreamName"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| {
                req["StreamARN"]
                    .as_str()
                    .and_then(|a| a.rsplit('/').next())
                    .map(str::to_owned)
            })
            .or_else(|| {
                req["ShardIterator"]
                    .as_str()
                    .and_then(|t| t.split('|').nth(1))
                    .map(str::to_owned)
            });
        let Some(name) = name else {
            return err(400, "InvalidArgumentException", "no stream named");
        };
        let State { streams, next_seq } = &mut *s;
        let Some(stream) = streams.get_mut(&name) else {
            return err(
                400,
                "ResourceNotFoundException",
                &format!("Stream {name} not found"),
            );
        };
        match operation {
            "DescribeStreamSummary" => ok(json!({ "StreamDescriptionSummary": {
                "StreamName": stream.name,
                "StreamARN": arn(&stream.name),
                "StreamStatus": "ACTIVE",
                "StreamModeDetails": { "StreamMode": "PROVISIONED" },
                "RetentionPeriodHours": 24,
                "StreamCreationTimestamp": stream.created as f64 / 1000.0,
                "EnhancedMonitoring": [],
                "OpenShardCount": stream.shards.iter().filter(|s| s.end.is_none()).count(),
                "ConsumerCount": 0,
            }})),
            "ListShards" => list_shards(stream, &req),
            "GetShardIterator" => shard_iterator(stream, &req, now),
            "GetRecords" => get_records(stream, &req, now),
            "PutRecord" => {
                let (key, data) = (
                    req["PartitionKey"].as_str().unwrap_or_default(),
                    req["Data"].as_str().unwrap_or_default(),
                );
                let (shard, seq) = put(stream, next_seq, key, data, now);
                ok(json!({ "ShardId": shard, "SequenceNumber": seq_text(seq) }))
            }
            "PutRecords" => {
                let mut out = Vec::new();
                for r in req["Records"].as_array().into_iter().flatten() {
                    let (key, data) = (
                        r["PartitionKey"].as_str().unwrap_or_default(),
                        r["Data"].as_str().unwrap_or_default(),
                    );
                    let (shard, seq) = put(stream, next_seq, key, data, now);
                    out.push(json!({ "ShardId": shard, "SequenceNumber": seq_text(seq) }));
                }
                ok(json!({ "FailedRecordCount": 0, "Records": out }))
            }
            other => err(
                400,
                "UnknownOperationException",
                &format!("the simulation does not serve {other}"),
            ),
        }
    }
}

fn arn(stream: &str) -> String {
    format!("arn:aws:kinesis:us-east-1:000000000000:stream/{stream}")
}

fn shard_json(s: &Shard) -> Value {
    let mut v = json!({
        "ShardId": s.id,
        "HashKeyRange": {
            "StartingHashKey": s.range.0.to_string(),
            "EndingHashKey": s.range.1.to_string(),
        },
        "SequenceNumberRange": { "StartingSequenceNumber": seq_text(s.start) },
    });
    if let Some(end) = s.end {
        v["SequenceNumberRange"]["EndingSequenceNumber"] = json!(seq_text(end));
    }
    if let Some(p) = &s.parent {
        v["ParentShardId"] = json!(p);
    }
    if let Some(p) = &s.adjacent {
        v["AdjacentParentShardId"] = json!(p);
    }
    v
}

/// ListShards, a page of at most `MaxResults` (default 1,000) after the
/// `NextToken` or `ExclusiveStartShardId`.
fn list_shards(stream: &Stream, req: &Value) -> Answer {
    let after = req["NextToken"]
        .as_str()
        .or(req["ExclusiveStartShardId"].as_str())
        .map(str::to_owned);
    let max = req["MaxResults"].as_u64().unwrap_or(1_000) as usize;
    let rest: Vec<&Shard> = stream
        .shards
        .iter()
        .filter(|s| after.as_ref().is_none_or(|a| s.id > *a))
        .collect();
    let page: Vec<Value> = rest.iter().take(max).map(|s| shard_json(s)).collect();
    let mut out = json!({ "Shards": page });
    if rest.len() > max {
        out["NextToken"] = json!(rest[max - 1].id);
    }
    ok(out)
}

/// An iterator: the stream, the shard, the index of the next record and
/// when it was issued.
fn iterator(stream: &str, shard: &str, index: usize, issued: EpochMillis) -> String {
    format!("it|{stream}|{shard}|{index}|{issued}")
}

fn shard_iterator(stream: &Stream, req: &Value, now: EpochMillis) -> Answer {
    let id = req["ShardId"].as_str().unwrap_or_default();
    let Some(shard) = stream.shards.iter().find(|s| s.id == id) else {
        return err(
            400,
            "ResourceNotFoundException",
            &format!("Shard {id} not found"),
        );
    };
    let seq = req["StartingSequenceNumber"].as_str().and_then(parse_seq);
    let index = match req["ShardIteratorType"].as_str().unwrap_or_default() {
        "TRIM_HORIZON" => 0,
        "LATEST" => shard.records.len(),
        "AT_TIMESTAMP" => {
            let at = (req["Timestamp"].as_f64().unwrap_or(0.0) * 1000.0).round() as EpochMillis;
            shard
                .records
                .iter()
                .position(|r| r.arrived >= at)
                .unwrap_or(shard.records.len())
        }
        kind @ ("AT_SEQUENCE_NUMBER" | "AFTER_SEQUENCE_NUMBER") => {
            let Some(seq) = seq else {
                return err(
                    400,
                    "InvalidArgumentException",
                    "bad StartingSequenceNumber",
                );
            };
            if seq < shard.start || shard.end.is_some_and(|e| seq > e) {
                return err(
                    400,
                    "InvalidArgumentException",
                    &format!(
                        "StartingSequenceNumber {} is not in shard {id}",
                        seq_text(seq)
                    ),
                );
            }
            let after = kind == "AFTER_SEQUENCE_NUMBER";
            shard
                .records
                .iter()
                .position(|r| if after { r.seq > seq } else { r.seq >= seq })
                .unwrap_or(shard.records.len())
        }
        _ => return err(400, "InvalidArgumentException", "bad ShardIteratorType"),
    };
    ok(json!({ "ShardIterator": iterator(&stream.name, id, index, now) }))
}

fn get_records(stream: &Stream, req: &Value, now: EpochMillis) -> Answer {
    let token = req["ShardIterator"].as_str().unwrap_or_default();
    let parts: Vec<&str> = token.split('|').collect();
    let (Some(id), Some(index), Some(issued)) = (
        parts.get(2),
        parts.get(3).and_then(|i| i.parse::<usize>().ok()),
        parts.get(4).and_then(|i| i.parse::<EpochMillis>().ok()),
    ) else {
        return err(400, "InvalidArgumentException", "bad ShardIterator");
    };
    if now - issued > ITERATOR_TTL_MS {
        return err(
            400,
            "ExpiredIteratorException",
            &format!("Iterator expired. The iterator was created at time {issued} while right now it is {now} which is further in the future than the tolerated delay of 300000 milliseconds."),
        );
    }
    let Some(shard) = stream.shards.iter().find(|s| s.id == *id) else {
        return err(400, "ResourceNotFoundException", "shard not found");
    };
    let limit = req["Limit"].as_u64().unwrap_or(10_000) as usize;
    let records: Vec<&Rec> = shard.records.iter().skip(index).take(limit).collect();
    let next = index + records.len();
    let behind = shard
        .records
        .get(next)
        .map_or(0, |r| (now - r.arrived).max(0));
    let mut out = json!({
        "Records": records.iter().map(|r| json!({
            "SequenceNumber": seq_text(r.seq),
            "ApproximateArrivalTimestamp": r.arrived as f64 / 1000.0,
            "Data": B64.encode_to_string(&r.data),
            "PartitionKey": r.key,
        })).collect::<Vec<_>>(),
        "MillisBehindLatest": behind,
    });
    if shard.end.is_some() && next >= shard.records.len() {
        // At a closed shard's end: no next iterator, and its children.
        let children: Vec<Value> = stream
            .shards
            .iter()
            .filter(|c| c.parent.as_deref() == Some(id) || c.adjacent.as_deref() == Some(id))
            .map(|c| {
                json!({
                    "ShardId": c.id,
                    "ParentShards": c.parent.iter().chain(&c.adjacent).collect::<Vec<_>>(),
                    "HashKeyRange": {
                        "StartingHashKey": c.range.0.to_string(),
                        "EndingHashKey": c.range.1.to_string(),
                    },
                })
            })
            .collect();
        out["ChildShards"] = json!(children);
    } else {
        out["NextShardIterator"] = json!(iterator(&stream.name, id, next, now));
    }
    ok(out)
}

/// Appends a record to the open shard its key hashes to.
fn put(
    stream: &mut Stream,
    next_seq: &mut u128,
    key: &str,
    data_b64: &str,
    now: EpochMillis,
) -> (String, u128) {
    let h = hash_key(key);
    let shard = stream
        .shards
        .iter_mut()
        .find(|s| s.end.is_none() && s.range.0 <= h && h <= s.range.1)
        .expect("an open shard covers every hash key");
    let seq = *next_seq;
    *next_seq += 1;
    shard.records.push(Rec {
        seq,
        key: key.to_owned(),
        data: B64.decode_to_vec(data_b64).unwrap_or_default(),
        arrived: now,
    });
    (shard.id.clone(), seq)
}
