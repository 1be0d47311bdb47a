//! An enum read from a map of one entry: the variant's name, and its value
//! as an attribute value (`{"M": {"Held": {"M": {...}}}}`).

use crate::change::image::attribute::AttributeSeed;
use serde::de::{
    DeserializeSeed, Deserializer, EnumAccess, Error as _, IgnoredAny, MapAccess, VariantAccess,
    Visitor,
};
use std::fmt;

/// An enum from a map of one entry: the variant's name, and its value as an
/// attribute value.
pub(super) struct OneVariant<V>(pub(super) V);

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
