//! `replay-failures`: the records a Kinesis event source mapping gave up
//! on, from its on-failure records, read again from the stream and put on a
//! stream (the one they came from by default, where the mapping runs them
//! again).
//!
//! - An on-failure record is what Lambda sends to the mapping's SQS, SNS or
//!   S3 destination: the invocation's context and the batch's place
//!   (`KinesisBatchInfo`: stream, shard, first and last sequence number,
//!   size), not its records (Lambda developer guide, "Retaining discarded
//!   batches for a Kinesis event source": its example is the format read
//!   here). `--from` reads them from an S3 destination's objects
//!   (`s3://<bucket>/<prefix>`, in key order), or from a file or a
//!   directory of files (SQS message bodies saved one a file); an object or
//!   a file holds one record, an array of them, or one a line.
//! - Each batch is read again from its shard at its first sequence number,
//!   up to its last, while the stream retains it; what is no longer there
//!   is said, and the rest put, in order, with its partition key.
//! - A DynamoDB Streams record (`DDBStreamBatchInfo`) is listed and left.
//! - A dry run says what would be put; otherwise the operator confirms.

use crate::args::{ChangeOptions, Connection};
use crate::Error;
use aws_sdk_kinesis::types::ShardIteratorType;
use clap::Args;
use shardkeeper::state::{kinesis_error, ForStream, SequenceNumber, StreamAddress};
use std::path::Path;

/// `replay-failures`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct ReplayFailuresArgs {
    /// Where the on-failure records are: `s3://<bucket>/<prefix>` (an S3
    /// destination's objects under the prefix), or a file of them (one, an
    /// array, or one a line: SQS message bodies saved) or a directory of
    /// such files.
    #[arg(long)]
    pub from: String,
    /// The Kinesis stream (name or ARN) to put the records on, instead of
    /// the one each batch came from.
    #[arg(long)]
    pub to_stream: Option<String>,
    /// Where, and with which credentials (`--kinesis-endpoint-url`).
    #[command(flatten)]
    pub conn: Connection,
    /// Dry run, confirmation, output.
    #[command(flatten)]
    pub change: ChangeOptions,
}

/// One batch a mapping gave up on, as its on-failure record names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedBatch {
    /// Where the record was read (file, and place in it).
    pub source: String,
    /// The stream's ARN.
    pub stream_arn: String,
    /// The shard.
    pub shard_id: String,
    /// The batch's first record.
    pub start: String,
    /// The batch's last record.
    pub end: String,
    /// Why Lambda gave up (`RetryAttemptsExhausted`, `RecordAgeExceeded`, ...).
    pub condition: String,
}

/// The documents (name and text) `from` names: the objects under an
/// `s3://<bucket>/<prefix>` in key order, a file, or every file of a
/// directory in name order.
pub async fn documents(
    s3: &aws_sdk_s3::Client,
    from: &str,
) -> Result<Vec<(String, String)>, Error> {
    if let Some(place) = from.strip_prefix("s3://") {
        let (bucket, prefix) = place.split_once('/').unwrap_or((place, ""));
        if bucket.is_empty() {
            return Err(Error::bad("--from", format!("{from:?} names no bucket")));
        }
        return s3_documents(s3, bucket, prefix).await;
    }
    let path = Path::new(from);
    let mut files = Vec::new();
    if path.is_dir() {
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                files.push(entry.path());
            }
        }
        files.sort();
    } else {
        files.push(path.to_owned());
    }
    files
        .into_iter()
        .map(|file| Ok((file.display().to_string(), std::fs::read_to_string(&file)?)))
        .collect()
}

/// The objects under `prefix` of `bucket`, in key order, as text.
async fn s3_documents(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    prefix: &str,
) -> Result<Vec<(String, String)>, Error> {
    let mut keys = Vec::new();
    let mut pages = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| s3_error("ListObjectsV2", e))?;
        keys.extend(
            page.contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_owned)),
        );
    }
    keys.sort();
    let mut documents = Vec::with_capacity(keys.len());
    for key in keys {
        let object = s3
            .get_object()
            .bucket(bucket)
            .key(&key)
            .send()
            .await
            .map_err(|e| s3_error("GetObject", e))?;
        let bytes = object.body.collect().await.map_err(|e| Error::S3 {
            operation: "GetObject",
            message: e.to_string(),
        })?;
        let text = String::from_utf8(bytes.to_vec())
            .map_err(|_| Error::bad("--from", format!("s3://{bucket}/{key}: not UTF-8 text")))?;
        documents.push((format!("s3://{bucket}/{key}"), text));
    }
    Ok(documents)
}

/// An S3 call's error, with its code and causes.
fn s3_error<E, R>(operation: &'static str, e: aws_sdk_s3::error::SdkError<E, R>) -> Error
where
    aws_sdk_s3::Error: From<aws_sdk_s3::error::SdkError<E, R>>,
{
    let e = aws_sdk_s3::Error::from(e);
    Error::S3 {
        operation,
        message: aws_sdk_s3::error::DisplayErrorContext(&e).to_string(),
    }
}

/// The on-failure records of `documents`: the Kinesis batches, and what
/// was left (a DynamoDB Streams batch, with why). A document that is not
/// such records is an error naming it.
pub fn read_failures(
    documents: &[(String, String)],
) -> Result<(Vec<FailedBatch>, Vec<String>), Error> {
    let (mut batches, mut left) = (Vec::new(), Vec::new());
    for (name, text) in documents {
        for (i, value) in values_of(text, name)?.into_iter().enumerate() {
            let at = format!("{name}#{}", i + 1);
            match batch_of(&value, &at)? {
                Some(batch) => batches.push(batch),
                None => left.push(format!(
                    "{at}: a DynamoDB Streams batch (only Kinesis batches are replayed)"
                )),
            }
        }
    }
    Ok((batches, left))
}

/// The JSON values of a file: one, an array of them, or one a line.
fn values_of(text: &str, name: &str) -> Result<Vec<serde_json::Value>, Error> {
    let bad = |e: serde_json::Error| Error::bad("--from", format!("{name}: not JSON: {e}"));
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Array(values)) => Ok(values),
        Ok(value) => Ok(vec![value]),
        Err(_) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(bad))
            .collect(),
    }
}

/// The Kinesis batch of an on-failure record; `None` for a DynamoDB
/// Streams one.
fn batch_of(value: &serde_json::Value, at: &str) -> Result<Option<FailedBatch>, Error> {
    if value.get("DDBStreamBatchInfo").is_some() {
        return Ok(None);
    }
    let info = value.get("KinesisBatchInfo").ok_or_else(|| {
        Error::bad(
            "--from",
            format!("{at}: not an on-failure record (no KinesisBatchInfo)"),
        )
    })?;
    let field = |name: &str| {
        info.get(name)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .ok_or_else(|| Error::bad("--from", format!("{at}: KinesisBatchInfo has no {name}")))
    };
    let batch = FailedBatch {
        source: at.to_owned(),
        stream_arn: field("streamArn")?,
        shard_id: field("shardId")?,
        start: field("startSequenceNumber")?,
        end: field("endSequenceNumber")?,
        condition: value["requestContext"]["condition"]
            .as_str()
            .unwrap_or("unknown")
            .to_owned(),
    };
    for seq in [&batch.start, &batch.end] {
        SequenceNumber::new(seq)
            .map_err(|e| Error::bad("--from", format!("{at}: {seq:?}: {e}")))?;
    }
    Ok(Some(batch))
}

/// One record read again.
struct Reread {
    partition_key: String,
    data: aws_sdk_kinesis::primitives::Blob,
}

/// The records of `batch` the stream still holds, in order, and whether its
/// first record was among them (else the start is past the retention).
/// A first record Kinesis no longer takes as a start (past the retention,
/// it is refused as invalid) is read from the shard's oldest record on,
/// keeping only the batch's.
async fn reread(
    kinesis: &aws_sdk_kinesis::Client,
    batch: &FailedBatch,
) -> Result<(Vec<Reread>, bool), Error> {
    let stream = StreamAddress::parse(&batch.stream_arn)?;
    let (start, end) = (
        SequenceNumber::new(&batch.start)?,
        SequenceNumber::new(&batch.end)?,
    );
    let iterator = |kind: ShardIteratorType| {
        kinesis
            .get_shard_iterator()
            .for_stream(&stream)
            .shard_id(&batch.shard_id)
            .shard_iterator_type(kind.clone())
            .set_starting_sequence_number(
                (kind == ShardIteratorType::AtSequenceNumber).then(|| batch.start.clone()),
            )
            .send()
    };
    let iterator = match iterator(ShardIteratorType::AtSequenceNumber).await {
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_invalid_argument_exception()) =>
        {
            iterator(ShardIteratorType::TrimHorizon).await
        }
        other => other,
    }
    .map_err(|e| Error::from(kinesis_error("GetShardIterator", &e)))?;
    let mut next = iterator.shard_iterator().map(str::to_owned);
    let (mut records, mut first) = (Vec::new(), None);
    while let Some(it) = next.take() {
        let out = kinesis
            .get_records()
            .for_stream(&stream)
            .shard_iterator(it)
            .send()
            .await
            .map_err(|e| Error::from(kinesis_error("GetRecords", &e)))?;
        let mut past_end = false;
        for r in out.records() {
            let seq = SequenceNumber::new(r.sequence_number())?;
            if seq > end {
                past_end = true;
                break;
            }
            if seq < start {
                continue;
            }
            first.get_or_insert_with(|| r.sequence_number().to_owned());
            records.push(Reread {
                partition_key: r.partition_key().unwrap_or_default().to_owned(),
                data: r.data().clone(),
            });
        }
        let caught_up = out.records().is_empty() && out.millis_behind_latest() == Some(0);
        if !past_end && !caught_up {
            next = out.next_shard_iterator().map(str::to_owned);
        }
    }
    Ok((records, first.as_deref() == Some(batch.start.as_str())))
}

/// `replay-failures`: see the module documentation.
pub async fn replay_failures(
    kinesis: &aws_sdk_kinesis::Client,
    s3: &aws_sdk_s3::Client,
    args: &ReplayFailuresArgs,
    ask: impl FnOnce(&str) -> bool,
) -> Result<String, Error> {
    let (batches, left) = read_failures(&documents(s3, &args.from).await?)?;
    let to_stream = args
        .to_stream
        .as_deref()
        .map(StreamAddress::parse)
        .transpose()?;
    let mut out = String::new();
    for why in &left {
        out.push_str(&format!("left {why}\n"));
    }
    let mut planned = Vec::new();
    for batch in &batches {
        let (records, whole) = reread(kinesis, batch).await?;
        let target = match &to_stream {
            Some(stream) => stream.clone(),
            None => StreamAddress::parse(&batch.stream_arn)?,
        };
        out.push_str(&format!(
            "{} ({}): {} {}..{}: {} records{} -> {target}\n",
            batch.source,
            batch.condition,
            batch.shard_id,
            batch.start,
            batch.end,
            records.len(),
            if whole {
                ""
            } else {
                " (its start is no longer retained: from the first still there)"
            },
        ));
        planned.push((target, records));
    }
    let total: usize = planned.iter().map(|(_, r)| r.len()).sum();
    if args.change.dry_run {
        out.push_str(&format!("dry run: {total} records would be put\n"));
        return Ok(out);
    }
    args.change
        .confirm(&format!("put {total} records back on their streams?"), ask)?;
    let mut put = 0;
    for (target, records) in planned {
        for record in records {
            kinesis
                .put_record()
                .for_stream(&target)
                .partition_key(record.partition_key)
                .data(record.data)
                .send()
                .await
                .map_err(|e| Error::from(kinesis_error("PutRecord", &e)))?;
            put += 1;
        }
    }
    out.push_str(&format!("{put} records put\n"));
    Ok(out)
}
