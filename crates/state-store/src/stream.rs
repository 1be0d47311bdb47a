//! The stream item: starting the store, and resetting state when the stream was re-created.

use crate::clock::EpochMillis;
use crate::error::{Result, Service, StateError};
use crate::item::{n, s, Expr, RawItem};
use crate::layout::SK_BUCKETS;
use crate::model::StreamState;
use crate::records::SK_PARKED;
use crate::retry::call_kinesis;
use crate::schema::{attr, PK, SCHEMA_VERSION, SK, SK_STREAM};
use crate::store::StateStore;
use crate::stream_address::{ForStream, StreamAddress};
use crate::table::{TableOptions, TableReport};
use aws_sdk_dynamodb::types::{DeleteRequest, WriteRequest};
use std::collections::HashMap;

/// What [`StreamItem::init`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamInit {
    /// There was no state for the stream; it was recorded now.
    Created,
    /// The state belongs to this incarnation of the stream.
    Existing,
    /// The stored state belonged to an earlier stream of the same name
    /// (another creation time): its leases, checkpoints, consumers and
    /// positions were deleted and the state begun anew. Parked records are
    /// kept: they are the only copy of their payloads, and an operator
    /// lists, replays or removes them (`shardkeeper parked`).
    Reset {
        /// The creation time the old state was recorded for.
        previous_created: EpochMillis,
        /// How many items were deleted.
        deleted_items: usize,
        /// How many parked records were kept.
        kept_parked: usize,
    },
}

/// Options of [`StateStore::start`]: [`StartOptions::new`], then its setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StartOptions {
    /// How to create and check the table.
    pub table: TableOptions,
    /// The stream's creation time (see [`kinesis_stream_summary`]).
    pub stream_created: EpochMillis,
    /// The stream's ARN (see [`kinesis_stream_summary`]), recorded with the
    /// state so a same-named stream of another account or region is never
    /// taken for it; `None` if not known.
    pub stream_arn: Option<String>,
}

impl StartOptions {
    /// The options of a stream created at `stream_created`: the default
    /// table options, no ARN known.
    pub fn new(stream_created: EpochMillis) -> Self {
        StartOptions {
            table: TableOptions::default(),
            stream_created,
            stream_arn: None,
        }
    }

    /// Sets [`StartOptions::table`](Self::table).
    pub fn table(mut self, table: TableOptions) -> Self {
        self.table = table;
        self
    }

    /// Sets [`StartOptions::stream_arn`](Self::stream_arn).
    pub fn stream_arn(mut self, stream_arn: Option<String>) -> Self {
        self.stream_arn = stream_arn;
        self
    }
}

/// What [`StateStore::start`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartReport {
    /// The table.
    pub table: TableReport,
    /// The stream state.
    pub stream: StreamInit,
}

const BATCH_WRITE_MAX: usize = 25;

impl StateStore {
    /// [`StateStore::start`] on the group's Kinesis stream as it is now (its
    /// creation time and ARN, one DescribeStreamSummary), with `table`.
    pub async fn start_on_stream(
        &self,
        kinesis: &aws_sdk_kinesis::Client,
        table: TableOptions,
    ) -> Result<StartReport> {
        let config = self.config();
        let summary = kinesis_stream_summary(kinesis, &config.stream, &config.retry).await?;
        self.start(&StartOptions {
            table,
            stream_created: summary.created,
            stream_arn: Some(summary.arn),
        })
        .await
    }

    /// Starts the store: ensures the table (created if missing, ACTIVE, right
    /// schema, tagged) and the stream state (reset if the stream was re-created).
    pub async fn start(&self, options: &StartOptions) -> Result<StartReport> {
        let table = self.table().ensure(&options.table).await?;
        let stream = self
            .stream_item()
            .init(options.stream_created, options.stream_arn.as_deref())
            .await?;
        Ok(StartReport { table, stream })
    }
}

/// The stream item: the stream's creation time and ARN and the schema of
/// the group's state. From [`StateStore::stream_item`].
#[derive(Debug, Clone, Copy)]
pub struct StreamItem<'a> {
    pub(crate) store: &'a StateStore,
}

impl StreamItem<'_> {
    /// Records that code from before sessions was seen running in the group
    /// now (the upgrade window runs on from it), at most once a minute:
    /// `true` if written.
    pub async fn note_older_code(self) -> Result<bool> {
        let now = self.store.now();
        let expr = Expr::new()
            .names(&[attr::OLDER_SEEN])
            .value("now", n(now))
            .value("recent", n(now - 60_000));
        let req = self.store.update_req(
            &self.store.home(SK_STREAM),
            &expr,
            "SET #older_seen = :now",
            Some("attribute_exists(pk) AND (attribute_not_exists(#older_seen) OR #older_seen < :recent)"),
        );
        Ok(self.store.conditional_update(req).await?.is_ok())
    }

    /// The stream item, if any.
    pub async fn state(self) -> Result<Option<StreamState>> {
        self.store
            .get_item(&self.store.home(SK_STREAM))
            .await?
            .map(|item| StreamState::from_item(&item))
            .transpose()
    }

    /// Records the stream's creation time and ARN. State written by a newer
    /// layout ([`crate::SCHEMA_VERSION`]) is refused with
    /// [`StateError::NewerSchema`]: upgrade every function of the group.
    /// State recorded for another stream ARN (a stream of the same name in
    /// another account or region) is refused with [`StateError::OtherStream`]
    /// and left as it is. If the stored state was recorded for another
    /// creation time, the stream was deleted and re-created: every item of
    /// the group is deleted (logged as a warning) and the state starts anew.
    /// Only one of several racing callers performs the reset.
    pub async fn init(
        self,
        stream_created: EpochMillis,
        stream_arn: Option<&str>,
    ) -> Result<StreamInit> {
        // Laid out before the stream item is written: a group whose stream
        // item came first is one written before buckets existed.
        self.store.laid_out().await?;
        let version = SCHEMA_VERSION;
        let mut reset = None;
        for _ in 0..5 {
            match self.state().await? {
                Some(state) if state.schema_version > SCHEMA_VERSION => {
                    return Err(StateError::NewerSchema {
                        found: state.schema_version,
                        supported: SCHEMA_VERSION,
                    });
                }
                Some(StreamState {
                    stream_arn: Some(recorded),
                    ..
                }) if stream_arn.is_some_and(|found| found != recorded) => {
                    return Err(StateError::OtherStream {
                        recorded,
                        found: stream_arn.unwrap_or_default().to_owned(),
                    });
                }
                Some(state) if state.stream_created == stream_created => {
                    let _ = self.store.inner.group_end.set(state.end.clone());
                    if state.schema_version < version {
                        self.store.raise_schema(version).await?;
                    }
                    if let (None, Some(arn)) = (&state.stream_arn, stream_arn) {
                        self.record_stream_arn(arn).await?;
                    }
                    return Ok(reset.unwrap_or(StreamInit::Existing));
                }
                Some(state) => {
                    let expr = Expr::new()
                        .names(&[attr::STREAM_CREATED])
                        .value("old", n(state.stream_created));
                    let won = self
                        .store
                        .delete_item(
                            &self.store.home(SK_STREAM),
                            Some("#stream_created = :old"),
                            &expr,
                        )
                        .await?;
                    if won {
                        let (deleted, kept_parked) = self.store.delete_items(false).await?;
                        tracing::warn!(
                            pk = self.store.layout().partition_key(),
                            previous_created = state.stream_created,
                            stream_created,
                            deleted,
                            kept_parked,
                            "stream state has been reset: the stream was re-created (creation time differs); parked records kept"
                        );
                        reset = Some(StreamInit::Reset {
                            previous_created: state.stream_created,
                            deleted_items: deleted + 1,
                            kept_parked,
                        });
                    }
                }
                None => {
                    let now = self.store.now();
                    let mut expr = Expr::new()
                        .names(&[attr::STREAM_CREATED, attr::SCHEMA, attr::UPDATED])
                        .value("created", n(stream_created))
                        .value("schema", n(version))
                        .value("now", n(now));
                    let mut set =
                        "SET #stream_created = :created, #schema = :schema, #updated = :now"
                            .to_owned();
                    if let Some(arn) = stream_arn {
                        expr = expr.names(&[attr::STREAM_ARN]).value("arn", s(arn));
                        set.push_str(", #stream_arn = :arn");
                    }
                    let req = self.store.update_req(
                        &self.store.home(SK_STREAM),
                        &expr,
                        &set,
                        Some("attribute_not_exists(pk)"),
                    );
                    if self.store.conditional_update(req).await?.is_ok() {
                        tracing::debug!(
                            pk = self.store.layout().partition_key(),
                            "recorded the stream state"
                        );
                        return Ok(reset.unwrap_or(StreamInit::Created));
                    }
                }
            }
        }
        Err(StateError::Sdk {
            service: Service::DynamoDb,
            operation: "init_stream",
            code: None,
            message: "the stream item kept changing under concurrent starts".to_owned(),
        })
    }

    /// Records the stream ARN on a stream item from before ARNs were.
    async fn record_stream_arn(self, arn: &str) -> Result<()> {
        let expr = Expr::new().names(&[attr::STREAM_ARN]).value("arn", s(arn));
        let req = self.store.update_req(
            &self.store.home(SK_STREAM),
            &expr,
            "SET #stream_arn = :arn",
            Some("attribute_exists(pk) AND attribute_not_exists(#stream_arn)"),
        );
        self.store.conditional_update(req).await?.ok();
        Ok(())
    }
}

impl StateStore {
    /// Records that the group's state is of layout `version` now.
    pub(crate) async fn raise_schema(&self, version: u32) -> Result<()> {
        // Raised from before sessions: when, so that sessions also renew
        // each lease for a while (see `UPGRADE_WINDOW`).
        let expr = Expr::new()
            .names(&[attr::SCHEMA, attr::SESSIONS_SINCE])
            .value("v", n(version))
            .value("now", n(self.now()));
        let req = self.update_req(
            &self.home(SK_STREAM),
            &expr,
            "SET #schema = :v, #sessions_since = if_not_exists(#sessions_since, :now)",
            Some("attribute_exists(pk) AND #schema < :v"),
        );
        self.conditional_update(req).await?.ok();
        Ok(())
    }

    /// Deletes every item of this group on this stream, its layout too;
    /// returns how many.
    pub async fn delete_all_items(&self) -> Result<usize> {
        let (deleted, _) = self.delete_items(true).await?;
        self.forget_layout();
        Ok(deleted)
    }

    /// Deletes the group's items in every bucket; the stream item, the
    /// layout and parked records only if `everything` (a reset has removed
    /// the stream item already, conditionally, and a racing start may have
    /// written the new one; the layout says where the new state goes; a
    /// parked record is the only copy of its payload). How many were
    /// deleted, and how many parked records were kept.
    async fn delete_items(&self, everything: bool) -> Result<(usize, usize)> {
        let buckets = self.layout().buckets().await?;
        let items = self.query_all(buckets, "", true).await?;
        let kept = |item: &RawItem| {
            [SK_STREAM, SK_BUCKETS]
                .iter()
                .any(|sk| crate::store::sk_suffix(item, sk) == Some(""))
        };
        let parked = |item: &RawItem| crate::store::sk_suffix(item, SK_PARKED).is_some();
        let kept_parked = if everything {
            0
        } else {
            items.iter().filter(|item| parked(item)).count()
        };
        let keys: Vec<RawItem> = items
            .into_iter()
            .filter(|item| everything || !(kept(item) || parked(item)))
            .map(|item| {
                item.into_iter()
                    .filter(|(k, _)| k == PK || k == SK)
                    .collect::<HashMap<_, _>>()
            })
            .collect();
        let count = keys.len();
        for chunk in keys.chunks(BATCH_WRITE_MAX) {
            let mut pending: Vec<WriteRequest> = chunk
                .iter()
                .map(|key| {
                    DeleteRequest::builder()
                        .set_key(Some(key.clone()))
                        .build()
                        .map(|d| WriteRequest::builder().delete_request(d).build())
                        .map_err(|e| StateError::validation("delete request", e.to_string()))
                })
                .collect::<Result<_>>()?;
            for attempt in 0.. {
                if pending.is_empty() {
                    break;
                }
                if attempt >= self.config().retry.max_attempts.max(1) {
                    return Err(StateError::Throttled {
                        service: Service::DynamoDb,
                        operation: "BatchWriteItem",
                        attempts: attempt,
                        message: format!("{} deletes left unprocessed", pending.len()),
                    });
                }
                if attempt > 0 {
                    tokio::time::sleep(self.config().retry.backoff_cap(attempt)).await;
                }
                let req = self
                    .client()
                    .batch_write_item()
                    .request_items(self.table_name(), pending.clone());
                let out = self
                    .call_plain("BatchWriteItem", || req.clone().send())
                    .await?;
                pending = out
                    .unprocessed_items
                    .and_then(|mut m| m.remove(self.table_name()))
                    .unwrap_or_default();
            }
        }
        Ok((count, kept_parked))
    }
}

/// What one DescribeStreamSummary tells of a Kinesis stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamSummary {
    /// How long the stream keeps records (its `RetentionPeriodHours`):
    /// state of a closed, fully read shard is kept at least this long, or
    /// discovery would find the shard listed again.
    pub retention: std::time::Duration,
    /// Its creation time, to pass to [`StateStore::start`].
    pub created: EpochMillis,
    /// How many shards are open now (what a new group's bucket count is
    /// chosen from, see [`crate::Buckets::for_shards`]).
    pub open_shards: usize,
    /// The stream's ARN, to pass to [`StateStore::start`].
    pub arn: String,
}

/// The creation time, open shard count, ARN and retention of a Kinesis stream.
pub async fn kinesis_stream_summary(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &StreamAddress,
    retry: &crate::retry::RetryPolicy,
) -> Result<StreamSummary> {
    let req = kinesis.describe_stream_summary().for_stream(stream);
    match call_kinesis(retry, "DescribeStreamSummary", || req.clone().send()).await {
        Ok(out) => {
            let summary = out
                .stream_description_summary()
                .ok_or_else(|| StateError::not_found(format!("stream {stream}")))?;
            let created = summary
                .stream_creation_timestamp()
                .to_millis()
                .map_err(|e| StateError::validation("stream creation time", e.to_string()))?;
            let hours = u64::try_from(summary.retention_period_hours()).unwrap_or(24);
            Ok(StreamSummary {
                retention: std::time::Duration::from_secs(hours * 3600),
                created,
                open_shards: usize::try_from(summary.open_shard_count()).unwrap_or(0),
                arn: summary.stream_arn().to_owned(),
            })
        }
        Err(StateError::Sdk {
            code: Some(code), ..
        }) if code == "ResourceNotFoundException" => {
            Err(StateError::not_found(format!("stream {stream}")))
        }
        Err(e) => Err(e),
    }
}
