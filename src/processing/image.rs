//! DynamoDB JSON images decoded straight into the user's type: a serde
//! `Deserializer` over the image's text (`{"name": {"S": "..."}, ...}`) that
//! drives `T`'s visitor as it reads, without building attribute value maps
//! first. Every attribute type but numbers is read as `serde_dynamo` reads
//! it (`B` and `BS` as base64 bytes; `NULL` as unit or `None`; `SS`, `NS`,
//! `BS` and `L` as sequences; `M` as a map, or an enum with one variant
//! key), so the decoded values are the same.
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

use crate::processing::number::NumberVisitor;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, Error as _, IgnoredAny, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};
use serde::forward_to_deserialize_any;
use std::fmt;

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

/// Decodes an image already parsed into `d` (a `serde_json::Value`, or a
/// map of attribute values, in DynamoDB JSON) into `T`, as
/// [`from_image_json`] decodes its text.
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

/// A map of attribute values (an image, or an `M` attribute's value).
struct Item<D>(D);

/// One attribute value, `{"<type>": <value>}`.
struct Attribute<D>(D);

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

/// The attribute types.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tag {
    S,
    N,
    B,
    Bool,
    Null,
    M,
    L,
    Ss,
    Ns,
    Bs,
}

const TAGS: &[&str] = &["S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS"];

impl<'de> de::Deserialize<'de> for Tag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Tag, D::Error> {
        struct TagVisitor;
        impl Visitor<'_> for TagVisitor {
            type Value = Tag;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a DynamoDB attribute type")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Tag, E> {
                Ok(match v {
                    "S" => Tag::S,
                    "N" => Tag::N,
                    "B" => Tag::B,
                    "BOOL" => Tag::Bool,
                    "NULL" => Tag::Null,
                    "M" => Tag::M,
                    "L" => Tag::L,
                    "SS" => Tag::Ss,
                    "NS" => Tag::Ns,
                    "BS" => Tag::Bs,
                    other => return Err(E::unknown_variant(other, TAGS)),
                })
            }
        }
        d.deserialize_str(TagVisitor)
    }
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Item<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(Attributes(visitor))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(OneVariant(visitor))
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

/// Reads a JSON map whose values are attribute values, for `V`.
struct Attributes<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for Attributes<V> {
    type Value = V::Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of DynamoDB attribute values")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(AttributeMap(map))
    }
}

/// The entries of a map of attribute values: plain keys, attribute values.
struct AttributeMap<A>(A);

impl<'de, A: MapAccess<'de>> MapAccess<'de> for AttributeMap<A> {
    type Error = A::Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(seed)
    }
    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.0.next_value_seed(AttributeSeed(seed))
    }
    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// The elements of an `L`: attribute values.
struct AttributeSeq<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for AttributeSeq<A> {
    type Error = A::Error;
    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        self.0.next_element_seed(AttributeSeed(seed))
    }
    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// Deserializes the seed's value from an attribute value.
struct AttributeSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for AttributeSeed<S> {
    type Value = S::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Attribute(d))
    }
}

impl<D> Attribute<D> {
    fn read<'de, V: Visitor<'de>>(self, hint: Hint, visitor: V) -> Result<V::Value, D::Error>
    where
        D: Deserializer<'de>,
    {
        self.0.deserialize_map(Tagged { hint, visitor })
    }
}

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

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Attribute<D> {
    type Error = D::Error;

    deserialize_by_hint!(D::Error);
}

/// Reads `{"<type>": <value>}` and hands the value to the visitor as its
/// type says.
struct Tagged<V> {
    hint: Hint,
    visitor: V,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Tagged<V> {
    type Value = V::Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a DynamoDB attribute value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<V::Value, A::Error> {
        let Some(tag) = map.next_key::<Tag>()? else {
            return Err(A::Error::custom("an attribute value without a type"));
        };
        let value = match (tag, self.hint) {
            (Tag::Null, Hint::Option) => {
                map.next_value_seed(TypedSeed {
                    tag,
                    hint: Hint::Any,
                    visitor: NullVisitor,
                })?;
                self.visitor.visit_none()
            }
            (_, Hint::Option) => self.visitor.visit_some(Pending { tag, map: &mut map }),
            (_, Hint::NewtypeStruct) => self
                .visitor
                .visit_newtype_struct(Pending { tag, map: &mut map }),
            (tag, hint) => map.next_value_seed(TypedSeed {
                tag,
                hint,
                visitor: self.visitor,
            }),
        }?;
        if map.next_key::<IgnoredAny>()?.is_some() {
            return Err(A::Error::custom(
                "an attribute value with more than one type",
            ));
        }
        Ok(value)
    }
}

/// An attribute value whose type is read and whose value is next in `map`:
/// what `Some(..)` and a newtype struct wrap.
struct Pending<'a, A> {
    tag: Tag,
    map: &'a mut A,
}

impl<'a, 'de, A: MapAccess<'de>> Pending<'a, A> {
    fn read<V: Visitor<'de>>(self, hint: Hint, visitor: V) -> Result<V::Value, A::Error> {
        let tag = self.tag;
        match (tag, hint) {
            (_, Hint::Option) => visitor.visit_some(self),
            (_, Hint::NewtypeStruct) => visitor.visit_newtype_struct(self),
            _ => self.map.next_value_seed(TypedSeed { tag, hint, visitor }),
        }
    }
}

impl<'a, 'de, A: MapAccess<'de>> Deserializer<'de> for Pending<'a, A> {
    type Error = A::Error;

    deserialize_by_hint!(A::Error);
}

/// The value of an attribute of a known type.
struct TypedSeed<V> {
    tag: Tag,
    hint: Hint,
    visitor: V,
}

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for TypedSeed<V> {
    type Value = V::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        let TypedSeed { tag, hint, visitor } = self;
        match tag {
            Tag::S => match hint {
                Hint::Enum(name, variants) => d.deserialize_enum(name, variants, visitor),
                Hint::Char => d.deserialize_char(visitor),
                Hint::Struct => Err(D::Error::custom("expected a map, found an S attribute")),
                _ => d.deserialize_str(visitor),
            },
            Tag::N => d.deserialize_str(NumberVisitor::new(hint, visitor)),
            Tag::B => d.deserialize_str(BytesVisitor(visitor)),
            Tag::Bool => d.deserialize_bool(visitor),
            Tag::Null => {
                d.deserialize_bool(NullVisitor)?;
                visitor.visit_unit()
            }
            Tag::M => match hint {
                Hint::Enum(..) => d.deserialize_map(OneVariant(visitor)),
                _ => d.deserialize_map(Attributes(visitor)),
            },
            Tag::L => d.deserialize_seq(Elements {
                kind: Kind::Attributes,
                visitor,
            }),
            Tag::Ss | Tag::Ns | Tag::Bs if matches!(hint, Hint::Struct) => {
                Err(D::Error::custom("expected a map, found a set"))
            }
            Tag::Ss => d.deserialize_seq(visitor),
            Tag::Ns => d.deserialize_seq(Elements {
                kind: Kind::Numbers,
                visitor,
            }),
            Tag::Bs => d.deserialize_seq(Elements {
                kind: Kind::Bytes,
                visitor,
            }),
        }
    }
}

/// `NULL`'s value, which must be `true`.
struct NullVisitor;

impl Visitor<'_> for NullVisitor {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("true (the value of a NULL attribute)")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        if v {
            Ok(())
        } else {
            Err(E::invalid_value(de::Unexpected::Bool(v), &self))
        }
    }
    /// What the attribute stands for, once its `true` is read.
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// A `B`'s base64 string, decoded.
struct BytesVisitor<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for BytesVisitor<V> {
    type Value = V::Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("base64 in a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        match BASE64.decode(v) {
            Ok(bytes) => self.0.visit_byte_buf(bytes),
            Err(e) => Err(E::custom(format_args!("B is not base64: {e}"))),
        }
    }
}

/// The elements of an `L`, `NS` or `BS`, each read as its kind says.
struct Elements<V> {
    kind: Kind,
    visitor: V,
}

/// What a list holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Attributes,
    Numbers,
    Bytes,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Elements<V> {
    type Value = V::Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        match self.kind {
            Kind::Attributes => self.visitor.visit_seq(AttributeSeq(seq)),
            kind => self.visitor.visit_seq(ScalarSeq { kind, seq }),
        }
    }
}

/// The elements of an `NS` (number strings) or a `BS` (base64 strings).
struct ScalarSeq<A> {
    kind: Kind,
    seq: A,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for ScalarSeq<A> {
    type Error = A::Error;
    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        let tag = if self.kind == Kind::Numbers {
            Tag::N
        } else {
            Tag::B
        };
        self.seq.next_element_seed(ScalarSeed { tag, seed })
    }
    fn size_hint(&self) -> Option<usize> {
        self.seq.size_hint()
    }
}

/// One element of a number or binary set.
struct ScalarSeed<S> {
    tag: Tag,
    seed: S,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for ScalarSeed<S> {
    type Value = S::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Scalar { tag: self.tag, d })
    }
}

/// A bare number or base64 string (a set's element), read as an attribute
/// of that type.
struct Scalar<D> {
    tag: Tag,
    d: D,
}

impl<D> Scalar<D> {
    fn read<'de, V: Visitor<'de>>(self, hint: Hint, visitor: V) -> Result<V::Value, D::Error>
    where
        D: Deserializer<'de>,
    {
        TypedSeed {
            tag: self.tag,
            hint,
            visitor,
        }
        .deserialize(self.d)
    }
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Scalar<D> {
    type Error = D::Error;
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.read(Hint::Any, visitor)
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        visitor.visit_some(self)
    }

    deserialize_numbers_by_hint!(D::Error);

    forward_to_deserialize_any! {
        bool char bytes byte_buf unit unit_struct newtype_struct seq tuple tuple_struct map
        struct enum identifier ignored_any
    }
}

/// An enum from a map of one entry: the variant's name, and its value as an
/// attribute value.
struct OneVariant<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for OneVariant<V> {
    type Value = V::Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of one variant")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<V::Value, A::Error> {
        let value = self.0.visit_enum(VariantMap(&mut map))?;
        if map.next_key::<IgnoredAny>()?.is_some() {
            return Err(A::Error::custom("an enum map with more than one variant"));
        }
        Ok(value)
    }
}

struct VariantMap<'a, A>(&'a mut A);

impl<'a, 'de, A: MapAccess<'de>> EnumAccess<'de> for VariantMap<'a, A> {
    type Error = A::Error;
    type Variant = Self;
    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self), A::Error> {
        match self.0.next_key_seed(seed)? {
            Some(variant) => Ok((variant, self)),
            None => Err(A::Error::custom("an enum map without a variant")),
        }
    }
}

impl<'a, 'de, A: MapAccess<'de>> VariantAccess<'de> for VariantMap<'a, A> {
    type Error = A::Error;
    fn unit_variant(self) -> Result<(), A::Error> {
        self.0
            .next_value_seed(AttributeSeed(std::marker::PhantomData::<IgnoredAny>))?;
        Ok(())
    }
    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        self.0.next_value_seed(AttributeSeed(seed))
    }
    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.next_value_seed(AttributeSeed(VisitorSeed(visitor)))
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.next_value_seed(AttributeSeed(VisitorSeed(visitor)))
    }
}

/// Hands whatever the deserializer holds to a visitor.
struct VisitorSeed<V>(V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for VisitorSeed<V> {
    type Value = V::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        d.deserialize_any(self.0)
    }
}

#[cfg(test)]
mod tests {
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
    enum Status {
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
    mod serde_bytes_like {
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
}
