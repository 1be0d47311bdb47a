//! The record of an operator's rewind on the group's `STREAM` item: begun
//! before its first shard moves, finished once every shard it selected has
//! moved (each shard move is [`Checkpoints::move_position`] with the
//! rewind's id).

use crate::checkpoint::Checkpoints;
use crate::clock::EpochMillis;
use crate::error::Result;
use crate::item::{n, s, Expr};
use crate::model::RewindState;
use crate::schema::{attr, SK_STREAM};

impl Checkpoints<'_> {
    /// Records `rewind` as the group's latest (replacing any before it,
    /// finished or not). The group's stream item must exist.
    pub async fn begin_rewind(self, rewind: &RewindState) -> Result<bool> {
        let expr = Expr::new()
            .names(&[
                attr::REWIND_ID,
                attr::REWIND_REQUEST,
                attr::REWIND_TO,
                attr::REWIND_SHARDS,
                attr::REWIND_DONE,
            ])
            .value("id", n(rewind.id))
            .value("request", s(&rewind.request))
            .value("to", s(rewind.to.to_string()))
            .value("shards", n(rewind.shards));
        let req = self.store.update_req(
            &self.store.home(SK_STREAM),
            &expr,
            "SET #rewind_id = :id, #rewind_request = :request, #rewind_to = :to, \
             #rewind_shards = :shards REMOVE #rewind_done",
            Some("attribute_exists(pk)"),
        );
        Ok(self.store.conditional_update(req).await?.is_ok())
    }

    /// Records that every shard of rewind `id` has moved, if it is still
    /// the group's latest.
    pub async fn finish_rewind(self, id: EpochMillis) -> Result<bool> {
        let expr = Expr::new()
            .names(&[attr::REWIND_ID, attr::REWIND_DONE])
            .value("id", n(id))
            .value("now", n(self.store.now()));
        let req = self.store.update_req(
            &self.store.home(SK_STREAM),
            &expr,
            "SET #rewind_done = :now",
            Some("#rewind_id = :id"),
        );
        Ok(self.store.conditional_update(req).await?.is_ok())
    }
}
