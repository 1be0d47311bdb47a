//! The SDK's attribute values (`aws_sdk_dynamodb`'s `AttributeValue`) in
//! the tagged form the image decoder reads: an item is a map of attribute
//! values, and each attribute value a map of one entry, its type and its
//! value (`{"S": "..."}`, `{"N": "..."}`, `{"M": {...}}`), as in DynamoDB
//! JSON text. Nothing is copied or written as text: strings and numbers are
//! handed out borrowed, a `B` as its bytes (where the text has base64), so
//! the decoder reads the same values from either input.

use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::value::{
    BorrowedBytesDeserializer, BorrowedStrDeserializer, MapDeserializer, SeqDeserializer,
};
use serde::de::{DeserializeSeed, Deserializer, Error as _, IntoDeserializer, MapAccess, Visitor};
use serde::forward_to_deserialize_any;
use std::collections::HashMap;

/// The error of a decoding from attribute values: serde_json's, as for text.
type Error = serde_json::Error;

/// An item, or an `M`'s value: a map of attribute values.
#[derive(Clone, Copy)]
pub(super) struct SdkItem<'a>(pub(super) &'a HashMap<String, AttributeValue>);

impl<'de> Deserializer<'de> for SdkItem<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let entries = self
            .0
            .iter()
            .map(|(name, value)| (BorrowedStrDeserializer::new(name), SdkValue(value)));
        visitor.visit_map(MapDeserializer::new(entries))
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// One attribute value: a map of one entry, its type and its value.
#[derive(Clone, Copy)]
struct SdkValue<'a>(&'a AttributeValue);

impl<'de> IntoDeserializer<'de, Error> for SdkValue<'de> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> Deserializer<'de> for SdkValue<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(OneEntry {
            value: self.0,
            tag_read: false,
        })
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// The type of an attribute value, as DynamoDB JSON names it.
fn tag(value: &AttributeValue) -> Result<&'static str, Error> {
    Ok(match value {
        AttributeValue::S(_) => "S",
        AttributeValue::N(_) => "N",
        AttributeValue::B(_) => "B",
        AttributeValue::Bool(_) => "BOOL",
        AttributeValue::Null(_) => "NULL",
        AttributeValue::M(_) => "M",
        AttributeValue::L(_) => "L",
        AttributeValue::Ss(_) => "SS",
        AttributeValue::Ns(_) => "NS",
        AttributeValue::Bs(_) => "BS",
        other => {
            return Err(Error::custom(format_args!(
                "unknown attribute type {other:?}"
            )))
        }
    })
}

/// The one entry of an attribute value: its type, then its value.
struct OneEntry<'a> {
    value: &'a AttributeValue,
    tag_read: bool,
}

impl<'de> MapAccess<'de> for OneEntry<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if self.tag_read {
            return Ok(None);
        }
        self.tag_read = true;
        seed.deserialize(BorrowedStrDeserializer::new(tag(self.value)?))
            .map(Some)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        seed.deserialize(Payload(self.value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(usize::from(!self.tag_read))
    }
}

/// An attribute value's value, under its type: a string (`S`, `N`),
/// bytes (`B`), a boolean (`BOOL`, `NULL`), a map of attribute values
/// (`M`), a sequence of attribute values (`L`), of strings (`SS`, `NS`) or
/// of bytes (`BS`).
struct Payload<'a>(&'a AttributeValue);

impl<'de> Deserializer<'de> for Payload<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            AttributeValue::S(text) | AttributeValue::N(text) => visitor.visit_borrowed_str(text),
            AttributeValue::B(bytes) => visitor.visit_borrowed_bytes(bytes.as_ref()),
            AttributeValue::Bool(b) | AttributeValue::Null(b) => visitor.visit_bool(*b),
            AttributeValue::M(map) => SdkItem(map).deserialize_any(visitor),
            AttributeValue::L(list) => {
                visitor.visit_seq(SeqDeserializer::new(list.iter().map(SdkValue)))
            }
            AttributeValue::Ss(texts) | AttributeValue::Ns(texts) => visitor.visit_seq(
                SeqDeserializer::new(texts.iter().map(|t| BorrowedStrDeserializer::new(t))),
            ),
            AttributeValue::Bs(blobs) => visitor.visit_seq(SeqDeserializer::new(
                blobs
                    .iter()
                    .map(|b| BorrowedBytesDeserializer::new(b.as_ref())),
            )),
            other => Err(Error::custom(format_args!(
                "unknown attribute type {other:?}"
            ))),
        }
    }

    /// An `S` read as an enum's unit variant, as a JSON string is.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            AttributeValue::S(text) => {
                BorrowedStrDeserializer::new(text).deserialize_enum(name, variants, visitor)
            }
            _ => self.deserialize_any(visitor),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use crate::change::image::{from_image_json, from_sdk_image};
    use aws_sdk_dynamodb::types::AttributeValue;
    use serde::de::DeserializeOwned;
    use serde::Deserialize;
    use serde_json::Value;
    use std::collections::{BTreeMap, HashMap};
    use std::fmt::Debug;

    /// The SDK's attribute values of an image written as DynamoDB JSON.
    fn sdk(text: &str) -> HashMap<String, AttributeValue> {
        let item: serde_dynamo::Item = serde_json::from_str(text).unwrap();
        item.into()
    }

    /// `text` and its SDK values decode to the same `T`, or both fail.
    fn same<T: DeserializeOwned + PartialEq + Debug>(text: &str) -> Result<T, String> {
        let from_text = from_image_json::<T>(text).map_err(|e| e.to_string());
        let values = sdk(text);
        let from_sdk = from_sdk_image::<T>(&values).map_err(|e| e.to_string());
        match (&from_text, &from_sdk) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
            (Err(_), Err(_)) => {}
            _ => panic!("{text}: from text {from_text:?}, from SDK values {from_sdk:?}"),
        }
        from_sdk
    }

    /// 38 digits, beyond every integer type but `i128` and `u128`, and `f64`.
    const WIDE: &str = "12345678901234567890123456789012345678";

    #[test]
    fn every_attribute_type_decodes_from_sdk_values_as_from_text() {
        let image = format!(
            r#"{{
            "s": {{"S": "o-1"}}, "n": {{"N": "1250"}}, "neg": {{"N": "-3"}},
            "rate": {{"N": "0.25"}}, "tiny": {{"N": "0.30000000000000001"}},
            "wide": {{"N": "{WIDE}"}}, "exp": {{"N": "1E+100"}},
            "b": {{"B": "aGVsbG8="}}, "t": {{"BOOL": true}}, "f": {{"BOOL": false}},
            "null": {{"NULL": true}},
            "ss": {{"SS": ["a", "b"]}}, "ns": {{"NS": ["1", "2.5", "{WIDE}"]}},
            "bs": {{"BS": ["aGk=", "AAE="]}},
            "l": {{"L": [{{"M": {{"sku": {{"S": "x"}}, "qty": {{"N": "2"}}}}}}, {{"S": "loose"}}, {{"NULL": true}}]}},
            "m": {{"M": {{"city": {{"S": "Lyon"}}, "deep": {{"M": {{"n": {{"N": "{WIDE}"}}}}}}}}}}
        }}"#
        );
        // Without bytes, a `Value` holds everything.
        let no_bytes: Value = serde_json::from_str(&image).unwrap();
        let mut no_bytes = no_bytes.as_object().unwrap().clone();
        no_bytes.remove("b");
        no_bytes.remove("bs");
        let value = same::<Value>(&Value::Object(no_bytes).to_string()).unwrap();
        assert_eq!(value["n"], 1250);
        assert_eq!(value["null"], Value::Null);
        #[cfg(not(feature = "arbitrary-precision"))]
        assert_eq!(value["m"]["deep"]["n"], WIDE);

        #[derive(Debug, Deserialize, PartialEq)]
        struct Line {
            sku: String,
            qty: u8,
        }
        #[derive(Debug, Deserialize, PartialEq)]
        #[serde(untagged)]
        enum Element {
            Line(Line),
            Text(String),
            Nothing(()),
        }
        #[derive(Debug, Deserialize, PartialEq)]
        struct Everything {
            s: String,
            n: u64,
            neg: i8,
            rate: f32,
            tiny: String,
            wide: u128,
            exp: f64,
            b: Bytes,
            t: bool,
            f: bool,
            null: Option<String>,
            missing: Option<u8>,
            ss: Vec<String>,
            ns: Vec<String>,
            bs: Vec<Bytes>,
            l: Vec<Element>,
            m: BTreeMap<String, Value>,
        }
        let typed = same::<Everything>(&image).unwrap();
        assert_eq!(typed.b, Bytes(b"hello".to_vec()));
        assert_eq!(typed.bs, [Bytes(b"hi".to_vec()), Bytes(vec![0, 1])]);
        assert_eq!(typed.wide, WIDE.parse::<u128>().unwrap());
        assert_eq!(typed.tiny, "0.30000000000000001");
        assert_eq!(typed.ns, ["1", "2.5", WIDE]);
        assert_eq!(typed.null, None);
        assert_eq!(
            typed.l,
            [
                Element::Line(Line {
                    sku: "x".into(),
                    qty: 2
                }),
                Element::Text("loose".into()),
                Element::Nothing(()),
            ]
        );
    }

    #[test]
    fn enums_newtypes_and_errors_agree() {
        use crate::change::image::tests::Status;
        #[derive(Debug, Deserialize, PartialEq)]
        struct Id(String);
        #[derive(Debug, Deserialize, PartialEq)]
        struct Order {
            id: Id,
            open: Status,
            held: Status,
            moved: Status,
            letter: char,
        }
        let order = same::<Order>(
            r#"{"id": {"S": "o1"}, "open": {"S": "Open"}, "letter": {"S": "x"},
                "held": {"M": {"Held": {"M": {"reason": {"S": "fraud"}}}}},
                "moved": {"M": {"Moved": {"N": "7"}}}}"#,
        )
        .unwrap();
        assert_eq!(order.moved, Status::Moved(7));
        #[derive(Debug, Deserialize, PartialEq)]
        struct Amount {
            amount: u64,
        }
        for bad in [
            r#"{"amount": {"S": "twenty"}}"#,
            r#"{"amount": {"N": "twenty"}}"#,
            r#"{"amount": {"N": "1.5"}}"#,
            r#"{"amount": {"N": "18446744073709551616"}}"#,
            r#"{"amount": {"NULL": true}}"#,
            r#"{"amount": {"SS": ["1"]}}"#,
        ] {
            assert!(same::<Amount>(bad).is_err(), "{bad}");
        }
        // Bytes have no JSON value, from either input.
        assert!(same::<Value>(r#"{"b": {"B": "aGk="}}"#).is_err());
        let null_false = HashMap::from([("n".to_owned(), AttributeValue::Null(false))]);
        let error = from_sdk_image::<Value>(&null_false).unwrap_err();
        assert!(error.to_string().contains("invalid value"), "{error}");
    }

    use crate::change::image::tests::serde_bytes_like::Bytes;
}
