//! DynamoDB Streams shard positions: persist and restore where each shard's reading stands.

use crate::error::{Result, StateError};
use crate::item::{n, s, Expr};
use crate::model::StoredShardPosition;
use crate::names::ShardId;
use crate::schema::{attr, position_sk, SK_DDBPOS};
use crate::sequence::SequenceNumber;
use crate::store::StateStore;

/// The iterator types a position can resume with.
const ITERATOR_TYPES: [&str; 4] = [
    "TRIM_HORIZON",
    "LATEST",
    "AT_SEQUENCE_NUMBER",
    "AFTER_SEQUENCE_NUMBER",
];

impl StoredShardPosition {
    /// A position, checking that the iterator type is known and that the
    /// `*_SEQUENCE_NUMBER` types come with a sequence number (and only they).
    pub fn new(
        stream_arn: &str,
        shard_id: &str,
        iterator_type: &str,
        sequence_number: Option<&str>,
        parent_shard_id: Option<&str>,
    ) -> Result<Self> {
        if !ITERATOR_TYPES.contains(&iterator_type) {
            return Err(StateError::validation(
                "iterator type",
                format!("{iterator_type:?} is not one of {ITERATOR_TYPES:?}"),
            ));
        }
        let needs_seq = iterator_type.ends_with("_SEQUENCE_NUMBER");
        if needs_seq != sequence_number.is_some() {
            return Err(StateError::validation(
                "sequence number",
                format!(
                    "{iterator_type} {} a sequence number",
                    if needs_seq { "needs" } else { "takes no" }
                ),
            ));
        }
        if stream_arn.is_empty() {
            return Err(StateError::validation("stream ARN", "must not be empty"));
        }
        Ok(StoredShardPosition {
            stream_arn: stream_arn.to_owned(),
            shard_id: ShardId::new(shard_id)?,
            iterator_type: iterator_type.to_owned(),
            sequence_number: sequence_number.map(SequenceNumber::new).transpose()?,
            parent_shard_id: parent_shard_id.map(ShardId::new).transpose()?,
            updated: 0,
        })
    }
}

/// DynamoDB Streams shard positions (see the module docs). From
/// [`StateStore::positions`].
#[derive(Debug, Clone, Copy)]
pub struct Positions<'a> {
    pub(crate) store: &'a StateStore,
}

impl Positions<'_> {
    /// Saves a shard's position (replacing the previous one: seeking may move it either way).
    pub async fn save(self, position: &StoredShardPosition) -> Result<()> {
        let mut expr = Expr::new()
            .names(&[
                attr::STREAM_ARN,
                attr::SHARD,
                attr::ITERATOR,
                attr::SEQ,
                attr::PARENT,
                attr::UPDATED,
            ])
            .value("arn", s(&position.stream_arn))
            .value("shard", s(position.shard_id.as_str()))
            .value("iter", s(&position.iterator_type))
            .value("now", n(self.store.now()));
        let mut sets = vec![
            "#stream_arn = :arn",
            "#shard = :shard",
            "#iterator = :iter",
            "#updated = :now",
        ];
        let mut removes = Vec::new();
        match &position.sequence_number {
            Some(seq) => {
                sets.push("#seq = :seq");
                expr = expr.value("seq", s(seq.as_str()));
            }
            None => removes.push("#seq"),
        }
        match &position.parent_shard_id {
            Some(parent) => {
                sets.push("#parent = :parent");
                expr = expr.value("parent", s(parent.as_str()));
            }
            None => removes.push("#parent"),
        }
        let mut update = format!("SET {}", sets.join(", "));
        if !removes.is_empty() {
            update.push_str(&format!(" REMOVE {}", removes.join(", ")));
        }
        let at = self
            .store
            .spread_new(position.shard_id.as_str(), position_sk(&position.shard_id))
            .await?;
        let req = self.store.update_req(&at, &expr, &update, None);
        self.store
            .call_plain("UpdateItem", || req.clone().send())
            .await?;
        Ok(())
    }

    /// Every saved position, by shard id.
    pub async fn load(self) -> Result<Vec<StoredShardPosition>> {
        let mut positions = self
            .store
            .query_buckets(SK_DDBPOS)
            .await?
            .iter()
            .map(StoredShardPosition::from_item)
            .collect::<Result<Vec<_>>>()?;
        positions.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        Ok(positions)
    }

    /// Forgets a shard's position (the shard is gone); `true` if there was one.
    pub async fn remove(self, shard: &ShardId) -> Result<bool> {
        self.store
            .delete_item(
                &self
                    .store
                    .spread(shard.as_str(), position_sk(shard))
                    .await?,
                Some("attribute_exists(pk)"),
                &Expr::new(),
            )
            .await
    }
}
