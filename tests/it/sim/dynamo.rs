//! The simulated DynamoDB: dynoxide's engine (`dynoxide::Database`) called
//! directly, one public method per operation, on the simulation's clock, in
//! the caller's task (no socket, no thread).
//!
//! Eventually consistent reads: DynamoDB documents that a read with
//! `ConsistentRead` false "might not reflect the results of a recently
//! completed write operation", and that consistency across all copies is
//! usually reached within a second (Developer Guide, "Read consistency").
//! DynamoDB keeps each partition on three storage nodes, and an eventually
//! consistent read may be served by any of them (Developer Guide, "Read
//! consistency"; "Partitions and data distribution"): two reads of two
//! keys, one after the other, may see the table at two moments, the later
//! read the earlier moment. Here two more engines, the replicas, each apply
//! the same successful writes in the same order, late and on their own: a
//! write is on a replica at most a second after it was applied, and any
//! prefix of the writes of the last second may be. A read without
//! `ConsistentRead` that the seed sends to a replica sees the table as it
//! was a moment ago on that replica, as DynamoDB's may.

use super::clock::{EngineClock, TimeLine};
use dynoxide::errors::DynoxideError;
use dynoxide::Database;
use shardkeeper::state::EpochMillis;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// How long a write may stay unseen by an eventually consistent read.
const LAG_MS: EpochMillis = 1_000;

/// How many replicas serve eventually consistent reads (the primary is the
/// third copy).
pub const REPLICAS: usize = 2;

/// The engines and the writes a replica has not applied yet.
pub struct Dynamo {
    primary: Database,
    replicas: Vec<Database>,
    line: TimeLine,
    log: Mutex<Log>,
}

/// Writes applied to the primary and not yet to every replica.
#[derive(Default)]
struct Log {
    /// When, the operation, its body; the first is write number `first`.
    writes: VecDeque<(EpochMillis, String, String)>,
    first: usize,
    /// How many writes each replica has applied.
    applied: [usize; REPLICAS],
}

/// What an operation answered: the status and the body.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Dynamo {
    /// Empty engines on `line`.
    pub fn new(line: TimeLine) -> Arc<Self> {
        let clock = Arc::new(EngineClock(line));
        let engine = || Database::memory_with_clock(clock.clone()).expect("engine");
        Arc::new(Dynamo {
            primary: engine(),
            replicas: (0..REPLICAS).map(|_| engine()).collect(),
            line,
            log: Mutex::new(Log::default()),
        })
    }

    /// Serves `operation` with `body`. `stale` (drawn by the seed, in
    /// 0..1): for a read without `ConsistentRead`, how much of the last
    /// second's writes the replica numbered `replica` still lacks (0: none,
    /// served as consistent).
    pub fn serve(&self, operation: &str, body: &str, stale: f64, replica: usize) -> Answer {
        if stale > 0.0 && reads_eventually(operation, body) {
            let replica = replica % REPLICAS;
            self.catch_up(replica, stale);
            return answer(dispatch(&self.replicas[replica], operation, body));
        }
        let result = dispatch(&self.primary, operation, body);
        if result.is_ok() && writes(operation) {
            if matches!(
                operation,
                "CreateTable" | "UpdateTable" | "DeleteTable" | "UpdateTimeToLive" | "TagResource"
            ) {
                // Tables are the same on every copy at once.
                for (i, replica) in self.replicas.iter().enumerate() {
                    self.catch_up(i, 0.0);
                    let _ = dispatch(replica, operation, body);
                }
            } else {
                self.log.lock().unwrap().writes.push_back((
                    self.line.now_millis(),
                    operation.to_owned(),
                    body.to_owned(),
                ));
            }
        }
        answer(result)
    }

    /// Applies to replica `replica` every write older than the lag, and of
    /// the newer ones all but the last `share` of them.
    fn catch_up(&self, replica: usize, share: f64) {
        let mut log = self.log.lock().unwrap();
        let now = self.line.now_millis();
        let end = log.first + log.writes.len();
        let recent = log
            .writes
            .iter()
            .rev()
            .take_while(|(at, _, _)| now - at < LAG_MS)
            .count();
        let keep = (recent as f64 * share).round() as usize;
        let target = end - keep;
        while log.applied[replica] < target {
            let (_, op, body) = &log.writes[log.applied[replica] - log.first];
            let _ = dispatch(&self.replicas[replica], op, body);
            log.applied[replica] += 1;
        }
        // What every replica has applied is kept no longer.
        let done = log.applied.iter().copied().min().unwrap_or(end);
        while log.first < done {
            log.writes.pop_front();
            log.first += 1;
        }
    }
}

fn answer(result: Result<String, DynoxideError>) -> Answer {
    match result {
        Ok(body) => Answer { status: 200, body },
        Err(e) => Answer {
            status: e.status_code(),
            body: e.to_json(),
        },
    }
}

/// Whether the operation may be served from the replica: a read that did
/// not ask for strong consistency.
fn reads_eventually(operation: &str, body: &str) -> bool {
    match operation {
        "GetItem" | "Query" | "Scan" => !body.contains("\"ConsistentRead\":true"),
        // BatchGetItem asks per table; the toolkit's ask for all or none.
        "BatchGetItem" => !body.contains("\"ConsistentRead\":true"),
        _ => false,
    }
}

/// Whether the operation changes the table.
fn writes(operation: &str) -> bool {
    matches!(
        operation,
        "PutItem"
            | "UpdateItem"
            | "DeleteItem"
            | "BatchWriteItem"
            | "TransactWriteItems"
            | "CreateTable"
            | "UpdateTable"
            | "DeleteTable"
            | "UpdateTimeToLive"
            | "TagResource"
    )
}

/// One operation on one engine, as its HTTP server would serve it.
fn dispatch(db: &Database, operation: &str, body: &str) -> Result<String, DynoxideError> {
    macro_rules! call {
        ($method:ident) => {{
            let request = serde_json::from_str(body)
                .map_err(|e| DynoxideError::SerializationException(e.to_string()))?;
            let response = db.$method(request)?;
            Ok(serde_json::to_string(&response).expect("a response serializes"))
        }};
    }
    match operation {
        "CreateTable" => call!(create_table),
        "DeleteTable" => call!(delete_table),
        "DescribeTable" => call!(describe_table),
        "ListTables" => call!(list_tables),
        "UpdateTable" => call!(update_table),
        "TagResource" => call!(tag_resource),
        "ListTagsOfResource" => call!(list_tags_of_resource),
        "PutItem" => call!(put_item),
        "GetItem" => call!(get_item),
        "DeleteItem" => call!(delete_item),
        "UpdateItem" => call!(update_item),
        "Query" => call!(query),
        "Scan" => call!(scan),
        "BatchGetItem" => call!(batch_get_item),
        "BatchWriteItem" => call!(batch_write_item),
        "TransactWriteItems" => call!(transact_write_items),
        "TransactGetItems" => call!(transact_get_items),
        "UpdateTimeToLive" => call!(update_time_to_live),
        "DescribeTimeToLive" => call!(describe_time_to_live),
        other => Err(DynoxideError::ValidationException(format!(
            "the simulation does not serve {other}"
        ))),
    }
}
