//! Table lifecycle: create if missing, wait until ACTIVE, check the key schema, confirm tags.

use crate::error::{Result, StateError};
use crate::schema::{PK, SK, TTL};
use crate::store::StateStore;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ProvisionedThroughput,
    ScalarAttributeType, SseSpecification, TableDescription, TableStatus, Tag,
    TimeToLiveSpecification,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// How the table is billed when the store creates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Billing {
    /// On-demand capacity (the default).
    #[default]
    PayPerRequest,
    /// Provisioned capacity units.
    Provisioned {
        /// Read capacity units.
        read: i64,
        /// Write capacity units.
        write: i64,
    },
}

/// How to create and check the state table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableOptions {
    /// Billing of a table created by the store.
    pub billing: Billing,
    /// Server-side encryption with the AWS managed KMS key on a created table.
    pub sse: bool,
    /// Tags the table must carry; missing or different ones are set at start.
    pub tags: BTreeMap<String, String>,
    /// How long to wait for the table to become ACTIVE.
    pub wait_timeout: Duration,
    /// How often to look while waiting.
    pub poll_interval: Duration,
}

/// Setters, for a configuration built from its default (the struct is
/// `#[non_exhaustive]`: a field added later breaks no caller).
impl TableOptions {
    /// Sets [`TableOptions::billing`](Self::billing).
    pub fn billing(mut self, billing: Billing) -> Self {
        self.billing = billing;
        self
    }

    /// Sets [`TableOptions::sse`](Self::sse).
    pub fn sse(mut self, sse: bool) -> Self {
        self.sse = sse;
        self
    }

    /// Sets [`TableOptions::tags`](Self::tags).
    pub fn tags(mut self, tags: BTreeMap<String, String>) -> Self {
        self.tags = tags;
        self
    }

    /// Sets [`TableOptions::wait_timeout`](Self::wait_timeout).
    pub fn wait_timeout(mut self, wait_timeout: Duration) -> Self {
        self.wait_timeout = wait_timeout;
        self
    }

    /// Sets [`TableOptions::poll_interval`](Self::poll_interval).
    pub fn poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            billing: Billing::PayPerRequest,
            sse: true,
            tags: BTreeMap::new(),
            wait_timeout: Duration::from_secs(120),
            poll_interval: Duration::from_millis(500),
        }
    }
}

/// What [`Table::ensure`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableReport {
    /// The table ARN.
    pub arn: String,
    /// True if this call created the table.
    pub created: bool,
    /// Tags this call added or changed.
    pub tags_set: Vec<String>,
}

fn check_schema(table: &str, desc: &TableDescription) -> Result<()> {
    let wrong = |reason: String| StateError::WrongTableSchema {
        table: table.to_owned(),
        reason,
    };
    let keys: Vec<(String, KeyType)> = desc
        .key_schema()
        .iter()
        .map(|k| (k.attribute_name().to_owned(), k.key_type().clone()))
        .collect();
    let expected = vec![
        (PK.to_owned(), KeyType::Hash),
        (SK.to_owned(), KeyType::Range),
    ];
    if keys != expected {
        return Err(wrong(format!(
            "key schema is {keys:?}, expected {PK} (HASH) and {SK} (RANGE)"
        )));
    }
    for def in desc.attribute_definitions() {
        let name = def.attribute_name();
        if (name == PK || name == SK) && def.attribute_type() != &ScalarAttributeType::S {
            return Err(wrong(format!("key attribute {name} must be a string")));
        }
    }
    Ok(())
}

/// The state table (see the module docs). From [`StateStore::table`].
#[derive(Debug, Clone, Copy)]
pub struct Table<'a> {
    pub(crate) store: &'a StateStore,
}

impl Table<'_> {
    /// Creates the table if it is missing, waits until it is ACTIVE, checks its
    /// key schema (a table with another schema is a typed error, never used),
    /// enables TTL on a created table and makes sure it carries `options.tags`.
    pub async fn ensure(self, options: &TableOptions) -> Result<TableReport> {
        let mut created = false;
        let desc = match self.describe_table().await? {
            Some(desc) => desc,
            None => {
                created = self.create_table(options).await?;
                self.wait_active(options).await?
            }
        };
        let desc = if desc.table_status() == Some(&TableStatus::Active) {
            desc
        } else {
            self.wait_active(options).await?
        };
        check_schema(self.store.table_name(), &desc)?;
        let arn = desc.table_arn().unwrap_or_default().to_owned();
        if created {
            let req = self
                .store
                .client()
                .update_time_to_live()
                .table_name(self.store.table_name())
                .time_to_live_specification(
                    TimeToLiveSpecification::builder()
                        .enabled(true)
                        .attribute_name(TTL)
                        .build()
                        .map_err(|e| StateError::validation("ttl", e.to_string()))?,
                );
            self.store
                .call_plain("UpdateTimeToLive", || req.clone().send())
                .await?;
            tracing::info!(table = self.store.table_name(), "created the state table");
        }
        let tags_set = self.confirm_tags(&arn, &options.tags).await?;
        Ok(TableReport {
            arn,
            created,
            tags_set,
        })
    }

    async fn describe_table(self) -> Result<Option<TableDescription>> {
        let req = self
            .store
            .client()
            .describe_table()
            .table_name(self.store.table_name());
        match self
            .store
            .call_plain("DescribeTable", || req.clone().send())
            .await
        {
            Ok(out) => Ok(out.table),
            Err(StateError::Sdk {
                code: Some(code), ..
            }) if code == "ResourceNotFoundException" => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates the table; `false` if another process created it first.
    async fn create_table(self, options: &TableOptions) -> Result<bool> {
        let key = |name: &str, kind: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
        };
        let def = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
        };
        let build = |e: aws_sdk_dynamodb::error::BuildError| {
            StateError::validation("table definition", e.to_string())
        };
        let mut req = self
            .store
            .client()
            .create_table()
            .table_name(self.store.table_name())
            .key_schema(key(PK, KeyType::Hash).map_err(build)?)
            .key_schema(key(SK, KeyType::Range).map_err(build)?)
            .attribute_definitions(def(PK).map_err(build)?)
            .attribute_definitions(def(SK).map_err(build)?);
        req = match options.billing {
            Billing::PayPerRequest => req.billing_mode(BillingMode::PayPerRequest),
            Billing::Provisioned { read, write } => req
                .billing_mode(BillingMode::Provisioned)
                .provisioned_throughput(
                    ProvisionedThroughput::builder()
                        .read_capacity_units(read)
                        .write_capacity_units(write)
                        .build()
                        .map_err(build)?,
                ),
        };
        if options.sse {
            req = req.sse_specification(SseSpecification::builder().enabled(true).build());
        }
        for (k, v) in &options.tags {
            req = req.tags(Tag::builder().key(k).value(v).build().map_err(build)?);
        }
        match self
            .store
            .call_plain("CreateTable", || req.clone().send())
            .await
        {
            Ok(_) => Ok(true),
            Err(StateError::Sdk {
                code: Some(code), ..
            }) if code == "ResourceInUseException" => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn wait_active(self, options: &TableOptions) -> Result<TableDescription> {
        let started = tokio::time::Instant::now();
        loop {
            let desc = self.describe_table().await?;
            let status = desc
                .as_ref()
                .and_then(|d| d.table_status())
                .map(|s| s.as_str().to_owned())
                .unwrap_or_else(|| "MISSING".to_owned());
            if let Some(desc) = desc.filter(|d| d.table_status() == Some(&TableStatus::Active)) {
                return Ok(desc);
            }
            if started.elapsed() >= options.wait_timeout {
                return Err(StateError::TableNotActive {
                    table: self.store.table_name().to_owned(),
                    status,
                    waited_ms: started.elapsed().as_millis() as u64,
                });
            }
            tokio::time::sleep(options.poll_interval).await;
        }
    }

    /// Makes sure the table carries `tags`; returns the keys it set.
    pub async fn confirm_tags(
        self,
        arn: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<Vec<String>> {
        if tags.is_empty() {
            return Ok(Vec::new());
        }
        let req = self
            .store
            .client()
            .list_tags_of_resource()
            .resource_arn(arn);
        let out = self
            .store
            .call_plain("ListTagsOfResource", || req.clone().send())
            .await?;
        let present: BTreeMap<&str, &str> =
            out.tags().iter().map(|t| (t.key(), t.value())).collect();
        let missing: Vec<(&String, &String)> = tags
            .iter()
            .filter(|(k, v)| present.get(k.as_str()) != Some(&v.as_str()))
            .collect();
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let mut req = self.store.client().tag_resource().resource_arn(arn);
        for (k, v) in &missing {
            req = req.tags(
                Tag::builder()
                    .key(*k)
                    .value(*v)
                    .build()
                    .map_err(|e| StateError::validation("tag", e.to_string()))?,
            );
        }
        self.store
            .call_plain("TagResource", || req.clone().send())
            .await?;
        Ok(missing.into_iter().map(|(k, _)| k.clone()).collect())
    }
}
