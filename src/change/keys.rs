//! The key attributes of a changed item, as a removal carries them.

use crate::change::image::from_attribute_map;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::fmt;

/// The key attributes of a changed item, kept as DynamoDB JSON attribute
/// values (`{"id": {"S": "o1"}}`) rather than decoded into the item's type,
/// which may have required attributes the keys lack: [`Keys::decode`] reads
/// them into a key type when the handler wants one. Two `Keys` are equal if
/// they hold the same attributes, whatever their order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys(Map<String, Value>);

impl Keys {
    /// The keys written as `json`, the DynamoDB JSON text of a map of
    /// attribute values (`{"id": {"S": "o1"}}`); an error if it is not one.
    /// A handler's tests build the removals they expect with it.
    pub fn from_json(json: &str) -> Result<Keys, serde_json::Error> {
        Keys::from_item(serde_json::from_str(json)?)
    }

    /// Every path to keys goes through `serde_dynamo`'s attribute values,
    /// so that keys read from an event's text and from its parsed record
    /// are equal (a `B`'s base64, for one, is written one way).
    pub(crate) fn from_item(item: serde_dynamo::Item) -> Result<Keys, serde_json::Error> {
        match serde_json::to_value(item)? {
            Value::Object(map) => Ok(Keys(map)),
            other => Err(serde::de::Error::custom(format_args!(
                "keys are a map of attribute values, not {other}"
            ))),
        }
    }

    /// The keys decoded into `K` (a struct of the key attributes, say),
    /// as an image is decoded (see [`crate::processing::from_image_json`]:
    /// numbers are read exactly).
    pub fn decode<K: DeserializeOwned>(&self) -> Result<K, serde_json::Error> {
        from_attribute_map(&self.0)
    }

    /// Each key attribute's name and its DynamoDB JSON attribute value.
    pub fn attributes(&self) -> &Map<String, Value> {
        &self.0
    }

    /// True if the record carried no keys.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The keys as DynamoDB JSON text, attributes in name order.
impl fmt::Display for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let json = serde_json::to_string(&self.0).map_err(|_| fmt::Error)?;
        f.write_str(&json)
    }
}
