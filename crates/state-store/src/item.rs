//! Reading and writing raw DynamoDB attribute values, with typed errors for malformed items.

use crate::error::{Result, StateError};
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;
use std::fmt::Display;

/// A raw DynamoDB item.
pub type RawItem = HashMap<String, AttributeValue>;

/// A string attribute value.
pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// A number attribute value.
pub(crate) fn n(v: impl Display) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A list of strings attribute value.
pub(crate) fn str_list<T: AsRef<str>>(values: &[T]) -> AttributeValue {
    AttributeValue::L(values.iter().map(|v| s(v.as_ref())).collect())
}

/// Typed access to the attributes of one stored item.
pub(crate) struct ItemReader<'a> {
    item: &'a RawItem,
}

impl<'a> ItemReader<'a> {
    pub(crate) fn new(item: &'a RawItem) -> Self {
        ItemReader { item }
    }

    fn key(&self) -> String {
        match self.item.get(crate::schema::SK) {
            Some(AttributeValue::S(sk)) => sk.clone(),
            _ => "<no sort key>".to_owned(),
        }
    }

    fn corrupt(&self, name: &str, reason: &str) -> StateError {
        StateError::Corrupt {
            key: self.key(),
            reason: format!("attribute {name}: {reason}"),
        }
    }

    pub(crate) fn opt_s(&self, name: &str) -> Result<Option<&'a str>> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::S(v)) => Ok(Some(v.as_str())),
            Some(_) => Err(self.corrupt(name, "expected a string")),
        }
    }

    pub(crate) fn s(&self, name: &str) -> Result<&'a str> {
        self.opt_s(name)?
            .ok_or_else(|| self.corrupt(name, "missing"))
    }

    pub(crate) fn opt_i64(&self, name: &str) -> Result<Option<i64>> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::N(v)) => v
                .parse()
                .map(Some)
                .map_err(|_| self.corrupt(name, "not an integer")),
            Some(_) => Err(self.corrupt(name, "expected a number")),
        }
    }

    pub(crate) fn i64_or(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.opt_i64(name)?.unwrap_or(default))
    }

    pub(crate) fn u64_or(&self, name: &str, default: u64) -> Result<u64> {
        Ok(self.opt_u64(name)?.unwrap_or(default))
    }

    pub(crate) fn opt_u64(&self, name: &str) -> Result<Option<u64>> {
        self.opt_i64(name)?
            .map(|v| u64::try_from(v).map_err(|_| self.corrupt(name, "negative")))
            .transpose()
    }

    pub(crate) fn bool_or(&self, name: &str, default: bool) -> Result<bool> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(default),
            Some(AttributeValue::Bool(v)) => Ok(*v),
            Some(_) => Err(self.corrupt(name, "expected a boolean")),
        }
    }

    /// A list of strings, stored as a list (`L`) or a string set (`SS`); absent is empty.
    pub(crate) fn strings(&self, name: &str) -> Result<Vec<&'a str>> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(Vec::new()),
            Some(AttributeValue::Ss(v)) => Ok(v.iter().map(String::as_str).collect()),
            Some(AttributeValue::L(v)) => v
                .iter()
                .map(|x| match x {
                    AttributeValue::S(s) => Ok(s.as_str()),
                    _ => Err(self.corrupt(name, "list holds a non-string")),
                })
                .collect(),
            Some(_) => Err(self.corrupt(name, "expected a list of strings")),
        }
    }

    /// Wraps a validation failure of a stored value as a corrupt item.
    pub(crate) fn parse<T>(&self, name: &str, parsed: Result<T>) -> Result<T> {
        parsed.map_err(|e| self.corrupt(name, &e.to_string()))
    }
}

/// Builds the expression attribute maps of one request from short placeholders.
#[derive(Debug, Default)]
pub(crate) struct Expr {
    pub(crate) names: HashMap<String, String>,
    pub(crate) values: HashMap<String, AttributeValue>,
}

impl Expr {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Registers attribute names as `#<name>` placeholders.
    pub(crate) fn names(mut self, names: &[&str]) -> Self {
        for name in names {
            self.names.insert(format!("#{name}"), (*name).to_owned());
        }
        self
    }

    /// Registers a value under the placeholder `:<key>`.
    pub(crate) fn value(mut self, key: &str, value: AttributeValue) -> Self {
        self.values.insert(format!(":{key}"), value);
        self
    }

    /// Only the placeholders that `texts` use: DynamoDB rejects unused ones.
    pub(crate) fn used_in(&self, texts: &[&str]) -> Expr {
        let used = |placeholder: &str| {
            texts.iter().any(|text| {
                text.match_indices(placeholder).any(|(at, _)| {
                    !text[at + placeholder.len()..]
                        .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                })
            })
        };
        Expr {
            names: self
                .names
                .iter()
                .filter(|(k, _)| used(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            values: self
                .values
                .iter()
                .filter(|(k, _)| used(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    pub(crate) fn names_opt(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    pub(crate) fn values_opt(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_in_keeps_whole_placeholders_only() {
        let expr = Expr::new()
            .names(&["cp", "cp_ord", "owner"])
            .value("n", n(1))
            .value("now", n(2));
        let used = expr.used_in(&["SET #cp_ord = :now", "attribute_exists(pk)"]);
        assert_eq!(used.names.keys().collect::<Vec<_>>(), vec!["#cp_ord"]);
        assert_eq!(used.values.keys().collect::<Vec<_>>(), vec![":now"]);
    }
}
