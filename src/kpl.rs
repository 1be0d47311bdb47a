//! KPL aggregated records: de-aggregation (and aggregation, for producers and tests).
//!
//! An aggregated record is the magic prefix `F3 89 9A C2`, a protobuf
//! `AggregatedRecord`, and the MD5 digest of the protobuf bytes:
//!
//! ```text
//! message AggregatedRecord {
//!   repeated string partition_key_table     = 1;
//!   repeated string explicit_hash_key_table = 2;
//!   repeated Record records                 = 3;
//! }
//! message Record {
//!   required uint64 partition_key_index     = 1;
//!   optional uint64 explicit_hash_key_index = 2;
//!   required bytes  data                    = 3;
//!   repeated Tag    tags                    = 4;
//! }
//! ```
//!
//! A record is an aggregate only if it starts with the magic prefix and its
//! digest matches: a plain record whose bytes happen to start with the
//! prefix is a plain record (as KCL and the Kinesis aggregation libraries
//! read it). The decoder is written for untrusted input: every length is
//! checked against the bytes that remain, nothing is allocated from a length
//! field, and a flaw behind a matching digest is a [`KplError`], never a
//! panic.

use md5::{Digest, Md5};

/// The four bytes every KPL aggregated record starts with.
pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];
const DIGEST_LEN: usize = 16;

/// The longest partition key Kinesis accepts, in characters ("Unicode
/// strings, with a maximum length limit of 256 characters", `PutRecord`'s
/// API reference); a user record's key is held to the same.
pub const MAX_PARTITION_KEY_CHARS: usize = 256;

/// The longest explicit hash key: a 128-bit integer in decimal has at most
/// 39 digits.
pub const MAX_EXPLICIT_HASH_KEY_LEN: usize = 39;

/// Why an aggregated record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KplError {
    /// The protobuf message is malformed.
    #[error("aggregated record protobuf is malformed: {0}")]
    Malformed(&'static str),
    /// A user record names a partition key or hash key index that is not in the table.
    #[error("user record {record} refers to {table} index {index}, table has {len}")]
    BadIndex {
        /// The user record's position in the aggregate.
        record: usize,
        /// Which table.
        table: &'static str,
        /// The index it names.
        index: u64,
        /// The table length.
        len: usize,
    },
}

/// One user record inside an aggregate, borrowing its bytes from the aggregate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord<'a> {
    /// Its partition key.
    pub partition_key: &'a str,
    /// Its explicit hash key, if any.
    pub explicit_hash_key: Option<&'a str>,
    /// Its payload.
    pub data: &'a [u8],
}

/// True if `data` starts with the KPL magic prefix and is long enough to be an aggregate.
pub fn is_aggregated(data: &[u8]) -> bool {
    data.len() >= MAGIC.len() + DIGEST_LEN && data[..MAGIC.len()] == MAGIC
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, KplError> {
        let mut value = 0u64;
        for i in 0..10 {
            let (&byte, rest) = self
                .buf
                .split_first()
                .ok_or(KplError::Malformed("truncated varint"))?;
            self.buf = rest;
            value |= u64::from(byte & 0x7F) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(KplError::Malformed("varint longer than 10 bytes"))
    }

    fn bytes(&mut self) -> Result<&'a [u8], KplError> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| KplError::Malformed("length overflow"))?;
        if len > self.buf.len() {
            return Err(KplError::Malformed("length past the end"));
        }
        let (head, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(head)
    }

    /// Skips a field of `wire` type (for unknown fields).
    fn skip(&mut self, wire: u64) -> Result<(), KplError> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.advance(8),
            2 => self.bytes().map(drop),
            5 => self.advance(4),
            _ => Err(KplError::Malformed("unsupported wire type")),
        }
    }

    fn advance(&mut self, n: usize) -> Result<(), KplError> {
        if n > self.buf.len() {
            return Err(KplError::Malformed("fixed field past the end"));
        }
        self.buf = &self.buf[n..];
        Ok(())
    }
}

fn utf8(bytes: &[u8]) -> Result<&str, KplError> {
    std::str::from_utf8(bytes).map_err(|_| KplError::Malformed("key is not UTF-8"))
}

struct RawRecord<'a> {
    pk_index: Option<u64>,
    ehk_index: Option<u64>,
    data: Option<&'a [u8]>,
}

fn parse_record(bytes: &[u8]) -> Result<RawRecord<'_>, KplError> {
    let mut r = Reader { buf: bytes };
    let mut rec = RawRecord {
        pk_index: None,
        ehk_index: None,
        data: None,
    };
    while !r.buf.is_empty() {
        let key = r.varint()?;
        match (key >> 3, key & 7) {
            (1, 0) => rec.pk_index = Some(r.varint()?),
            (2, 0) => rec.ehk_index = Some(r.varint()?),
            (3, 2) => rec.data = Some(r.bytes()?),
            (_, wire) => r.skip(wire)?,
        }
    }
    Ok(rec)
}

/// Splits an aggregated record into its user records, in order (the
/// sub-sequence number of each is its position). `Ok(None)` if `data` is not
/// an aggregate: no magic prefix, or a digest that does not match (a plain
/// record whose bytes start with the prefix).
pub fn deaggregate(data: &[u8]) -> Result<Option<Vec<UserRecord<'_>>>, KplError> {
    if !is_aggregated(data) {
        return Ok(None);
    }
    let body = &data[MAGIC.len()..data.len() - DIGEST_LEN];
    let digest = &data[data.len() - DIGEST_LEN..];
    if Md5::digest(body).as_slice() != digest {
        tracing::debug!(
            bytes = data.len(),
            "record starts with the KPL prefix but its digest does not match: a plain record"
        );
        return Ok(None);
    }
    let mut r = Reader { buf: body };
    let mut keys: Vec<&str> = Vec::new();
    let mut hash_keys: Vec<&str> = Vec::new();
    let mut raw: Vec<RawRecord<'_>> = Vec::new();
    while !r.buf.is_empty() {
        let key = r.varint()?;
        match (key >> 3, key & 7) {
            (1, 2) => {
                let key = utf8(r.bytes()?)?;
                // (Bytes bound the characters: checked first, counted only
                // when the bytes could be over.)
                if key.len() > MAX_PARTITION_KEY_CHARS
                    && key.chars().count() > MAX_PARTITION_KEY_CHARS
                {
                    return Err(KplError::Malformed(
                        "partition key longer than Kinesis allows (256 characters)",
                    ));
                }
                keys.push(key)
            }
            (2, 2) => {
                let key = utf8(r.bytes()?)?;
                if key.len() > MAX_EXPLICIT_HASH_KEY_LEN {
                    return Err(KplError::Malformed(
                        "explicit hash key longer than a 128-bit integer (39 digits)",
                    ));
                }
                hash_keys.push(key)
            }
            (3, 2) => raw.push(parse_record(r.bytes()?)?),
            (_, wire) => r.skip(wire)?,
        }
    }
    raw.into_iter()
        .enumerate()
        .map(|(i, rec)| {
            let pk = rec.pk_index.ok_or(KplError::Malformed(
                "user record without partition key index",
            ))?;
            let partition_key = *keys.get(pk as usize).ok_or(KplError::BadIndex {
                record: i,
                table: "partition key",
                index: pk,
                len: keys.len(),
            })?;
            let explicit_hash_key = match rec.ehk_index {
                None => None,
                Some(h) => Some(*hash_keys.get(h as usize).ok_or(KplError::BadIndex {
                    record: i,
                    table: "explicit hash key",
                    index: h,
                    len: hash_keys.len(),
                })?),
            };
            Ok(UserRecord {
                partition_key,
                explicit_hash_key,
                data: rec
                    .data
                    .ok_or(KplError::Malformed("user record without data"))?,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn index<'k>(table: &mut Vec<&'k str>, key: &'k str) -> u64 {
    match table.iter().position(|k| *k == key) {
        Some(i) => i as u64,
        None => {
            table.push(key);
            (table.len() - 1) as u64
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Builds a KPL aggregated record from `(partition key, explicit hash key, data)` triples.
pub fn aggregate<'k>(records: &[(&'k str, Option<&'k str>, &[u8])]) -> Vec<u8> {
    let mut keys: Vec<&str> = Vec::new();
    let mut hash_keys: Vec<&str> = Vec::new();
    let mut encoded_records = Vec::new();
    for (pk, ehk, data) in records {
        let mut rec = Vec::new();
        put_varint(&mut rec, 1 << 3);
        put_varint(&mut rec, index(&mut keys, pk));
        if let Some(h) = ehk {
            put_varint(&mut rec, 2 << 3);
            put_varint(&mut rec, index(&mut hash_keys, h));
        }
        put_bytes(&mut rec, 3, data);
        encoded_records.push(rec);
    }
    let mut body = Vec::new();
    for k in &keys {
        put_bytes(&mut body, 1, k.as_bytes());
    }
    for h in &hash_keys {
        put_bytes(&mut body, 2, h.as_bytes());
    }
    for rec in &encoded_records {
        put_bytes(&mut body, 3, rec);
    }
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&body);
    out.extend_from_slice(&Md5::digest(&body));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_keeps_order_keys_and_data() {
        let agg = aggregate(&[
            ("a", None, b"one"),
            ("b", Some("123"), b""),
            ("a", None, b"three"),
        ]);
        assert!(is_aggregated(&agg));
        let records = deaggregate(&agg).unwrap().unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!(
            records[0],
            UserRecord {
                partition_key: "a",
                explicit_hash_key: None,
                data: b"one"
            }
        );
        assert_eq!(records[1].explicit_hash_key, Some("123"));
        assert_eq!(records[1].data, b"");
        assert_eq!(records[2].data, b"three");
    }

    #[test]
    fn plain_records_are_not_aggregates() {
        assert_eq!(deaggregate(b"{\"order\":1}").unwrap(), None);
        assert_eq!(deaggregate(&MAGIC).unwrap(), None, "too short to be one");
    }

    #[test]
    fn corrupt_aggregates_are_errors() {
        // A digest that does not match: a plain record that happens to start
        // with the prefix (KCL's AggregatorUtil reads it so).
        let agg = aggregate(&[("a", None, b"payload")]);
        let mut flipped = agg.clone();
        flipped[8] ^= 0xFF;
        assert_eq!(deaggregate(&flipped).unwrap(), None);
        // A valid digest over a broken body: a length running past the end.
        let mut body = vec![(3 << 3) | 2, 50, 1, 2];
        let mut bad = MAGIC.to_vec();
        bad.append(&mut body.clone());
        bad.extend_from_slice(&Md5::digest(&body));
        assert!(matches!(
            deaggregate(&bad).unwrap_err(),
            KplError::Malformed(_)
        ));
        // A record naming a partition key the table does not have.
        body.clear();
        let mut rec = Vec::new();
        put_varint(&mut rec, 1 << 3);
        put_varint(&mut rec, 7);
        put_bytes(&mut rec, 3, b"x");
        put_bytes(&mut body, 3, &rec);
        let mut bad = MAGIC.to_vec();
        bad.extend_from_slice(&body);
        bad.extend_from_slice(&Md5::digest(&body));
        assert_eq!(
            deaggregate(&bad).unwrap_err(),
            KplError::BadIndex {
                record: 0,
                table: "partition key",
                index: 7,
                len: 0
            }
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..256), fix_digest in any::<bool>()) {
            let mut data = MAGIC.to_vec();
            data.extend_from_slice(&tail);
            if fix_digest {
                data.extend_from_slice(&Md5::digest(&tail));
            }
            let _ = deaggregate(&data);
        }

        #[test]
        fn aggregate_then_deaggregate_is_identity(
            recs in prop::collection::vec(("[a-z]{1,8}", prop::option::of("[0-9]{1,39}"), prop::collection::vec(any::<u8>(), 0..64)), 1..20)
        ) {
            let input: Vec<(&str, Option<&str>, &[u8])> =
                recs.iter().map(|(k, h, d)| (k.as_str(), h.as_deref(), d.as_slice())).collect();
            let agg = aggregate(&input);
            let out = deaggregate(&agg).unwrap().unwrap();
            prop_assert_eq!(out.len(), input.len());
            for (o, (k, h, d)) in out.iter().zip(&input) {
                prop_assert_eq!(o.partition_key, *k);
                prop_assert_eq!(o.explicit_hash_key, *h);
                prop_assert_eq!(o.data, *d);
            }
        }
    }
}
