//! The event-source-mapped processors, driven as Lambda drives them, and
//! the ready-made processing functions.

mod call_errors;
mod dynamodb;
pub(crate) mod esm_contract;
mod esm_idempotency;
mod functions;
mod idempotency;
mod kinesis;
mod runtime_layers;
mod windows;
