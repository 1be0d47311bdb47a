//! The event-source-mapped processors, driven as Lambda drives them, and
//! the ready-made processing functions.

mod dynamodb;
mod functions;
mod kinesis;
mod windows;
