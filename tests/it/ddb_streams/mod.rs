//! The self-managed DynamoDB Streams reader and the replica recipe.

mod errors;
mod reader;
