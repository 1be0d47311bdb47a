use super::*;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// An item as KCL 2.x's `DynamoDBLeaseSerializer.toDynamoRecord` writes it.
fn kcl_item(key: &str, checkpoint: &str, sub: u64) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("leaseKey".to_owned(), s(key)),
        ("leaseOwner".to_owned(), s("worker-1")),
        ("leaseCounter".to_owned(), n(17)),
        ("ownerSwitchesSinceCheckpoint".to_owned(), n(0)),
        ("checkpoint".to_owned(), s(checkpoint)),
        ("checkpointSubSequenceNumber".to_owned(), n(sub)),
    ])
}

fn spec(id: &str, parents: &[&str]) -> ShardSpec {
    ShardSpec::new(id).unwrap().with_parents(parents).unwrap()
}

#[test]
fn every_checkpoint_kind_and_field_of_a_kcl_item_is_read() {
    let mut item = kcl_item(
        "shardId-000000000002",
        "49590338271490256608559692538361571095921575989136588898",
        3,
    );
    item.insert(
        "pendingCheckpoint".into(),
        s("49590338271490256608559692538361571095921575989136588999"),
    );
    item.insert("pendingCheckpointSubSequenceNumber".into(), n(0));
    item.insert(
        "parentShardId".into(),
        AttributeValue::Ss(vec!["shardId-000000000000".into()]),
    );
    item.insert(
        "childShardIds".into(),
        AttributeValue::Ss(vec!["shardId-000000000005".into()]),
    );
    item.insert("startingHashKey".into(), s("0"));
    item.insert(
        "endingHashKey".into(),
        s("170141183460469231731687303715884105727"),
    );
    let lease = KclLease::from_item(&item).unwrap().unwrap();
    assert_eq!(lease.shard, "shardId-000000000002");
    assert_eq!(lease.owner.as_deref(), Some("worker-1"));
    assert_eq!(lease.counter, 17);
    assert_eq!(
        lease.checkpoint.to_string(),
        "49590338271490256608559692538361571095921575989136588898/3"
    );
    assert!(lease.pending.is_some());
    assert_eq!(lease.parents, vec!["shardId-000000000000".to_owned()]);
    for (text, want) in [
        ("TRIM_HORIZON", KclCheckpoint::TrimHorizon),
        ("LATEST", KclCheckpoint::Latest),
        ("AT_TIMESTAMP", KclCheckpoint::AtTimestamp),
        ("SHARD_END", KclCheckpoint::ShardEnd),
    ] {
        let lease = KclLease::from_item(&kcl_item("shardId-000000000001", text, 0))
            .unwrap()
            .unwrap();
        assert_eq!(lease.checkpoint, want);
    }
}

#[test]
fn a_multi_stream_lease_names_its_stream_and_shard() {
    // As `DynamoDBMultiStreamLeaseSerializer` writes it: the key is
    // `<stream identifier>:<shard id>`, and both are attributes too.
    let mut item = kcl_item(
        "123456789012:orders:1700000000:shardId-000000000001",
        "LATEST",
        0,
    );
    item.insert("streamName".into(), s("123456789012:orders:1700000000"));
    item.insert("shardId".into(), s("shardId-000000000001"));
    let lease = KclLease::from_item(&item).unwrap().unwrap();
    assert_eq!(lease.shard, "shardId-000000000001");
    assert_eq!(
        lease.stream,
        Some(KclStream {
            account: "123456789012".into(),
            name: "orders".into(),
            creation_epoch: 1_700_000_000
        })
    );
    // Without `shardId`, the shard is the key past the stream.
    item.remove("shardId");
    assert_eq!(
        KclLease::from_item(&item).unwrap().unwrap().shard,
        "shardId-000000000001"
    );
}

#[test]
fn bad_items_are_refused_with_the_lease_named_and_other_entities_skipped() {
    let mut no_checkpoint = kcl_item("shardId-000000000001", "x", 0);
    no_checkpoint.remove("checkpoint");
    let mut bad_stream = kcl_item("a:b", "LATEST", 0);
    bad_stream.insert("streamName".into(), s("not-an-identifier"));
    for item in [
        kcl_item("shardId-000000000001", "12ab", 0),
        no_checkpoint,
        bad_stream,
        HashMap::from([("pk".to_owned(), s("x"))]),
    ] {
        let e = KclLease::from_item(&item).unwrap_err();
        assert!(
            matches!(
                e,
                Error::BadArgument {
                    name: "--kcl-table",
                    ..
                }
            ),
            "{e:?}"
        );
    }
    let mut other = kcl_item("x", "LATEST", 0);
    other.insert("entityType".into(), s("WORKER_METRICS"));
    assert_eq!(KclLease::from_item(&other).unwrap(), None);
}

#[test]
fn a_lease_renewed_or_taken_between_two_reads_is_seen() {
    let lease = |key: &str, counter: u64, owner: Option<&str>| KclLease {
        lease_key: key.into(),
        shard: key.into(),
        stream: None,
        owner: owner.map(Into::into),
        counter,
        checkpoint: KclCheckpoint::Latest,
        pending: None,
        parents: vec![],
    };
    let first = [
        lease("a", 1, Some("w")),
        lease("b", 5, Some("w")),
        lease("c", 2, None),
    ];
    assert!(renewed_between(&first, &first).is_empty());
    let second = [
        lease("a", 2, Some("w")),
        lease("b", 5, Some("v")),
        lease("c", 2, None),
    ];
    assert_eq!(renewed_between(&first, &second), vec!["a", "b"]);
}

#[test]
fn the_plan_keeps_the_groups_stream_parents_first_and_names_what_it_leaves() {
    let mut leases = Vec::new();
    for (key, cp) in [
        ("shardId-000000000000", "SHARD_END"),
        ("shardId-000000000002", "900"),
        ("shardId-000000000099", "SHARD_END"),
    ] {
        let mut item = kcl_item(&format!("1:orders:20:{key}"), cp, 0);
        item.insert("streamName".into(), s("1:orders:20"));
        leases.push(KclLease::from_item(&item).unwrap().unwrap());
    }
    for (id, epoch) in [("1:payments:20", 20), ("1:orders:10", 10)] {
        let mut item = kcl_item(&format!("{id}:shardId-000000000001"), "LATEST", 0);
        item.insert("streamName".into(), s(id));
        let lease = KclLease::from_item(&item).unwrap().unwrap();
        assert_eq!(lease.stream.as_ref().unwrap().creation_epoch, epoch);
        leases.push(lease);
    }
    let listed = [
        spec("shardId-000000000002", &["shardId-000000000000"]),
        spec("shardId-000000000001", &["shardId-000000000000"]),
        spec("shardId-000000000000", &[]),
    ];
    let stream = StreamAddress::parse("orders").unwrap();
    let plan = plan_kcl_import(&leases, &stream, &listed, None).unwrap();
    let moves: Vec<String> = plan
        .moves
        .iter()
        .map(|(s, cp)| format!("{s}={cp}"))
        .collect();
    assert_eq!(
        moves,
        ["shardId-000000000000=SHARD_END", "shardId-000000000002=900"]
    );
    assert_eq!(plan.gone, ["shardId-000000000099"]);
    assert_eq!(
        plan.other_streams,
        [
            "1:payments:20:shardId-000000000001",
            "1:orders:10:shardId-000000000001"
        ]
    );
    assert_eq!(
        plan.without_lease,
        [ShardId::new("shardId-000000000001").unwrap()]
    );
}

#[test]
fn an_at_timestamp_start_needs_its_time() {
    let lease = KclLease::from_item(&kcl_item("shardId-000000000000", "AT_TIMESTAMP", 0))
        .unwrap()
        .unwrap();
    let listed = [spec("shardId-000000000000", &[])];
    let stream = StreamAddress::parse("orders").unwrap();
    let refused =
        plan_kcl_import(std::slice::from_ref(&lease), &stream, &listed, None).unwrap_err();
    assert!(
        matches!(
            refused,
            Error::BadArgument {
                name: "--at-timestamp",
                ..
            }
        ),
        "{refused:?}"
    );
    let plan = plan_kcl_import(&[lease], &stream, &listed, Some(1_700_000_000_000)).unwrap();
    assert_eq!(plan.moves[0].1, Checkpoint::AtTimestamp(1_700_000_000_000));
}
