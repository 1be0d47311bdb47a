//! A unit of work: one record of a batch as the core receives it.

use crate::kpl;
use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use crate::processing::ChangeRecord;
use bytes::Bytes;
use std::collections::HashMap;
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

    /// The user records of this unit ready for the handler (none for a
    /// broken or unreadable record).
    pub(crate) fn ready_records(&self) -> &[StreamRecord] {
        match self {
            Unit::Record(record) => std::slice::from_ref(record),
            Unit::Records(records) => records,
            Unit::Broken(..) | Unit::Unreadable(..) => &[],
        }
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
    /// aggregate (user records share the payload's buffer, and the user
    /// records of one partition key share one copy of it: memory stays in
    /// proportion to the record, whatever it holds). A corrupt aggregate,
    /// one with a key longer than Kinesis allows, or one with no user
    /// records, is a [`Unit::Broken`] record (reported, never consumed
    /// silently).
    pub fn kinesis(base: StreamRecord, data: Bytes) -> Unit {
        // One copy per entry of the aggregate's key table: the user
        // records' keys borrow from the table, so one entry is one address.
        let mut keys: HashMap<(usize, usize), Arc<str>> = HashMap::new();
        let users = kpl::deaggregate(&data)
            .map(|users| {
                users.map(|users| {
                    users
                        .into_iter()
                        .enumerate()
                        .map(|(i, u)| StreamRecord {
                            sub_sequence: i as u64,
                            aggregated: true,
                            partition_key: keys
                                .entry((u.partition_key.as_ptr() as usize, u.partition_key.len()))
                                .or_insert_with(|| u.partition_key.into())
                                .clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> StreamRecord {
        StreamRecord {
            shard_id: "shardId-000000000000".into(),
            sequence_number: "1".into(),
            sub_sequence: 0,
            aggregated: false,
            partition_key: "outer".into(),
            explicit_hash_key: None,
            data: Bytes::new(),
            approximate_arrival: None,
            event_source_arn: None,
            change: None,
        }
    }

    #[test]
    fn user_records_of_one_key_share_one_copy_of_it() {
        let key = "k".repeat(kpl::MAX_PARTITION_KEY_CHARS);
        let records: Vec<(&str, Option<&str>, &[u8])> = (0..20_000)
            .map(|i| {
                (
                    if i % 2 == 0 { key.as_str() } else { "other" },
                    None,
                    &b"x"[..],
                )
            })
            .collect();
        let Unit::Records(users) = Unit::kinesis(base(), kpl::aggregate(&records).into()) else {
            panic!("an aggregate");
        };
        assert_eq!(users.len(), 20_000);
        assert!(users
            .iter()
            .step_by(2)
            .all(|u| Arc::ptr_eq(&u.partition_key, &users[0].partition_key)));
        assert!(users
            .iter()
            .skip(1)
            .step_by(2)
            .all(|u| Arc::ptr_eq(&u.partition_key, &users[1].partition_key)));
    }

    /// 20,000 user records under one 20 KB key: a 1 MB record that held
    /// 400 MB of keys once decoded. Kinesis takes no key over 256
    /// characters, so the aggregate is broken, with the reason.
    #[test]
    fn an_aggregate_with_a_key_longer_than_kinesis_allows_is_broken() {
        let key = "k".repeat(20 * 1024);
        let records: Vec<(&str, Option<&str>, &[u8])> = (0..20_000)
            .map(|_| (key.as_str(), None, &b"x"[..]))
            .collect();
        match Unit::kinesis(base(), kpl::aggregate(&records).into()) {
            Unit::Broken(record, RecordError::Aggregate { error, .. }) => {
                assert!(error.contains("256 characters"), "{error}");
                assert_eq!(record.partition_key.as_ref(), "outer");
            }
            other => panic!("broken, not {:?}", std::mem::discriminant(&other)),
        }
        // 256 characters of four bytes each are within the limit.
        let wide = "\u{1F600}".repeat(kpl::MAX_PARTITION_KEY_CHARS);
        let unit = Unit::kinesis(
            base(),
            kpl::aggregate(&[(wide.as_str(), None, b"x")]).into(),
        );
        assert!(unit.is_ready());
        let hash = "1".repeat(kpl::MAX_EXPLICIT_HASH_KEY_LEN + 1);
        let unit = Unit::kinesis(
            base(),
            kpl::aggregate(&[("k", Some(hash.as_str()), b"x")]).into(),
        );
        assert!(matches!(unit, Unit::Broken(..)));
    }
}
