//! KPL de-aggregation of untrusted record payloads.
//!
//! Every input is tried twice: as it is (a whole Kinesis record payload,
//! magic and digest included), and framed as an aggregate with the magic
//! prefix and a correct MD5 digest, so that the protobuf parser behind the
//! digest check sees every input.

use super::within;
use md5::{Digest, Md5};
use shardkeeper::kpl::{aggregate, deaggregate, is_aggregated, KplError, MAGIC};

/// The fewest body bytes one user record takes: its field key and length,
/// then a partition key index field and a data field of two bytes each.
const MIN_RECORD_BYTES: usize = 6;

const DIGEST_LEN: usize = 16;

/// One input.
pub fn run(data: &[u8]) {
    let _ = check(data);

    let mut framed = MAGIC.to_vec();
    framed.extend_from_slice(data);
    framed.extend_from_slice(&Md5::digest(data));
    let result = check(&framed);
    assert!(
        !matches!(result, Ok(false)),
        "a framed body with a correct digest is an aggregate: {result:?}"
    );
}

/// De-aggregates `input` and checks what comes out; `Ok(true)` for an aggregate.
fn check(input: &[u8]) -> Result<bool, KplError> {
    let records = match deaggregate(input) {
        Ok(None) => {
            // A plain record: no prefix, or a digest that does not match.
            assert!(
                !is_aggregated(input) || {
                    let body = &input[MAGIC.len()..input.len() - DIGEST_LEN];
                    Md5::digest(body).as_slice() != &input[input.len() - DIGEST_LEN..]
                },
                "an aggregate was taken for a plain record"
            );
            return Ok(false);
        }
        Ok(Some(records)) => records,
        Err(e) => {
            assert!(is_aggregated(input), "a plain record failed: {e}");
            assert!(!e.to_string().is_empty());
            return Err(e);
        }
    };
    assert!(is_aggregated(input));
    let body = &input[MAGIC.len()..input.len() - DIGEST_LEN];
    assert!(
        records.len() * MIN_RECORD_BYTES <= body.len(),
        "{} user records out of {} body bytes",
        records.len(),
        body.len()
    );
    for record in &records {
        assert!(within(body, record.data), "data outside the body");
        assert!(within(body, record.partition_key.as_bytes()));
        if let Some(hash_key) = record.explicit_hash_key {
            assert!(within(body, hash_key.as_bytes()));
        }
    }

    let triples: Vec<(&str, Option<&str>, &[u8])> = records
        .iter()
        .map(|r| (r.partition_key, r.explicit_hash_key, r.data))
        .collect();
    let again = aggregate(&triples);
    let round_trip = deaggregate(&again)
        .expect("a re-aggregated record de-aggregates")
        .expect("a re-aggregated record is an aggregate");
    assert_eq!(
        round_trip, records,
        "aggregate then de-aggregate changed the records"
    );
    Ok(true)
}
