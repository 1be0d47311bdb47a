//! One Kinesis record's payload as a shard worker holds it after
//! `GetRecords` or `SubscribeToShard` (`Unit::kinesis`: owned bytes,
//! de-aggregated when they are a KPL aggregate).
//!
//! Checked: a payload that is not an aggregate is one record, unchanged;
//! an aggregate's user records are numbered 0, 1, 2, … under the record's
//! sequence number, each payload inside the record's buffer (never a
//! copy; an empty one may be its own), each key within Kinesis' limit, and the keys' copies together
//! no longer than the record (memory in proportion to the record, however
//! many user records share a key); a broken aggregate is an `Aggregate`
//! error naming the record.

use bytes::Bytes;
use shardkeeper::kpl::{is_aggregated, MAX_PARTITION_KEY_CHARS};
use shardkeeper::processing::{RecordError, StreamRecord, Unit};
use std::collections::HashMap;
use std::sync::Arc;

const SEQUENCE: &str = "49590338271490256608559692538361571095921575989136588898";

/// One input.
pub fn run(data: &[u8]) {
    let payload = Bytes::copy_from_slice(data);
    let base = StreamRecord {
        shard_id: Arc::from("shardId-000000000000"),
        sequence_number: Arc::from(SEQUENCE),
        sub_sequence: 0,
        aggregated: false,
        partition_key: Arc::from("outer"),
        explicit_hash_key: None,
        data: Bytes::new(),
        approximate_arrival: None,
        event_source_arn: None,
        change: None,
    };
    match Unit::kinesis(base, payload.clone()) {
        Unit::Record(record) => {
            assert!(!record.aggregated && record.sub_sequence == 0);
            assert_eq!(record.data, payload, "a plain payload is changed");
        }
        Unit::Records(users) => {
            assert!(is_aggregated(data), "user records from a plain payload");
            let mut copies: HashMap<*const u8, usize> = HashMap::new();
            for (i, user) in users.iter().enumerate() {
                assert!(user.aggregated);
                assert_eq!(user.sub_sequence, i as u64, "user records out of order");
                assert_eq!(&*user.sequence_number, SEQUENCE);
                assert!(
                    user.data.is_empty() || super::within(&payload, &user.data),
                    "a user record's payload is a copy"
                );
                assert!(user.partition_key.chars().count() <= MAX_PARTITION_KEY_CHARS);
                copies.insert(user.partition_key.as_ptr(), user.partition_key.len());
            }
            assert!(
                copies.values().sum::<usize>() <= data.len(),
                "the keys' copies outgrow the record"
            );
        }
        Unit::Broken(record, error) => {
            assert!(is_aggregated(data), "a plain payload is broken");
            assert_eq!(record.data, payload);
            assert!(
                matches!(&error, RecordError::Aggregate { sequence_number, .. } if sequence_number == SEQUENCE),
                "{error:?}"
            );
        }
        Unit::Unreadable(..) => panic!("a record with a payload is unreadable"),
    }
}
