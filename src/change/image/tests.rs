//! The decoder against `serde_dynamo`: every attribute type decodes to
//! the values `serde_dynamo` decodes it to, where both keep them exactly.

use super::*;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The same image decoded by `serde_dynamo` from its attribute values.
/// It reads a number as an `i64`, `u64` or `f64`: the images compared
/// with it hold numbers those keep exactly (where it rounds, the
/// decoders differ: see `number_tests`).
fn by_serde_dynamo<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let item: serde_dynamo::Item = serde_json::from_str(text).map_err(|e| e.to_string())?;
    serde_dynamo::from_item(item).map_err(|e| e.to_string())
}

const IMAGE: &str = r#"{
    "id": {"S": "o-1"},
    "amount": {"N": "1250"},
    "negative": {"N": "-3"},
    "big": {"N": "18446744073709551615"},
    "rate": {"N": "0.25"},
    "paid": {"BOOL": true},
    "gone": {"NULL": true},
    "tags": {"SS": ["a", "b"]},
    "sizes": {"NS": ["1", "2.5"]},
    "lines": {"L": [{"M": {"sku": {"S": "x"}, "qty": {"N": "2"}}}, {"S": "loose"}]},
    "address": {"M": {"city": {"S": "Lyon"}, "zip": {"NULL": true}}}
}"#;

#[test]
fn every_attribute_type_decodes_as_serde_dynamo_decodes_it() {
    let direct: Value = from_image_json(IMAGE).unwrap();
    assert_eq!(direct, by_serde_dynamo::<Value>(IMAGE).unwrap());
    assert_eq!(direct["amount"], json!(1250));
    assert_eq!(direct["big"], json!(u64::MAX));
    assert_eq!(direct["gone"], Value::Null);
    assert_eq!(direct["lines"][0]["qty"], json!(2));
    assert_eq!(direct["sizes"], json!([1, 2.5]));
    // Beyond u64 and f64, serde_dynamo rounds; the text is kept.
    let big = r#"{"big": {"N": "123456789012345678901"}}"#;
    let rounded = by_serde_dynamo::<Value>(big).unwrap();
    assert_eq!(rounded["big"], json!(123456789012345678901.0));
    #[cfg(not(feature = "arbitrary-precision"))]
    assert_eq!(
        from_image_json::<Value>(big).unwrap()["big"],
        json!("123456789012345678901")
    );
    // Bytes have no JSON value, for either.
    for binary in [r#"{"b": {"B": "aGk="}}"#, r#"{"b": {"BS": ["aGk="]}}"#] {
        assert!(from_image_json::<Value>(binary).is_err());
        assert!(by_serde_dynamo::<Value>(binary).is_err());
    }
}

#[derive(Debug, Deserialize, PartialEq)]
struct Line {
    sku: String,
    qty: u32,
}

#[derive(Debug, Deserialize, PartialEq)]
pub(super) enum Status {
    Open,
    Held { reason: String },
    Moved(u8),
}

#[derive(Debug, Deserialize, PartialEq)]
struct Order {
    id: String,
    amount: u64,
    negative: i8,
    rate: f32,
    paid: bool,
    gone: Option<String>,
    missing: Option<String>,
    blob: serde_bytes_like::Bytes,
    tags: Vec<String>,
    sizes: Vec<f64>,
    address: BTreeMap<String, Option<String>>,
    status: Status,
    held: Status,
    moved: Status,
    id_again: Wrapper,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Wrapper(String);

/// Bytes through `deserialize_bytes` (what `serde_bytes` does).
pub(super) mod serde_bytes_like {
    #[derive(Debug, PartialEq)]
    pub struct Bytes(pub Vec<u8>);
    impl<'de> serde::Deserialize<'de> for Bytes {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
            struct V;
            impl serde::de::Visitor<'_> for V {
                type Value = Bytes;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
                    Ok(Bytes(v.to_vec()))
                }
            }
            d.deserialize_bytes(V)
        }
    }
}

#[test]
fn a_typed_item_decodes_as_serde_dynamo_decodes_it() {
    let text = r#"{
        "id": {"S": "o-1"}, "amount": {"N": "1250"}, "negative": {"N": "-3"},
        "rate": {"N": "0.1"}, "paid": {"BOOL": false}, "gone": {"NULL": true},
        "blob": {"B": "aGVsbG8="}, "tags": {"SS": ["a"]}, "sizes": {"NS": ["1", "2.5"]},
        "address": {"M": {"city": {"S": "Lyon"}, "zip": {"NULL": true}}},
        "status": {"S": "Open"},
        "held": {"M": {"Held": {"M": {"reason": {"S": "fraud"}}}}},
        "moved": {"M": {"Moved": {"N": "7"}}},
        "id_again": {"S": "o-1"}
    }"#;
    let direct: Order = from_image_json(text).unwrap();
    assert_eq!(direct, by_serde_dynamo::<Order>(text).unwrap());
    assert_eq!(direct.blob.0, b"hello");
    assert_eq!(direct.rate, 0.1f32);
    assert_eq!(direct.gone, None);
    assert_eq!(
        direct.held,
        Status::Held {
            reason: "fraud".into()
        }
    );
}

#[test]
fn a_struct_reads_a_list_as_serde_dynamo_does() {
    let text = r#"{"line": {"L": [{"S": "x"}, {"N": "3"}]}}"#;
    #[derive(Debug, Deserialize, PartialEq)]
    struct Holder {
        line: Line,
    }
    let direct: Holder = from_image_json(text).unwrap();
    assert_eq!(direct, by_serde_dynamo::<Holder>(text).unwrap());
}

/// Each kind of bad image is an error, as it is for `serde_dynamo`.
#[test]
fn bad_images_are_errors() {
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Typed {
        amount: u64,
    }
    let bad: &[(&str, &str)] = &[
        (r#"{"amount": {"S": "twenty"}}"#, "invalid type"),
        (r#"{"amount": {"N": "twenty"}}"#, "not a number"),
        (r#"{"amount": {"N": "1.5"}}"#, "invalid type"),
        (r#"{"amount": {"X": "1"}}"#, "unknown variant"),
        (r#"{"amount": {}}"#, "without a type"),
        (r#"{"amount": {"N": "1", "S": "1"}}"#, "more than one type"),
        (r#"{"amount": {"NULL": false}}"#, "invalid value"),
        (r#"{"amount": "1"}"#, "invalid type"),
        (r#"{"amount": {"N": "1"}"#, "EOF"),
        (r#"{"amount": {"N": "1"}} x"#, "trailing"),
    ];
    for (text, why) in bad {
        let error = from_image_json::<Typed>(text).unwrap_err().to_string();
        assert!(error.contains(why), "{text}: {error}");
        assert!(by_serde_dynamo::<Typed>(text).is_err(), "{text}");
    }
    let error = from_image_json::<Value>(r#"{"b": {"B": "***"}}"#).unwrap_err();
    assert!(error.to_string().contains("not base64"), "{error}");
    let error = from_image_json::<Value>(r#"{"n": {"NS": ["1", "x"]}}"#).unwrap_err();
    assert!(error.to_string().contains("not a number"), "{error}");
}
