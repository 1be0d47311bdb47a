//! A bounded group (a backfill): each shard is read up to an end, the
//! group's end recorded on its `STREAM` item for shards without their own
//! (a shard's own is set with [`Checkpoints::move_position`]).

use crate::checkpoint::Checkpoints;
use crate::error::Result;
use crate::item::{s, Expr};
use crate::schema::{attr, SK_STREAM};
use crate::sequence::Checkpoint;
use crate::store::StateStore;

impl Checkpoints<'_> {
    /// Makes the group bounded (a backfill): shards without an end of
    /// their own are read up to where `end` resumes. The group's stream
    /// item must exist.
    pub async fn set_group_end(self, end: &Checkpoint) -> Result<bool> {
        let expr = Expr::new()
            .names(&[attr::GROUP_END])
            .value("end", s(end.to_string()));
        let req = self.store.update_req(
            &self.store.home(SK_STREAM),
            &expr,
            "SET #group_end = :end",
            Some("attribute_exists(pk)"),
        );
        Ok(self.store.conditional_update(req).await?.is_ok())
    }
}

impl StateStore {
    /// A bounded group's end for shards without their own
    /// ([`crate::StreamState::end`]; `None`: the group is not bounded), as
    /// read at [`StateStore::start`] or, without a start, at the first call
    /// (one read of the stream item). It is set when the bounded group is
    /// made, before any of its functions starts, and never changes.
    pub async fn group_end(&self) -> Result<Option<Checkpoint>> {
        if let Some(end) = self.inner.group_end.get() {
            return Ok(end.clone());
        }
        let end = self.stream_item().state().await?.and_then(|s| s.end);
        Ok(self.inner.group_end.get_or_init(|| end).clone())
    }
}
