//! The elements of an `L` (attribute values), and of an `NS` or `BS`
//! (bare numbers or binaries, each read as an attribute of that type).

use crate::change::image::attribute::{AttributeSeq, Tag, TypedSeed};
use crate::change::image::Hint;
use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;
use std::fmt;

/// The elements of an `L`, `NS` or `BS`, each read as its kind says.
pub(super) struct Elements<V> {
    pub(super) kind: Kind,
    pub(super) visitor: V,
}

/// What a list holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
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
