//! Every decoder of an item the store reads back, run on one item, for the
//! fuzz targets and tests (the `testing` feature; not a part of the API).
//! An item read from the table may have been written by another version,
//! edited by hand or damaged: each decoder reads it or returns a typed
//! error, never panics.

use crate::error::StateError;
use crate::item::RawItem;
use crate::model::{ConsumerState, EfoState, ShardState, StoredShardPosition, StreamState};

/// Each decoder's name and what it made of `item`.
pub fn decode_every(item: &RawItem) -> Vec<(&'static str, Result<(), StateError>)> {
    vec![
        ("lease", crate::lease::lease_from(item).map(drop)),
        ("parked record", crate::records::parked_from(item).map(drop)),
        (
            "batch progress",
            crate::batch::progress_from(item).map(drop),
        ),
        ("shard", ShardState::from_item(item).map(drop)),
        ("stream", StreamState::from_item(item).map(drop)),
        ("consumer", ConsumerState::from_item("c-1", item).map(drop)),
        ("efo consumer", EfoState::from_item("efo-1", item).map(drop)),
        (
            "ddb position",
            StoredShardPosition::from_item(item).map(drop),
        ),
        ("layout move", crate::layout::moving_to(item).map(drop)),
    ]
}
