//! DynamoDB images decoded straight into the user's type: a serde
//! `Deserializer` over the tagged form of an image (`{"name": {"S": "..."},
//! ...}`) that drives `T`'s visitor as it reads. The tagged form comes from
//! an image's DynamoDB JSON text, or from the SDK's attribute values
//! presented in that form (`sdk`): one decoder, two inputs, and neither is
//! turned into the other first. Every attribute type but numbers is read
//! as `serde_dynamo` reads it (`B` and `BS` as bytes, from base64 in text;
//! `NULL` as unit or `None`; `SS`, `NS`, `BS` and `L` as sequences; `M` as
//! a map, or an enum with one variant key), so the decoded values are the
//! same.
//!
//! Numbers (an `N`, an element of an `NS`) are read exactly: DynamoDB keeps
//! up to 38 significant digits, beyond `i64`, `u64` and `f64`, and only a
//! float field rounds one. How a number is read depends on what the type
//! asks for:
//!
//! - A string (`String`, `&str`, `Cow<str>`) gets the number's text as
//!   stored.
//! - An `i128` or `u128` gets the text as that integer; a number out of the
//!   type's range, or not written as an integer (`1.5`, `2E+3`), is an
//!   error. The smaller integer types get an `i64` or `u64` (and the
//!   type's own range error beyond).
//! - An `f64` or `f32` gets the nearest float: the one place where a number
//!   is rounded.
//! - A type that takes any value (`serde_json::Value`, decimal types such as
//!   `rust_decimal::Decimal` or `bigdecimal::BigDecimal`, serde's internally
//!   tagged and untagged enums and `flatten`) gets an `i64`, else a `u64`,
//!   else an `f64` if the `f64` is exact, else the text as a string (which
//!   decimal types read exactly; a `Value` holds it as a string). An `f64`
//!   is exact when its shortest decimal form, the one Rust writes, is the
//!   same number as the text (`0.1`, `2.5`, `1E+100`): reading the number
//!   into the `f64` and writing it back loses nothing. `0.30000000000000001`
//!   and `12345678901234567890123` are not exact.
//! - With the crate's `arbitrary-precision` feature (which turns on
//!   `serde_json`'s `arbitrary_precision` for the whole build), that last
//!   case hands the visitor the number as `serde_json` hands its own
//!   arbitrary-precision numbers (a map with the one key
//!   `$serde_json::private::Number`), so that `serde_json::Number` and
//!   `Value` hold it exactly as a number. A decimal type must then read
//!   that form, as it must for `serde_json`'s own numbers (`rust_decimal`
//!   does with its `serde-arbitrary-precision` feature).
//! - Text that is not a number is an error whatever the type: a number is
//!   an optional sign, digits with at most one decimal point, and an
//!   optional exponent (`e` or `E`, an optional sign, digits); `NaN`,
//!   `inf` and spaces are not numbers.
//!
//! A type that takes any value is never handed an `i128` or `u128`: serde's
//! buffered forms (tagged and untagged enums, `flatten`), `serde_json`'s
//! `Value` without `arbitrary_precision` and `rust_decimal` reject them,
//! and all of them read the text.

//!
//! Its parts: `attribute` (an item and an attribute value read by their
//! type), `elements` (the elements of lists and sets), `variant` (an enum
//! from a map of one entry), `sdk` (the SDK's attribute values in the
//! tagged form).

use crate::change::image::attribute::Item;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::{self, Deserializer, Error as _};
use std::collections::HashMap;

/// The `Deserializer` methods of a type with `fn read(self, Hint, V)`:
/// each passes on what the caller asked for as a [`Hint`]; the rest read
/// whatever the attribute's type says.
macro_rules! deserialize_by_hint {
    ($error:ty) => {
        fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, $error> {
            self.read(Hint::Any, visitor)
        }
        fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, $error> {
            self.read(Hint::Option, visitor)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            _fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, $error> {
            self.read(Hint::Struct, visitor)
        }
        fn deserialize_enum<V: Visitor<'de>>(
            self,
            name: &'static str,
            variants: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, $error> {
            self.read(Hint::Enum(name, variants), visitor)
        }
        fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, $error> {
            self.read(Hint::Char, visitor)
        }
        fn deserialize_newtype_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            visitor: V,
        ) -> Result<V::Value, $error> {
            self.read(Hint::NewtypeStruct, visitor)
        }

        deserialize_numbers_by_hint!($error);

        forward_to_deserialize_any! {
            bool bytes byte_buf unit unit_struct seq tuple tuple_struct map
            identifier ignored_any
        }
    };
}

/// The `Deserializer` methods whose request decides how a number is read
/// (see the module docs), for a type with `fn read(self, Hint, V)`.
macro_rules! deserialize_numbers_by_hint {
    ($error:ty) => {
        deserialize_numbers_by_hint! {
            $error;
            Str: deserialize_str deserialize_string;
            Integer: deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
                deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64;
            I128: deserialize_i128;
            U128: deserialize_u128;
            F32: deserialize_f32;
            F64: deserialize_f64;
        }
    };
    ($error:ty; $($hint:ident: $($method:ident)*;)*) => {
        $($(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, $error> {
                self.read(Hint::$hint, visitor)
            }
        )*)*
    };
}

mod attribute;
mod elements;
mod sdk;
#[cfg(test)]
mod tests;
mod variant;

/// Decodes one image, the text of a DynamoDB JSON map of attribute values,
/// into `T`. The error is serde_json's, with the position in `text`.
///
/// Attribute types are read as `serde_dynamo` reads them, but numbers are
/// never rounded unless `T` asks for a float: a string field gets a
/// number's text as stored, an `i128` or `u128` field the integer (an
/// error if it does not fit), an `f64` or `f32` field the nearest float,
/// and a type that takes any value (`serde_json::Value`, a decimal type
/// such as `rust_decimal::Decimal`) an `i64`, else a `u64`, else an `f64`
/// if writing the `f64` back gives the same number, else the text as a
/// string. With the `arbitrary-precision` feature that last case hands the
/// number to `serde_json::Number` and `Value` exactly, as a number. An `N`
/// that is not a number is an error for every type.
pub fn from_image_json<'de, T: de::Deserialize<'de>>(text: &'de str) -> serde_json::Result<T> {
    let mut json = serde_json::Deserializer::from_str(text);
    let value = T::deserialize(Item(&mut json))?;
    json.end()?;
    Ok(value)
}

/// Decodes the image `d` presents in the tagged form (a `serde_json::Value`
/// or map of DynamoDB JSON attribute values, or the SDK's attribute values
/// through `sdk`) into `T`, as [`from_image_json`] decodes its text.
pub(crate) fn from_attribute_map<'de, T: de::Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<T, D::Error> {
    T::deserialize(Item(d))
}

/// Decodes the image at the start of `text` (what follows it is not
/// read) into `T`, as [`from_image_json`] does, and says where the image
/// ends: for a scanner that decodes an image where it finds it, instead of
/// skipping it first.
pub(crate) fn image_at<T: de::DeserializeOwned>(text: &str) -> serde_json::Result<(T, usize)> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<ImageOf<T>>();
    match values.next() {
        Some(value) => value.map(|ImageOf(value)| (value, values.byte_offset())),
        None => Err(serde_json::Error::custom("no image")),
    }
}

/// A `T` read from an image.
struct ImageOf<T>(T);

impl<'de, T: de::Deserialize<'de>> de::Deserialize<'de> for ImageOf<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(Item(d)).map(ImageOf)
    }
}

/// Decodes an image as the SDK holds it (`aws_sdk_dynamodb` attribute
/// values) into `T`, as [`from_image_json`] decodes its text: the same
/// values, numbers as exactly, without writing the image as text.
pub(crate) fn from_sdk_image<'de, T: de::Deserialize<'de>>(
    image: &'de HashMap<String, AttributeValue>,
) -> serde_json::Result<T> {
    from_attribute_map(sdk::SdkItem(image))
}

/// What the visitor asked for, where the attribute type alone does not say
/// what to call.
#[derive(Clone, Copy)]
pub(super) enum Hint {
    Any,
    Option,
    /// A struct: a map, or a sequence from an `L`.
    Struct,
    Enum(&'static str, &'static [&'static str]),
    F32,
    F64,
    Char,
    NewtypeStruct,
    /// A string: a number's text as it is written.
    Str,
    /// An integer type of at most 64 bits.
    Integer,
    I128,
    U128,
}
