//! What an item costs: its size by DynamoDB's rules, and the capacity units it uses.

use crate::item::RawItem;
use aws_sdk_dynamodb::types::AttributeValue;

/// The size of a number value: about one byte per two significant digits, plus one.
fn number_size(text: &str) -> usize {
    let digits = text
        .trim_start_matches('-')
        .split(['e', 'E'])
        .next()
        .unwrap_or("")
        .replace('.', "");
    let significant = digits
        .trim_start_matches('0')
        .trim_end_matches('0')
        .len()
        .max(1);
    significant.div_ceil(2) + 1
}

/// The size of one attribute value, as DynamoDB counts it.
pub fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(v) => v.len(),
        AttributeValue::N(v) => number_size(v),
        AttributeValue::B(v) => v.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|x| number_size(x)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(v) => 3 + v.iter().map(|x| 1 + value_size(x)).sum::<usize>(),
        AttributeValue::M(v) => {
            3 + v
                .iter()
                .map(|(k, x)| 1 + k.len() + value_size(x))
                .sum::<usize>()
        }
        _ => 0,
    }
}

/// The size of an item: the UTF-8 length of each attribute name plus the size of its value.
pub fn item_size(item: &RawItem) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

/// Write capacity units of writing an item of `size` bytes (1 WCU per started KB).
pub fn write_units(size: usize) -> u64 {
    size.div_ceil(1024).max(1) as u64
}

/// Read capacity units of a strongly consistent read of `size` bytes (1 RCU per started 4 KB).
pub fn read_units(size: usize) -> u64 {
    size.div_ceil(4096).max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_dynamodb_rules() {
        let item: RawItem = [
            ("pk".to_owned(), AttributeValue::S("g#s".into())),
            ("n".to_owned(), AttributeValue::N("12345".into())),
            ("b".to_owned(), AttributeValue::Bool(true)),
            (
                "l".to_owned(),
                AttributeValue::L(vec![AttributeValue::S("ab".into())]),
            ),
        ]
        .into_iter()
        .collect();
        // pk: 2 + 3, n: 1 + 4, b: 1 + 1, l: 1 + (3 + 1 + 2)
        assert_eq!(item_size(&item), 5 + 5 + 2 + 7);
        assert_eq!(write_units(1), 1);
        assert_eq!(write_units(1024), 1);
        assert_eq!(write_units(1025), 2);
        assert_eq!(read_units(4097), 2);
    }
}
