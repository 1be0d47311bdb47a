//! A unit of work: one record of a batch as the core receives it.

use crate::kpl;
use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use crate::processing::ChangeRecord;
use bytes::Bytes;
use std::sync::Arc;

/// One record of a batch, as a mode reads it for the [`crate::processing::Core`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// One user record ready for the handler (a plain record: the common
    /// case, held without a vector).
    Record(StreamRecord),
    /// User records ready for the handler: the user records of a KPL
    /// aggregate, in order.
    Records(Vec<StreamRecord>),
    /// A record that cannot be handled: it fails, and counts toward parking.
    /// (Boxed: broken records are rare, and every unit is the size of the
    /// largest kind.)
    Broken(Box<StreamRecord>, RecordError),
    /// A record so malformed that only its item identifier is known: it
    /// fails, and cannot be parked.
    Unreadable(String, RecordError),
}

impl Unit {
    /// True for user records ready for the handler ([`Unit::Record`],
    /// [`Unit::Records`]).
    pub fn is_ready(&self) -> bool {
        matches!(self, Unit::Record(_) | Unit::Records(_))
    }

    /// The unit of one record the DynamoDB Streams reader read from the
    /// stream `stream_arn`, handed over decoded: the handler's record
    /// carries it in [`StreamRecord::change`] (its `data` is empty; its
    /// `partition_key` is the keys in DynamoDB JSON), and
    /// [`crate::processing::changes`] decodes its images from the SDK's
    /// attribute values, never from text.
    pub fn change(record: ChangeRecord, stream_arn: &Arc<str>) -> Unit {
        let keys = serde_dynamo::Item::from(record.keys.clone());
        Unit::Record(StreamRecord {
            shard_id: record.shard_id.as_str().into(),
            sequence_number: record.sequence_number.as_str().into(),
            sub_sequence: 0,
            aggregated: false,
            partition_key: serde_json::to_string(&keys).unwrap_or_default().into(),
            explicit_hash_key: None,
            data: Bytes::new(),
            approximate_arrival: record.created_at,
            event_source_arn: Some(stream_arn.clone()),
            change: Some(Arc::new(record)),
        })
    }

    /// The unit of one Kinesis record: `base` describes it (its `data` is
    /// replaced), `data` is its payload, de-aggregated if it is a KPL
    /// aggregate (user records share the payload's buffer; nothing is
    /// copied). A corrupt aggregate, or one with no user records, is a
    /// [`Unit::Broken`] record (reported, never consumed silently).
    pub fn kinesis(base: StreamRecord, data: Bytes) -> Unit {
        let users = kpl::deaggregate(&data)
            .map(|users| {
                users.map(|users| {
                    users
                        .into_iter()
                        .enumerate()
                        .map(|(i, u)| StreamRecord {
                            sub_sequence: i as u64,
                            aggregated: true,
                            partition_key: u.partition_key.into(),
                            explicit_hash_key: u.explicit_hash_key.map(str::to_owned),
                            data: data.slice_ref(u.data),
                            ..base.clone()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .map_err(|e| e.to_string());
        match users {
            Ok(None) => Unit::Record(StreamRecord { data, ..base }),
            Ok(Some(records)) if !records.is_empty() => Unit::Records(records),
            Ok(Some(_)) => {
                let error = RecordError::Aggregate {
                    sequence_number: base.sequence_number.to_string(),
                    error: "the aggregate holds no user records".to_owned(),
                };
                Unit::Broken(Box::new(StreamRecord { data, ..base }), error)
            }
            Err(error) => {
                let error = RecordError::Aggregate {
                    sequence_number: base.sequence_number.to_string(),
                    error,
                };
                Unit::Broken(Box::new(StreamRecord { data, ..base }), error)
            }
        }
    }
}
