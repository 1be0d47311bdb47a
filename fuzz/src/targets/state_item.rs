//! An item of the state table as the store reads it back: written by
//! another version, edited by hand, or damaged. The input is the item in
//! DynamoDB JSON; every decoder of a stored item (leases, parked records,
//! batch progress, shards, the stream item, consumers, enhanced fan-out
//! consumers, DynamoDB Streams positions, layout moves) reads it or
//! returns a typed error, never panics.

use shardkeeper::state::read_back::decode_every;
use shardkeeper::state::StateError;

/// One input.
pub fn run(data: &[u8]) {
    let Some(item) = super::dynamodb_item(data) else {
        return;
    };
    for (decoder, result) in decode_every(&item) {
        if let Err(e) = result {
            assert!(
                !matches!(e, StateError::Sdk { .. }),
                "{decoder}: decoding made a call? {e}"
            );
            // The error says what it is about.
            assert!(!e.to_string().is_empty(), "{decoder}: an empty error");
        }
    }
}
