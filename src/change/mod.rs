//! Typed DynamoDB changes: one record of a DynamoDB stream decoded into a
//! [`Change`] of the user's type, from an event source mapping's JSON text
//! or from the SDK's attribute values the reader reads. The items a handler
//! uses are re-exported by [`crate::processing`].
//!
//! - `typed`: the [`Change`] type, its decision from a record's parts, and
//!   the [`changes`] handler adapter.
//! - `record`: [`ChangeRecord`], one record of a DynamoDB stream as the SDK
//!   reads it, which the reader hands over.
//! - `text`: a change read from a record's JSON text in one pass.
//! - `keys`: a changed item's [`Keys`].
//! - `image`: DynamoDB images, as JSON text or SDK attribute values,
//!   decoded into a type.
//! - `number`: their numbers, read exactly.

pub(crate) mod image;
pub(crate) mod keys;
mod number;
pub(crate) mod record;
pub(crate) mod text;
pub(crate) mod typed;

pub use image::from_image_json;
pub use keys::Keys;
pub use record::{ChangeKind, ChangeRecord, Image};
pub use typed::{changes, is_ttl_deletion, Change, ChangeHandler, ChangeParts};
