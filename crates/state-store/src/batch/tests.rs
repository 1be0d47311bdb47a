use super::*;

#[test]
fn prefixes_round_trip_and_a_torn_value_is_an_error() {
    let prefixes = vec![
        PrefixDigest {
            records: 1,
            digest: [7; 16],
        },
        PrefixDigest {
            records: 70_000,
            digest: [9; 16],
        },
    ];
    let bytes = encode_prefixes(&prefixes);
    assert_eq!(decode_prefixes(&bytes).unwrap(), prefixes);
    assert!(decode_prefixes(&bytes[..bytes.len() - 1]).is_err());
}

#[test]
fn key_parts_refuse_the_separator_and_empty_names() {
    let key = |consumer: &str, shard: Option<&str>, event: Option<&str>| BatchKey {
        consumer: consumer.to_owned(),
        stream: "arn:aws:kinesis:us-east-1:123456789012:stream/s".to_owned(),
        shard: shard.map(str::to_owned),
        first_event_id: event.map(str::to_owned),
        first: SequenceNumber::new("42").unwrap(),
    };
    assert!(key("orders", Some("shardId-0"), None).validate().is_ok());
    assert!(key("orders", None, Some("c4ca4238")).validate().is_ok());
    assert!(key("", Some("shardId-0"), None).validate().is_err());
    assert!(key("a#b", Some("shardId-0"), None).validate().is_err());
    assert!(key("orders", None, None).validate().is_err());
    assert!(key("orders", None, Some("x#y")).validate().is_err());
    let k = key("orders", None, Some("c4ca4238"));
    assert!(k
        .sort_key()
        .ends_with(&format!("#c4ca4238#{}", k.first.sortable())));
}
