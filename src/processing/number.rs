//! DynamoDB numbers read exactly, as the image decoder (`image`) hands an
//! `N` to the type it decodes into: the number's text checked as a decimal,
//! then given as the visitor asked for it (the rules are in `image`'s
//! module docs).

use crate::processing::image::Hint;
use serde::de::{self, Visitor};
#[cfg(feature = "arbitrary-precision")]
use serde::de::{DeserializeSeed, MapAccess};
use std::fmt;

/// An `N`'s text, read as the visitor asked (see the module docs).
pub(super) struct NumberVisitor<V> {
    hint: Hint,
    visitor: V,
}

impl<V> NumberVisitor<V> {
    /// Reads an `N` for `visitor`, which asked for `hint`.
    pub(super) fn new(hint: Hint, visitor: V) -> Self {
        NumberVisitor { hint, visitor }
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for NumberVisitor<V> {
    type Value = V::Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number in a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.read(v, Some(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.read(v, None)
    }
}

impl<'de, V: Visitor<'de>> NumberVisitor<V> {
    /// Reads the number `v`; `borrowed` is the same text where it lives as
    /// long as the input (a `&str` field can borrow it).
    fn read<E: de::Error>(self, v: &str, borrowed: Option<&'de str>) -> Result<V::Value, E> {
        let Some(number) = DecimalText::parse(v) else {
            return Err(E::custom(format_args!("N {v:?} is not a number")));
        };
        let visitor = self.visitor;
        match self.hint {
            Hint::Str => match borrowed {
                Some(v) => visitor.visit_borrowed_str(v),
                None => visitor.visit_str(v),
            },
            // Rust's float syntax takes every text `DecimalText` takes.
            Hint::F32 => match v.parse::<f32>() {
                Ok(f) => visitor.visit_f32(f),
                Err(e) => Err(E::custom(format_args!("N {v:?} is not a number: {e}"))),
            },
            Hint::F64 => match v.parse::<f64>() {
                Ok(f) => visitor.visit_f64(f),
                Err(e) => Err(E::custom(format_args!("N {v:?} is not a number: {e}"))),
            },
            Hint::I128 => visitor.visit_i128(number.integer(v, "i128")?),
            Hint::U128 => visitor.visit_u128(number.integer(v, "u128")?),
            Hint::Integer => {
                if let Ok(i) = v.parse::<i64>() {
                    visitor.visit_i64(i)
                } else if let Ok(u) = v.parse::<u64>() {
                    visitor.visit_u64(u)
                } else if let Ok(i) = v.parse::<i128>() {
                    // Out of the integer type's range: its visitor says so.
                    visitor.visit_i128(i)
                } else if let Ok(u) = v.parse::<u128>() {
                    visitor.visit_u128(u)
                } else {
                    any_number(v, &number, borrowed, visitor)
                }
            }
            _ => any_number(v, &number, borrowed, visitor),
        }
    }
}

/// The number `v` for a visitor that takes any value: an `i64`, else a
/// `u64`, else an `f64` if it is exact, else the text (with the
/// `arbitrary-precision` feature, as `serde_json`'s arbitrary-precision
/// number).
fn any_number<'de, V: Visitor<'de>, E: de::Error>(
    v: &str,
    number: &DecimalText<'_>,
    borrowed: Option<&'de str>,
    visitor: V,
) -> Result<V::Value, E> {
    if let Ok(i) = v.parse::<i64>() {
        return visitor.visit_i64(i);
    }
    if let Ok(u) = v.parse::<u64>() {
        return visitor.visit_u64(u);
    }
    if let Some(f) = number.exact_f64(v) {
        return visitor.visit_f64(f);
    }
    #[cfg(feature = "arbitrary-precision")]
    {
        let _ = borrowed;
        visitor.visit_map(JsonNumber {
            text: Some(number.to_json(v)),
            error: std::marker::PhantomData,
        })
    }
    #[cfg(not(feature = "arbitrary-precision"))]
    match borrowed {
        Some(v) => visitor.visit_borrowed_str(v),
        None => visitor.visit_str(v),
    }
}

/// A number's text read as a decimal, without converting it: an optional
/// sign, digits with at most one decimal point (at least one digit), and an
/// optional exponent (`e` or `E`, an optional sign, digits), as DynamoDB
/// takes numbers. Nothing else is a number: not `NaN`, `inf` or spaces.
struct DecimalText<'a> {
    negative: bool,
    /// The digits before the point.
    int: &'a str,
    /// The digits after the point, if a point is written.
    frac: Option<&'a str>,
    /// What follows the `e` or `E`, if written.
    exponent: Option<&'a str>,
}

impl<'a> DecimalText<'a> {
    fn parse(text: &'a str) -> Option<DecimalText<'a>> {
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        let (int, frac) = match mantissa.split_once('.') {
            Some((int, frac)) => (int, Some(frac)),
            None => (mantissa, None),
        };
        let frac_digits = frac.unwrap_or("");
        if !digits(int) || !digits(frac_digits) || int.len() + frac_digits.len() == 0 {
            return None;
        }
        if let Some(e) = exponent {
            let e = e.strip_prefix(['+', '-']).unwrap_or(e);
            if e.is_empty() || !digits(e) {
                return None;
            }
        }
        Some(DecimalText {
            negative,
            int,
            frac,
            exponent,
        })
    }

    /// The `i`th digit, counting across the point.
    fn digit(&self, i: usize) -> u8 {
        match self.int.as_bytes().get(i) {
            Some(d) => *d,
            None => self.frac.unwrap_or("").as_bytes()[i - self.int.len()],
        }
    }

    /// The significant digits (from the first to the last that is not
    /// zero: `start..end` in the digits across the point) and the power of
    /// ten `p` with the number = ±0.DIGITS × 10^p; `None` for zero.
    fn significand(&self) -> Option<(usize, usize, i64)> {
        let len = self.int.len() + self.frac.map_or(0, str::len);
        let start = (0..len).find(|&i| self.digit(i) != b'0')?;
        let end = (0..len).rfind(|&i| self.digit(i) != b'0')? + 1;
        // An exponent too long for an i64 is far beyond any f64: saturated.
        let exponent = match self.exponent {
            None => 0,
            Some(e) => e.parse::<i64>().unwrap_or(if e.starts_with('-') {
                i64::MIN / 2
            } else {
                i64::MAX / 2
            }),
        };
        Some((start, end, self.int.len() as i64 - start as i64 + exponent))
    }

    /// True if both are the same number (`1.50E+3` and `1500`).
    fn same_number(&self, other: &DecimalText<'_>) -> bool {
        match (self.significand(), other.significand()) {
            (None, None) => true,
            (Some((start, end, point)), Some((o_start, o_end, o_point))) => {
                self.negative == other.negative
                    && point == o_point
                    && end - start == o_end - o_start
                    && (0..end - start).all(|i| self.digit(start + i) == other.digit(o_start + i))
            }
            _ => false,
        }
    }

    /// The number `text` (this one) as an `f64` if the `f64` is exact:
    /// if its shortest decimal form, the one Rust writes, is the same
    /// number, so that reading it as an `f64` and writing it back loses
    /// nothing. (`0.1` is exact in this sense, `0.30000000000000001` and
    /// `12345678901234567890123` are not.)
    fn exact_f64(&self, text: &str) -> Option<f64> {
        let f = text.parse::<f64>().ok().filter(|f| f.is_finite())?;
        match self.significand() {
            None => return Some(f),
            // Up to 15 significant digits between the extremes of the
            // normal f64 range always come back the same (`f64::DIGITS`):
            // no need to write the f64 out.
            Some((start, end, point))
                if end - start <= f64::DIGITS as usize && (-300..=300).contains(&point) =>
            {
                return Some(f)
            }
            Some(_) => {}
        }
        let shortest = format!("{f:e}");
        DecimalText::parse(&shortest)
            .is_some_and(|written| written.same_number(self))
            .then_some(f)
    }

    /// The number `text` (this one) as an `i128` or `u128` (`kind`): an
    /// error names the number if it is not an integer in the type's range.
    fn integer<T: std::str::FromStr, E: de::Error>(&self, text: &str, kind: &str) -> Result<T, E> {
        let zero = self.significand().is_none();
        let integer = self.frac.is_none() && self.exponent.is_none();
        // Rust does not read "-0" as an unsigned integer.
        let parsed = if zero && integer {
            "0".parse::<T>()
        } else {
            text.parse::<T>()
        };
        parsed.map_err(|_| {
            if integer {
                E::custom(format_args!("N {text:?} is out of range for {kind}"))
            } else {
                E::custom(format_args!(
                    "N {text:?} is not an integer (written without a point or an exponent) for {kind}"
                ))
            }
        })
    }

    /// The number `text` (this one) as JSON writes a number: no `+`, no
    /// leading zeros, digits on both sides of a point.
    #[cfg(feature = "arbitrary-precision")]
    fn to_json<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        let plus = text.starts_with('+');
        let int_ok = self.int == "0" || !(self.int.is_empty() || self.int.starts_with('0'));
        let frac_ok = self.frac.is_none_or(|f| !f.is_empty());
        if !plus && int_ok && frac_ok {
            return text.into();
        }
        let mut json = String::with_capacity(text.len() + 1);
        if self.negative {
            json.push('-');
        }
        match self.int.trim_start_matches('0') {
            "" => json.push('0'),
            int => json.push_str(int),
        }
        if let Some(frac) = self.frac.filter(|f| !f.is_empty()) {
            json.push('.');
            json.push_str(frac);
        }
        if let Some(exponent) = self.exponent {
            json.push('e');
            json.push_str(exponent);
        }
        json.into()
    }
}

/// A number as `serde_json` hands its arbitrary-precision numbers to a
/// visitor (`serde_json`'s `number.rs`: a map of one entry, the key
/// `$serde_json::private::Number`, the number's JSON text the value), which
/// `serde_json::Number` and `Value` read exactly.
#[cfg(feature = "arbitrary-precision")]
struct JsonNumber<'a, E> {
    /// The number's text, until the value is read.
    text: Option<std::borrow::Cow<'a, str>>,
    error: std::marker::PhantomData<E>,
}

#[cfg(feature = "arbitrary-precision")]
const JSON_NUMBER_KEY: &str = "$serde_json::private::Number";

#[cfg(feature = "arbitrary-precision")]
impl<'de, E: de::Error> MapAccess<'de> for JsonNumber<'_, E> {
    type Error = E;
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, E> {
        if self.text.is_none() {
            return Ok(None);
        }
        seed.deserialize(de::value::StrDeserializer::<E>::new(JSON_NUMBER_KEY))
            .map(Some)
    }
    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, E> {
        let text = self
            .text
            .take()
            .ok_or_else(|| E::custom("a number's value read twice"))?;
        seed.deserialize(de::value::StrDeserializer::<E>::new(&text))
    }
    fn size_hint(&self) -> Option<usize> {
        Some(usize::from(self.text.is_some()))
    }
}

/// Each test fails where an `N` was read as i64, else u64, else f64.
#[cfg(test)]
mod tests {
    use crate::processing::image::from_image_json;
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
}
