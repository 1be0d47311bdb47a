//! DynamoDB numbers read exactly, as the image decoder (`image`) hands an
//! `N` to the type it decodes into: the number's text checked as a decimal,
//! then given as the visitor asked for it (the rules are in `image`'s
//! module docs).

use crate::change::image::Hint;
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
        // (Saturating: an exponent at i64's edge is still a number.)
        let point = (self.int.len() as i64 - start as i64).saturating_add(exponent);
        Some((start, end, point))
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

#[cfg(test)]
mod tests;
