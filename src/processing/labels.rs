//! What puts a handler call's record on the lines the handler logs (shard,
//! sequence number, sub-sequence, partition key; for a batch handler's
//! call the shard, the first and last sequence numbers and the count):
//! - under the Powertools-shaped log lines of
//!   [`init_tracing`](crate::functions::init_tracing), a task-local value
//!   the line's formatter reads: a call costs a few reference counts, and
//!   the fields are written only into the lines the handler logs;
//! - under any other subscriber, a tracing span around the call (its
//!   fields recorded when it is made, as the subscriber does);
//! - nothing with [`ProcessingOptions::handler_spans`] off.

use crate::processing::options::ProcessingOptions;
use crate::processing::record::StreamRecord;
use futures_util::future::Either;
use serde_json::{Map, Value};
use std::future::Future;
use std::sync::Arc;
use tracing::Instrument;

tokio::task_local! {
    static CALL: CallLabels;
}

/// The record (or run of records) a handler call is given, as its log
/// lines name it.
#[derive(Debug, Clone)]
pub(crate) enum CallLabels {
    /// One record's call (`handle`).
    Record {
        shard: Arc<str>,
        sequence_number: Arc<str>,
        sub_sequence: u64,
        partition_key: Arc<str>,
    },
    /// A batch handler's call (`handle_batch`).
    Records {
        shard: Arc<str>,
        first_sequence_number: Arc<str>,
        last_sequence_number: Arc<str>,
        count: usize,
    },
}

impl CallLabels {
    /// The labels of a call with `record`.
    pub(crate) fn record(record: &StreamRecord) -> Self {
        CallLabels::Record {
            shard: record.shard_id.clone(),
            sequence_number: record.sequence_number.clone(),
            sub_sequence: record.sub_sequence,
            partition_key: record.partition_key.clone(),
        }
    }

    /// The labels of a batch handler's call with `records` (not empty).
    pub(crate) fn records(records: &[StreamRecord]) -> Self {
        CallLabels::Records {
            shard: records[0].shard_id.clone(),
            first_sequence_number: records[0].sequence_number.clone(),
            last_sequence_number: records[records.len() - 1].sequence_number.clone(),
            count: records.len(),
        }
    }

    /// Adds the labels of the call running now, if any, to a log line.
    pub(crate) fn add_current(line: &mut Map<String, Value>) {
        let _ = CALL.try_with(|labels| labels.add_to(line));
    }

    fn add_to(&self, line: &mut Map<String, Value>) {
        let mut put = |key: &str, value: Value| {
            line.insert(key.to_owned(), value);
        };
        match self {
            CallLabels::Record {
                shard,
                sequence_number,
                sub_sequence,
                partition_key,
            } => {
                put("shard", (**shard).into());
                put("sequence_number", (**sequence_number).into());
                put("sub_sequence", (*sub_sequence).into());
                put("partition_key", (**partition_key).into());
            }
            CallLabels::Records {
                shard,
                first_sequence_number,
                last_sequence_number,
                count,
            } => {
                put("shard", (**shard).into());
                put("first_sequence_number", (**first_sequence_number).into());
                put("last_sequence_number", (**last_sequence_number).into());
                put("count", (*count).into());
            }
        }
    }

    fn span(&self) -> tracing::Span {
        match self {
            CallLabels::Record {
                shard,
                sequence_number,
                sub_sequence,
                partition_key,
            } => tracing::info_span!(
                "record",
                shard = &**shard,
                sequence_number = &**sequence_number,
                sub_sequence = sub_sequence,
                partition_key = &**partition_key,
            ),
            CallLabels::Records {
                shard,
                first_sequence_number,
                last_sequence_number,
                count,
            } => tracing::info_span!(
                "records",
                shard = &**shard,
                first_sequence_number = &**first_sequence_number,
                last_sequence_number = &**last_sequence_number,
                count = count,
            ),
        }
    }
}

/// How a batch labels its handler calls, decided once per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Labelling {
    /// No labels (`handler_spans` off).
    Off,
    /// A span around each call.
    Spans,
    /// The task-local value the Powertools-shaped formatter reads.
    Lines,
}

impl Labelling {
    /// How calls are labelled under `options` and the subscriber of this
    /// thread.
    pub(crate) fn of(options: &ProcessingOptions) -> Self {
        if !options.handler_spans {
            return Labelling::Off;
        }
        let ours = tracing::dispatcher::get_default(|d| {
            d.downcast_ref::<crate::functions::PowertoolsJson>()
                .is_some()
        });
        if ours {
            Labelling::Lines
        } else {
            Labelling::Spans
        }
    }

    /// The labels `make` gives, when calls are labelled (made only then).
    pub(crate) fn labels(self, make: impl FnOnce() -> CallLabels) -> Labels {
        Labels {
            how: self,
            labels: (self != Labelling::Off).then(make),
        }
    }
}

/// One call's labels, and how they are put on its lines.
#[derive(Debug)]
pub(crate) struct Labels {
    how: Labelling,
    labels: Option<CallLabels>,
}

impl Labels {
    /// `call`, labelled.
    pub(crate) fn label<F: Future>(self, call: F) -> impl Future<Output = F::Output> {
        match (self.how, self.labels) {
            (Labelling::Spans, Some(labels)) => Either::Left(call.instrument(labels.span())),
            (Labelling::Lines, Some(labels)) => {
                Either::Right(Either::Left(CALL.scope(labels, call)))
            }
            _ => Either::Right(Either::Right(call)),
        }
    }
}
