//! Each test fails where an `N` was read as i64, else u64, else f64.

use crate::change::image::from_image_json;
use rust_decimal::Decimal;
use serde::Deserialize;
use serde_json::{json, Value};
use std::str::FromStr;

/// 38 significant digits, DynamoDB's most; beyond u64 and f64.
const BIG: &str = "12345678901234567890123456789012345678";
const NEGATIVE_BIG: &str = "-12345678901234567890123456789012345678";

fn image(attributes: &[(&str, &str)]) -> String {
    let attributes: Vec<String> = attributes
        .iter()
        .map(|(name, value)| format!("{name:?}: {value}"))
        .collect();
    format!("{{{}}}", attributes.join(", "))
}

fn n(text: &str) -> String {
    format!(r#"{{"N": "{text}"}}"#)
}

#[test]
fn a_number_decodes_into_a_string_as_its_text() {
    #[derive(Debug, Deserialize)]
    struct Texts<'a> {
        big: String,
        negative: String,
        small: String,
        written: String,
        #[serde(borrow)]
        borrowed: &'a str,
        set: Vec<String>,
        optional: Option<String>,
    }
    let text = image(&[
        ("big", &n(BIG)),
        ("negative", &n(NEGATIVE_BIG)),
        ("small", &n("7")),
        ("written", &n("1.50E+3")),
        ("borrowed", &n("0.10")),
        ("set", &format!(r#"{{"NS": ["{BIG}", "2.5", "-0"]}}"#)),
        ("optional", &n(BIG)),
    ]);
    let texts: Texts<'_> = from_image_json(&text).unwrap();
    assert_eq!(texts.big, BIG);
    assert_eq!(texts.negative, NEGATIVE_BIG);
    assert_eq!(texts.small, "7");
    assert_eq!(texts.written, "1.50E+3");
    assert_eq!(texts.borrowed, "0.10");
    assert_eq!(texts.set, [BIG, "2.5", "-0"]);
    assert_eq!(texts.optional.as_deref(), Some(BIG));
}

#[test]
fn an_integer_decodes_into_i128_and_u128() {
    #[derive(Debug, Deserialize)]
    struct Wide {
        i: i128,
        negative: i128,
        u: u128,
        small: i128,
        set: Vec<u128>,
    }
    let text = image(&[
        ("i", &n(BIG)),
        ("negative", &n(NEGATIVE_BIG)),
        ("u", &n(BIG)),
        ("small", &n("-3")),
        ("set", &format!(r#"{{"NS": ["{BIG}", "1"]}}"#)),
    ]);
    let wide: Wide = from_image_json(&text).unwrap();
    let big = i128::from_str(BIG).unwrap();
    assert_eq!((wide.i, wide.negative, wide.small), (big, -big, -3));
    assert_eq!(wide.u, big as u128);
    assert_eq!(wide.set, [big as u128, 1]);

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Signed {
        n: i128,
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Unsigned {
        n: u128,
    }
    let too_big = "340282366920938463463374607431768211456"; // 2^128
    let signed = |v: &str| from_image_json::<Signed>(&image(&[("n", &n(v))])).unwrap_err();
    let unsigned = |v: &str| from_image_json::<Unsigned>(&image(&[("n", &n(v))])).unwrap_err();
    for error in [signed(too_big), unsigned(too_big), unsigned("-1")] {
        assert!(error.to_string().contains("out of range"), "{error}");
    }
    for error in [signed("1.5"), unsigned("2E+3")] {
        assert!(error.to_string().contains("not an integer"), "{error}");
    }
}

/// (With the `arbitrary-precision` feature a decimal type must read
/// `serde_json`'s arbitrary-precision numbers instead: see
/// `with_arbitrary_precision_a_json_number_keeps_every_digit`.)
#[cfg(not(feature = "arbitrary-precision"))]
#[test]
fn a_decimal_decodes_exactly() {
    #[derive(Debug, Deserialize)]
    struct Prices {
        long: Decimal,
        integer: Decimal,
        tenth: Decimal,
        cents: Decimal,
        set: Vec<Decimal>,
        optional: Option<Decimal>,
    }
    let long = "1234567890123456.789012345678"; // 28 significant digits
    let integer = "1234567890123456789012345678";
    let text = image(&[
        ("long", &n(long)),
        ("integer", &n(integer)),
        ("tenth", &n("0.1")),
        ("cents", &n("-19.99")),
        ("set", &format!(r#"{{"NS": ["{long}", "7"]}}"#)),
        ("optional", &n(long)),
    ]);
    let prices: Prices = from_image_json(&text).unwrap();
    let long = Decimal::from_str(long).unwrap();
    assert_eq!(prices.long, long);
    assert_eq!(prices.integer, Decimal::from_str(integer).unwrap());
    assert_eq!(prices.tenth, Decimal::from_str("0.1").unwrap());
    assert_eq!(prices.cents, Decimal::from_str("-19.99").unwrap());
    assert_eq!(prices.set, [long, Decimal::from(7)]);
    assert_eq!(prices.optional, Some(long));
}

/// An `f64` field gets the nearest `f64`; a `serde_json::Value` never
/// gets a rounded number.
#[test]
fn only_an_f64_field_rounds_a_number() {
    #[derive(Debug, Deserialize)]
    struct Both {
        f: f64,
        v: Value,
    }
    let text = image(&[("f", &n(BIG)), ("v", &n(BIG))]);
    let both: Both = from_image_json(&text).unwrap();
    assert_eq!(both.f, f64::from_str(BIG).unwrap());
    #[cfg(not(feature = "arbitrary-precision"))]
    assert_eq!(both.v, json!(BIG));
    #[cfg(feature = "arbitrary-precision")]
    assert_eq!(both.v.to_string(), BIG);

    // What an f64 holds exactly (its shortest form is the number) stays
    // a JSON number; the rest is not rounded.
    let value: Value = from_image_json(&image(&[
        ("tenth", &n("0.1")),
        ("quarter", &n("0.25")),
        ("huge", &n("1E+100")),
        ("max", &n("18446744073709551615")),
        ("min", &n("-9223372036854775808")),
        ("long", &n("0.12345678901234567890")),
        ("set", r#"{"NS": ["2.5", "0.30000000000000001"]}"#),
    ]))
    .unwrap();
    assert_eq!(value["tenth"], json!(0.1));
    assert_eq!(value["quarter"], json!(0.25));
    assert_eq!(value["huge"], json!(1e100));
    assert_eq!(value["max"], json!(u64::MAX));
    assert_eq!(value["min"], json!(i64::MIN));
    assert_eq!(value["set"][0], json!(2.5));
    #[cfg(not(feature = "arbitrary-precision"))]
    {
        assert_eq!(value["long"], json!("0.12345678901234567890"));
        assert_eq!(value["set"][1], json!("0.30000000000000001"));
    }
    #[cfg(feature = "arbitrary-precision")]
    {
        assert_eq!(value["long"].to_string(), "0.12345678901234567890");
        assert_eq!(value["set"][1].to_string(), "0.30000000000000001");
    }
}

/// The rule for an exact `f64`: its shortest form is the same number.
#[test]
fn an_f64_is_exact_when_its_shortest_form_is_the_number() {
    let exact = |text: &str| super::DecimalText::parse(text).unwrap().exact_f64(text);
    for (text, f) in [
        ("0.1", 0.1),
        ("-2.50", -2.5),
        ("1.50E+3", 1500.0),
        ("+.5", 0.5),
        ("0", 0.0),
        ("-0.000", 0.0),
        ("1E+100", 1e100),
        ("1.7976931348623157e308", f64::MAX),
        ("5e-324", 5e-324),
        ("123456789012345.6", 123456789012345.6),
        ("100000000000000000000000", 1e23),
    ] {
        assert_eq!(exact(text), Some(f), "{text}");
    }
    for text in [
        "0.30000000000000001",
        "0.1000000000000000055511151231257827",
        "1234567890.12345678",
        "12345678901234567890123",
        "4.9e-324",
        "1e400",
        BIG,
    ] {
        assert_eq!(exact(text), None, "{text}");
    }
    // Exponents at i64's edge: read, never an overflow.
    for text in [
        "1e9223372036854775807",
        "12e9223372036854775807",
        "0.001e-9223372036854775808",
        "1e99999999999999999999",
    ] {
        assert_eq!(exact(text), None, "{text}");
        assert!(!super::DecimalText::parse(text)
            .unwrap()
            .same_number(&super::DecimalText::parse("1").unwrap()));
    }
}

/// With the `arbitrary-precision` feature, `serde_json`'s `Number` and
/// `Value` hold every number exactly, written as JSON writes a number.
#[cfg(feature = "arbitrary-precision")]
#[test]
fn with_arbitrary_precision_a_json_number_keeps_every_digit() {
    #[derive(Debug, Deserialize)]
    struct Numbers {
        big: serde_json::Number,
        negative: serde_json::Number,
        value: Value,
        set: Vec<serde_json::Number>,
    }
    let text = image(&[
        ("big", &n(BIG)),
        ("negative", &n(NEGATIVE_BIG)),
        (
            "value",
            &format!(
                r#"{{"M": {{"a": {}, "b": {}}}}}"#,
                n("+.5"),
                n("007.10E+400")
            ),
        ),
        ("set", &format!(r#"{{"NS": ["{BIG}", "1"]}}"#)),
    ]);
    let numbers: Numbers = from_image_json(&text).unwrap();
    assert_eq!(numbers.big.to_string(), BIG);
    assert_eq!(numbers.negative.to_string(), NEGATIVE_BIG);
    assert_eq!(numbers.value["a"], json!(0.5));
    // serde_json writes the exponent's `e` in lower case.
    assert_eq!(numbers.value["b"].to_string(), "7.10e+400");
    assert_eq!(numbers.set[0].to_string(), BIG);
    assert_eq!(numbers.set[1].as_u64(), Some(1));

    // As with serde_json's own numbers under `arbitrary_precision`, a
    // decimal type must read that form (rust_decimal does with its
    // `serde-arbitrary-precision` feature, not enabled here); a number
    // an f64 holds exactly still reaches it as an f64.
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Price {
        n: Decimal,
    }
    let error = from_image_json::<Price>(&image(&[("n", &n(BIG))])).unwrap_err();
    assert!(error.to_string().contains("invalid type: map"), "{error}");
    let price: Price = from_image_json(&image(&[("n", &n("19.99"))])).unwrap();
    assert_eq!(price.n, Decimal::from_str("19.99").unwrap());
}

/// An `N` whose text is not a number is an error for every type, even
/// one that would take the text as it is.
#[test]
fn a_number_that_is_not_a_number_is_an_error() {
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Any<T> {
        n: T,
    }
    fn error<T: serde::de::DeserializeOwned + std::fmt::Debug>(text: &str) -> String {
        from_image_json::<Any<T>>(text).unwrap_err().to_string()
    }
    for bad in [
        "NaN",
        "inf",
        "-infinity",
        "",
        "1e",
        "0x10",
        " 1",
        "1_000",
        "--1",
        ".",
        "1.2.3",
    ] {
        let text = image(&[("n", &n(bad))]);
        let set = image(&[("n", &format!(r#"{{"NS": ["1", "{bad}"]}}"#))]);
        for error in [
            error::<String>(&text),
            error::<Value>(&text),
            error::<f64>(&text),
            error::<f32>(&text),
            error::<i128>(&text),
            error::<u32>(&text),
            error::<Decimal>(&text),
            error::<Vec<String>>(&set),
            error::<Vec<Value>>(&set),
        ] {
            assert!(error.contains("is not a number"), "{bad:?}: {error}");
        }
    }
}

/// Serde's buffered forms (an internally tagged enum, `flatten`) take
/// a number beyond `f64` as its text, which a decimal or a string reads.
#[cfg(not(feature = "arbitrary-precision"))]
#[test]
fn a_tagged_enum_reads_a_big_number() {
    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(tag = "kind")]
    enum Entity {
        Order {
            id: String,
            total: Decimal,
            count: u32,
        },
    }
    let integer = "1234567890123456789012345678";
    let text = image(&[
        ("kind", r#"{"S": "Order"}"#),
        ("id", &n(BIG)),
        ("total", &n(integer)),
        ("count", &n("12")),
    ]);
    assert_eq!(
        from_image_json::<Entity>(&text).unwrap(),
        Entity::Order {
            id: BIG.into(),
            total: Decimal::from_str(integer).unwrap(),
            count: 12
        }
    );
}
