//! One module per target, each with `run(data)`: what one input does and
//! what it must satisfy. [`ALL`] names them for the bounded runs.

pub mod ddb_sdk_image;
pub mod ddb_stream_image;
pub mod kcl_item;
pub mod kinesis_event;
pub mod kinesis_record;
pub mod kpl_deaggregate;
pub mod positions_file;
pub mod sequence_number;
pub mod state_item;

use std::future::Future;
use std::sync::OnceLock;

/// A target: what one input does and must satisfy.
pub type Target = fn(&[u8]);

/// Every target, by name (the name of its corpus folder).
pub const ALL: &[(&str, Target)] = &[
    ("ddb_sdk_image", ddb_sdk_image::run),
    ("ddb_stream_image", ddb_stream_image::run),
    ("kcl_item", kcl_item::run),
    ("kinesis_event", kinesis_event::run),
    ("kinesis_record", kinesis_record::run),
    ("kpl_deaggregate", kpl_deaggregate::run),
    ("positions_file", positions_file::run),
    ("sequence_number", sequence_number::run),
    ("state_item", state_item::run),
];

/// Runs `future` to completion on a single-threaded runtime that lives as
/// long as the process (one per fuzzing process, not one per input).
pub fn block_on<F: Future>(future: F) -> F::Output {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a current-thread runtime builds")
        })
        .block_on(future)
}

/// True if `part` lies inside `whole` (same memory, not just equal bytes).
pub fn within(whole: &[u8], part: &[u8]) -> bool {
    let start = whole.as_ptr() as usize;
    let end = start + whole.len();
    let p = part.as_ptr() as usize;
    p >= start && p + part.len() <= end
}

/// A DynamoDB item written as DynamoDB JSON (`{"pk": {"S": "..."}}`, as
/// the table's API and `aws dynamodb get-item` show it), as the SDK holds
/// it; `None` if the text is not such an item.
pub fn dynamodb_item(
    data: &[u8],
) -> Option<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
    let item: serde_dynamo::Item = serde_json::from_slice(data).ok()?;
    Some(item.into())
}
