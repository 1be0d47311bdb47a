//! An item and an attribute value read by their type: the map of
//! attribute values, each `{"<type>": <value>}`, and the value handed to
//! the visitor as its type and what the visitor asked for say.

use crate::change::image::elements::{Elements, Kind};
use crate::change::image::variant::OneVariant;
use crate::change::image::Hint;
use crate::change::number::NumberVisitor;
use crate::processing::base64;
use serde::de::{
    self, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde::forward_to_deserialize_any;
use std::fmt;

/// A map of attribute values (an image, or an `M` attribute's value).
pub(super) struct Item<D>(pub(super) D);

/// One attribute value, `{"<type>": <value>}`.
pub(super) struct Attribute<D>(D);

/// The attribute types.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Tag {
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
pub(super) struct AttributeSeq<A>(pub(super) A);

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
pub(super) struct AttributeSeed<S>(pub(super) S);

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
pub(super) struct TypedSeed<V> {
    pub(super) tag: Tag,
    pub(super) hint: Hint,
    pub(super) visitor: V,
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

/// A `B`'s value: base64 text decoded (DynamoDB JSON), or bytes as they
/// are (the SDK's attribute values).
struct BytesVisitor<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for BytesVisitor<V> {
    type Value = V::Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("base64 in a string")
    }
    /// The bytes of an SDK attribute value, as they are.
    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<V::Value, E> {
        self.0.visit_borrowed_bytes(v)
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<V::Value, E> {
        self.0.visit_bytes(v)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        match base64::decode(v.as_bytes()) {
            Ok(bytes) => self.0.visit_byte_buf(bytes),
            Err(e) => Err(E::custom(format_args!("B is not base64: {e}"))),
        }
    }
}
