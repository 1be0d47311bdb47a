//! The replica recipe on the embedded servers: a table with a stream, a
//! writer that keeps putting, updating and deleting items, and a copy of the
//! table in memory built meanwhile (the stream's position, a scan, then the
//! stream from the position). Once the writer stops and the rest of the
//! stream is applied, the copy is compared with the table.
//!
//! ```sh
//! cargo run --example replica
//! ```

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, StreamSpecification, StreamViewType,
};
use shardkeeper::ddb_streams::{build_replica, scan_table, ItemKey, ReaderConfig, StreamReader};
use shardkeeper::state::{RetryPolicy, StateStore, StoreConfig, TableOptions};
use shardkeeper_local::{AwsClients, Endpoints, LocalOptions, LocalServers};
use std::collections::BTreeMap;

type Error = Box<dyn std::error::Error + Send + Sync>;

const TABLE: &str = "orders";
const WRITES: usize = 2_000;

async fn write(dynamodb: &aws_sdk_dynamodb::Client, round: usize) -> Result<(), Error> {
    let id = AttributeValue::S(format!("order-{}", (round * 7) % 600));
    if round % 4 == 1 {
        dynamodb
            .delete_item()
            .table_name(TABLE)
            .key("id", id)
            .send()
            .await?;
    } else {
        dynamodb
            .put_item()
            .table_name(TABLE)
            .item("id", id)
            .item("version", AttributeValue::N(round.to_string()))
            .send()
            .await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let servers = LocalServers::start(LocalOptions::default())?;
    let aws = AwsClients::connect(&Endpoints::local(&servers)).await;
    let created = aws
        .dynamodb
        .create_table()
        .table_name(TABLE)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()?,
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()?,
        )
        .send()
        .await?;
    let stream_arn = created
        .table_description()
        .and_then(|t| t.latest_stream_arn())
        .ok_or("the table has no stream")?
        .to_owned();
    for round in 0..500 {
        write(&aws.dynamodb, round).await?;
    }

    let writer = {
        let dynamodb = aws.dynamodb.clone();
        tokio::spawn(async move {
            for round in 500..WRITES {
                write(&dynamodb, round).await?;
            }
            Ok::<(), Error>(())
        })
    };

    let store = StateStore::new(
        aws.dynamodb.clone(),
        StoreConfig::new("replica-example", TABLE)?,
    );
    store.table().ensure(&TableOptions::default()).await?;
    let mut reader = StreamReader::new(
        aws.streams.clone(),
        store,
        &stream_arn,
        ReaderConfig::default(),
    );
    let (mut replica, report) = build_replica(&aws.dynamodb, TABLE, &mut reader).await?;
    println!(
        "replica built while writing: {} items scanned in {} page(s), {} stream records applied",
        report.scanned, report.scan_pages, report.applied
    );
    writer.await??;
    let applied = replica.catch_up(&mut reader).await?;
    println!("writer done: {applied} more stream records applied");

    let (items, _) = scan_table(&aws.dynamodb, TABLE, &RetryPolicy::default()).await?;
    let key_names = ["id".to_owned()];
    let table = items
        .into_iter()
        .map(|item| Ok((ItemKey::of(&item, &key_names)?, item)))
        .collect::<Result<BTreeMap<_, _>, shardkeeper::Error>>()?;
    let copy: BTreeMap<ItemKey, _> = replica
        .items()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if copy != table {
        let differing = table
            .keys()
            .filter(|k| table.get(*k) != copy.get(*k))
            .count()
            + copy.keys().filter(|k| !table.contains_key(*k)).count();
        return Err(format!("the replica differs from the table at {differing} key(s)").into());
    }
    println!(
        "the replica equals the table: {} items (after {WRITES} writes)",
        table.len()
    );
    Ok(())
}
