//! A unit of work: one record of a batch as the core receives it.

use crate::kpl;
use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use bytes::Bytes;

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
