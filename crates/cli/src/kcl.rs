//! A KCL lease table's items, as KCL 2.x and 3.x write them, and the pure
//! plan of an import into a group.
//!
//! The item format is KCL's own (`DynamoDBLeaseSerializer` and
//! `DynamoDBMultiStreamLeaseSerializer` in amazon-kinesis-client):
//! - `leaseKey` (the hash key): the shard id, or in a multi-stream
//!   application `<account>:<stream>:<creation epoch>:<shard id>`, with the
//!   stream identifier also in `streamName` and the shard id in `shardId`;
//! - `leaseOwner`, and `leaseCounter`, which every renewal moves on;
//! - `checkpoint`: a sequence number, or a sentinel `TRIM_HORIZON`,
//!   `LATEST`, `AT_TIMESTAMP` (its time is in the application's
//!   configuration, not the table) or `SHARD_END`; with
//!   `checkpointSubSequenceNumber`, the user record inside a KPL aggregate
//!   (0 for a record that is not aggregated);
//! - `pendingCheckpoint` (and its sub-sequence number): a checkpoint the
//!   application prepared but did not commit;
//! - `parentShardId` and `childShardIds` (string sets);
//! - `entityType`: absent or `LEASE` on leases (KCL 3.x); other entities
//!   are skipped.
//!
//! KCL resumes a shard at its checkpoint's sequence number and skips every
//! user record up to the checkpoint's (sequence, sub-sequence): the same
//! point as this toolkit's `<n>/<sub>` checkpoint, so a position moves over
//! exactly.

use crate::error::Error;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use shardkeeper::state::{Checkpoint, EpochMillis, ShardId, ShardSpec, StreamAddress};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A stream identifier of a multi-stream KCL application.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct KclStream {
    /// The stream's account.
    pub account: String,
    /// The stream's name.
    pub name: String,
    /// When the stream was created (epoch seconds), which tells apart
    /// streams of one name deleted and created again.
    pub creation_epoch: u64,
}

/// Where a KCL lease stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KclCheckpoint {
    /// `TRIM_HORIZON`: nothing processed; start at the oldest record.
    TrimHorizon,
    /// `LATEST`: nothing processed; start at the newest record.
    Latest,
    /// `AT_TIMESTAMP`: nothing processed; start at the application's
    /// configured time.
    AtTimestamp,
    /// `SHARD_END`: the shard is closed and read to its end.
    ShardEnd,
    /// Every user record up to and including this one was processed.
    Sequence {
        /// The record's sequence number.
        sequence: String,
        /// The user record inside a KPL aggregate (0 if not aggregated).
        sub_sequence: u64,
    },
}

/// One lease of a KCL lease table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KclLease {
    /// The item's `leaseKey`.
    pub lease_key: String,
    /// The shard id.
    pub shard: String,
    /// The stream, in a multi-stream application.
    pub stream: Option<KclStream>,
    /// The worker holding it.
    pub owner: Option<String>,
    /// Moved on by every renewal and take.
    pub counter: u64,
    /// Its checkpoint.
    pub checkpoint: KclCheckpoint,
    /// A prepared checkpoint past `checkpoint`, not committed.
    pub pending: Option<KclCheckpoint>,
    /// Parent shards.
    pub parents: Vec<String>,
}

fn string<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> Option<&'a str> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

fn number(item: &HashMap<String, AttributeValue>, name: &str) -> Result<Option<u64>, String> {
    match item.get(name) {
        None => Ok(None),
        Some(v) => {
            let text = v.as_n().map_err(|_| format!("{name} is not a number"))?;
            text.parse()
                .map(Some)
                .map_err(|_| format!("{name} {text:?} is not a whole number"))
        }
    }
}

fn checkpoint(sequence: &str, sub: Option<u64>) -> Result<KclCheckpoint, String> {
    Ok(match sequence {
        "TRIM_HORIZON" => KclCheckpoint::TrimHorizon,
        "LATEST" => KclCheckpoint::Latest,
        "AT_TIMESTAMP" => KclCheckpoint::AtTimestamp,
        "SHARD_END" => KclCheckpoint::ShardEnd,
        digits if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            KclCheckpoint::Sequence {
                sequence: digits.to_owned(),
                sub_sequence: sub.unwrap_or(0),
            }
        }
        other => {
            return Err(format!(
                "checkpoint {other:?} is neither a sequence number nor a KCL sentinel"
            ))
        }
    })
}

fn stream_identifier(text: &str) -> Result<KclStream, String> {
    let parts: Vec<&str> = text.split(':').collect();
    match parts.as_slice() {
        [account, name, epoch] if !name.is_empty() => Ok(KclStream {
            account: (*account).to_owned(),
            name: (*name).to_owned(),
            creation_epoch: epoch.parse().map_err(|_| {
                format!("stream identifier {text:?}: creation epoch is not a number")
            })?,
        }),
        _ => Err(format!(
            "stream identifier {text:?} is not <account>:<stream>:<creation epoch>"
        )),
    }
}

impl KclLease {
    /// The lease an item holds; `None` for an item of another entity type.
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Result<Option<Self>, Error> {
        let key = string(item, "leaseKey")
            .unwrap_or("<no leaseKey>")
            .to_owned();
        let bad = |message: String| Error::bad("--kcl-table", format!("lease {key:?}: {message}"));
        if string(item, "entityType").is_some_and(|t| t != "LEASE") {
            return Ok(None);
        }
        if string(item, "leaseKey").is_none() {
            return Err(bad("no leaseKey: not a KCL lease table".to_owned()));
        }
        let (stream, shard) = match string(item, "streamName") {
            Some(id) => {
                let stream = stream_identifier(id).map_err(bad)?;
                let shard = match string(item, "shardId") {
                    Some(s) => s.to_owned(),
                    None => key
                        .strip_prefix(&format!("{id}:"))
                        .ok_or_else(|| {
                            bad("no shardId, and the key does not start with the stream".to_owned())
                        })?
                        .to_owned(),
                };
                (Some(stream), shard)
            }
            None => (None, key.clone()),
        };
        let sub = number(item, "checkpointSubSequenceNumber").map_err(bad)?;
        let cp = string(item, "checkpoint")
            .ok_or_else(|| bad("no checkpoint".to_owned()))
            .and_then(|s| checkpoint(s, sub).map_err(bad))?;
        let pending = match string(item, "pendingCheckpoint").filter(|s| !s.is_empty()) {
            Some(p) => {
                let sub = number(item, "pendingCheckpointSubSequenceNumber").map_err(bad)?;
                Some(checkpoint(p, sub).map_err(bad)?)
            }
            None => None,
        };
        let parents = item
            .get("parentShardId")
            .and_then(|v| v.as_ss().ok())
            .cloned()
            .unwrap_or_default();
        Ok(Some(KclLease {
            lease_key: key.clone(),
            shard,
            stream,
            owner: string(item, "leaseOwner").map(str::to_owned),
            counter: number(item, "leaseCounter").map_err(bad)?.unwrap_or(0),
            checkpoint: cp,
            pending,
            parents,
        }))
    }
}

impl std::fmt::Display for KclCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KclCheckpoint::TrimHorizon => f.write_str("TRIM_HORIZON"),
            KclCheckpoint::Latest => f.write_str("LATEST"),
            KclCheckpoint::AtTimestamp => f.write_str("AT_TIMESTAMP"),
            KclCheckpoint::ShardEnd => f.write_str("SHARD_END"),
            KclCheckpoint::Sequence {
                sequence,
                sub_sequence: 0,
            } => f.write_str(sequence),
            KclCheckpoint::Sequence {
                sequence,
                sub_sequence,
            } => write!(f, "{sequence}/{sub_sequence}"),
        }
    }
}

/// The leases whose counter moved between two reads of the table, or that
/// appeared or went away with an owner: the KCL application still renews
/// or takes leases. Sorted lease keys.
pub fn renewed_between(first: &[KclLease], second: &[KclLease]) -> Vec<String> {
    let before: BTreeMap<&str, &KclLease> =
        first.iter().map(|l| (l.lease_key.as_str(), l)).collect();
    let after: BTreeMap<&str, &KclLease> =
        second.iter().map(|l| (l.lease_key.as_str(), l)).collect();
    let keys: BTreeSet<&str> = before.keys().chain(after.keys()).copied().collect();
    keys.into_iter()
        .filter(|k| match (before.get(k), after.get(k)) {
            (Some(a), Some(b)) => a.counter != b.counter || a.owner != b.owner,
            (Some(l), None) | (None, Some(l)) => l.owner.is_some(),
            (None, None) => false,
        })
        .map(str::to_owned)
        .collect()
}

/// What an import of a KCL lease table does to a group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KclPlan {
    /// Each shard's new checkpoint, parents before children. `SHARD_END`
    /// shards are also marked depleted.
    #[serde(serialize_with = "as_text")]
    pub moves: Vec<(ShardId, Checkpoint)>,
    /// Leases of shards the stream no longer lists (past retention): left out.
    pub gone: Vec<String>,
    /// Leases of other streams (multi-stream tables), or of an older stream
    /// of the same name: left out.
    pub other_streams: Vec<String>,
    /// Shards of the stream the table has no lease for: left as they are
    /// (they wait for their parents, or start at the group's initial position).
    pub without_lease: Vec<ShardId>,
    /// Shards with a prepared, uncommitted checkpoint (`pendingCheckpoint`):
    /// KCL may have processed up to it, and the records between the
    /// checkpoint and it are processed again. (shard, prepared position).
    pub pending: Vec<(ShardId, String)>,
}

fn as_text<S: serde::Serializer>(moves: &[(ShardId, Checkpoint)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(moves.len()))?;
    for (shard, cp) in moves {
        map.serialize_entry(shard.as_str(), &cp.to_string())?;
    }
    map.end()
}

/// Plans the import of `leases` into a group on `stream`, whose shards
/// Kinesis lists as `listed`. `at_timestamp` is the time of an
/// `AT_TIMESTAMP` start (KCL keeps it in its configuration); a lease at
/// that sentinel without it is refused, as is a checkpoint this toolkit
/// cannot hold.
pub fn plan_kcl_import(
    leases: &[KclLease],
    stream: &StreamAddress,
    listed: &[ShardSpec],
    at_timestamp: Option<EpochMillis>,
) -> Result<KclPlan, Error> {
    let mut plan = KclPlan::default();
    let ours = |s: &KclStream| {
        s.name == stream.name().as_str()
            && stream.arn().is_none_or(|arn| arn.account() == s.account)
    };
    // Of a multi-stream table, the newest stream of the group's name.
    let newest = leases
        .iter()
        .filter_map(|l| l.stream.as_ref().filter(|s| ours(s)))
        .max()
        .cloned();
    let listed_ids: BTreeSet<&str> = listed.iter().map(|s| s.shard_id.as_str()).collect();
    let mut by_shard: BTreeMap<&str, &KclLease> = BTreeMap::new();
    let mut undated = Vec::new();
    for lease in leases {
        if lease.stream.is_some() && lease.stream != newest {
            plan.other_streams.push(lease.lease_key.clone());
            continue;
        }
        if !listed_ids.contains(lease.shard.as_str()) {
            plan.gone.push(lease.shard.clone());
            continue;
        }
        if lease.checkpoint == KclCheckpoint::AtTimestamp && at_timestamp.is_none() {
            undated.push(lease.shard.clone());
        }
        by_shard.insert(lease.shard.as_str(), lease);
    }
    if !undated.is_empty() {
        return Err(Error::bad(
            "--at-timestamp",
            format!(
                "shard(s) {} start AT_TIMESTAMP in the KCL table, whose time is in the KCL application's configuration: give it",
                undated.join(", ")
            ),
        ));
    }
    for spec in ShardSpec::parents_first(listed.to_vec()) {
        let Some(lease) = by_shard.get(spec.shard_id.as_str()) else {
            plan.without_lease.push(spec.shard_id.clone());
            continue;
        };
        let cp = ours_checkpoint(&lease.checkpoint, at_timestamp)
            .map_err(|e| Error::bad("--kcl-table", format!("lease {:?}: {e}", lease.lease_key)))?;
        if let Some(p) = &lease.pending {
            plan.pending.push((spec.shard_id.clone(), p.to_string()));
        }
        plan.moves.push((spec.shard_id.clone(), cp));
    }
    Ok(plan)
}

fn ours_checkpoint(
    cp: &KclCheckpoint,
    at_timestamp: Option<EpochMillis>,
) -> Result<Checkpoint, shardkeeper::state::StateError> {
    Ok(match cp {
        KclCheckpoint::TrimHorizon => Checkpoint::TrimHorizon,
        KclCheckpoint::Latest => Checkpoint::Latest,
        KclCheckpoint::AtTimestamp => {
            Checkpoint::AtTimestamp(at_timestamp.expect("refused before without a time"))
        }
        KclCheckpoint::ShardEnd => Checkpoint::ShardEnd,
        KclCheckpoint::Sequence {
            sequence,
            sub_sequence,
        } => Checkpoint::after_sub(sequence, *sub_sequence)?,
    })
}

#[cfg(test)]
mod tests;
