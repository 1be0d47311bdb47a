//! How a processor treats failures.

use crate::state::StreamAddress;
use std::time::Duration;

/// What a failure does to the rest of the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Stop at the first failure and report it: nothing after it is
    /// processed, so order is kept (the default).
    #[default]
    StopAtFirstFailure,
    /// Process every record and report every failure (for handlers that do
    /// not need order; the event source mapping re-delivers from the first
    /// failure, so later successes may run again).
    ReportAllFailures,
}

/// Where poison records go once they failed `max_attempts` times.
#[derive(Debug, Clone, Default)]
pub enum Parking {
    /// Never park: a failing record is reported until the event source
    /// mapping gives up on it (its own retry limit and on-failure destination).
    #[default]
    Disabled,
    /// As a parked-record item in the state table, kept for `ttl`.
    StateTable {
        /// How long the parked record is kept.
        ttl: Duration,
    },
    /// To a dead-letter Kinesis stream, as a JSON envelope with the record
    /// and the error.
    DeadLetterStream {
        /// Kinesis client. Records are put with the library's own client of
        /// it ([`own_kinesis_client`](crate::state::own_kinesis_client): the
        /// store's retry policy and timeouts, no SDK retries).
        client: aws_sdk_kinesis::Client,
        /// The dead-letter stream (a name, or an ARN for one of another account).
        stream: StreamAddress,
    },
}

/// How long attempt counters live: twice the 24 hours a record stays in a
/// DynamoDB stream (and, by default, in a Kinesis stream), so a record's
/// retries, which end when it expires, all count against one counter.
pub(crate) const ATTEMPTS_TTL: Duration = Duration::from_secs(2 * 24 * 3600);

/// How long an event-source-mapped batch's checkpoint lives, twice the
/// 24 hours of default retention for the same reason: a retry of the batch
/// later than this repeats its records (never skips one).
#[cfg(feature = "esm")]
pub(crate) const CHECKPOINT_TTL: Duration = Duration::from_secs(2 * 24 * 3600);

/// Commit progress during a batch at least this often: a timeout or a crash
/// then repeats at most about a second of the batch's work, for at most one
/// checkpoint write a second per batch.
pub(crate) const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// An event-source-mapped processor stops this long before the Lambda
/// deadline and reports the rest (with less time than this left, half of
/// what is left), so a handler given up and the last checkpoint land before
/// Lambda ends the invocation.
#[cfg(feature = "esm")]
pub(crate) const DEADLINE_MARGIN: Duration = Duration::from_millis(1500);

/// Processor settings.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProcessingOptions {
    /// Stop at the first failure (default) or report all.
    pub mode: FailureMode,
    /// Failed attempts after which a record is parked (needs the state store
    /// to count attempts across invocations).
    pub max_attempts: u32,
    /// Where parked records go.
    pub parking: Parking,
    /// Also commit progress after this many records (`None`: by time only,
    /// every second).
    pub checkpoint_records: Option<u64>,
    /// Whose progress, attempts and parked records an event source
    /// mapping's batches are (`None`: the invoked function's name, with the
    /// alias or version the mapping invokes, from the invocation context:
    /// `orders:blue` and `orders:green` keep apart). Two consumers of one
    /// stream never share them; give each of two mappings of one function
    /// and one qualifier a name of its own. Set it to the function's name to
    /// keep the progress an aliased function stored before qualifiers were
    /// part of the key. At most 256 bytes, no `#`.
    pub consumer: Option<String>,
    /// Put a handler call's record on the lines the handler logs (shard,
    /// sequence number, sub-sequence, partition key; for a batch handler
    /// the shard, first and last sequence numbers and count; default: on).
    /// Under the functions' Powertools-shaped lines
    /// ([`init_tracing`](crate::functions::init_tracing)) they are keys of
    /// each line, read when the handler logs (about 1% of the path); under
    /// any other subscriber the call runs in a tracing span (`record`,
    /// `records`), which a JSON subscriber at INFO formats at once (about
    /// 0.8 µs a record: docs/BENCHMARKS.md, "Records of different keys at
    /// once (`concurrency`), and the deployed log path").
    pub handler_spans: bool,
    /// Event source mappings: mark a delivery's first record before it
    /// starts, and take the mark back once it is done (two writes more a
    /// delivery; default: off). A process that
    /// dies in a record (out of memory, an abort) is found by the next
    /// delivery when the dying one had written progress; the first record
    /// a delivery runs has none before it, so a record that kills the
    /// process there (a poison record at the head of the batch) is found
    /// only with this mark. Found, a death is a failed attempt of the
    /// record it happened in, parked at `max_attempts`.
    pub mark_first_record: bool,
    /// How many records of one batch run at once (default 1: one after
    /// another). Above 1, records of different keys (a Kinesis record's
    /// partition key, a KPL user record's own key, a DynamoDB change's item
    /// keys) run concurrently, at most this many in flight, and the
    /// records of one key still run in order, each after the one before
    /// it is done. The progress is the end of the longest done prefix;
    /// records done past it are remembered so a retry skips them.
    /// `StopAtFirstFailure` stops the failing key only. A batch handler
    /// (`handle_batch`), and a delivery that marks its records (after a
    /// death in the batch, or [`mark_first_record`](Self::mark_first_record)
    /// while it marks), run one record at a time. docs/PROCESSING.md,
    /// "Concurrency", says the rest.
    pub concurrency: usize,
    /// Put the values a decoder quoted from a payload into the log lines of
    /// a failed record (default: off: a payload may hold personal data; the
    /// line says the kind of error and the fields it is about, and the
    /// record's failure and parked copy keep the whole text).
    pub log_values: bool,
}

/// Setters, for a configuration built from its default (the struct is
/// `#[non_exhaustive]`: a field added later breaks no caller).
impl ProcessingOptions {
    /// Sets [`ProcessingOptions::mode`](Self::mode).
    pub fn mode(mut self, mode: FailureMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets [`ProcessingOptions::max_attempts`](Self::max_attempts).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets [`ProcessingOptions::parking`](Self::parking).
    pub fn parking(mut self, parking: Parking) -> Self {
        self.parking = parking;
        self
    }

    /// Sets [`ProcessingOptions::checkpoint_records`](Self::checkpoint_records).
    pub fn checkpoint_records(mut self, checkpoint_records: Option<u64>) -> Self {
        self.checkpoint_records = checkpoint_records;
        self
    }

    /// Sets [`ProcessingOptions::consumer`](Self::consumer).
    pub fn consumer(mut self, consumer: Option<String>) -> Self {
        self.consumer = consumer;
        self
    }

    /// Sets [`ProcessingOptions::mark_first_record`](Self::mark_first_record).
    pub fn mark_first_record(mut self, mark_first_record: bool) -> Self {
        self.mark_first_record = mark_first_record;
        self
    }

    /// Sets [`ProcessingOptions::log_values`](Self::log_values).
    pub fn log_values(mut self, log_values: bool) -> Self {
        self.log_values = log_values;
        self
    }

    /// Sets [`ProcessingOptions::concurrency`](Self::concurrency) (0 is
    /// taken as 1).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// Sets [`ProcessingOptions::handler_spans`](Self::handler_spans).
    pub fn handler_spans(mut self, handler_spans: bool) -> Self {
        self.handler_spans = handler_spans;
        self
    }
}

impl Default for ProcessingOptions {
    fn default() -> Self {
        ProcessingOptions {
            mode: FailureMode::StopAtFirstFailure,
            max_attempts: 3,
            parking: Parking::Disabled,
            checkpoint_records: None,
            consumer: None,
            handler_spans: true,
            mark_first_record: false,
            concurrency: 1,
            log_values: false,
        }
    }
}
