//! A process's hold on its consumer id: the token its heartbeats carry, so
//! that of two processes started under one id (a restart while the old one
//! still runs) the newer takes the id over and the older learns it must
//! stop.

use crate::state::{ConsumerInfo, Heartbeat, ShardId, StateStore};
use crate::Result;
use std::collections::BTreeSet;

/// The token of this process's session under its consumer id.
#[derive(Debug)]
pub(crate) struct Holding {
    token: String,
    taken: bool,
    incarnation: Option<String>,
}

impl Holding {
    /// A new, random token (nothing is sent until the first heartbeat).
    pub(crate) fn new() -> Self {
        Holding {
            token: format!("{:016x}", fastrand::u64(..)),
            taken: false,
            incarnation: None,
        }
    }

    /// The token, stored with the leases taken for this process.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Heartbeats with the token: the first takes the id over, the later
    /// ones fail with `StateError::Superseded` once a newer process has.
    ///
    /// A heartbeat that finds another registration than the last one saw
    /// is reported as a registration, even when the registering heartbeat's
    /// answer was lost and its retry found the item there: the consumer was
    /// removed by the reaper meanwhile, so its leases are read again.
    /// `acked`: given shards looked at since the last heartbeat.
    pub(crate) async fn heartbeat(
        &mut self,
        store: &StateStore,
        info: &ConsumerInfo,
        acked: &BTreeSet<ShardId>,
    ) -> Result<Heartbeat> {
        let mut beat = store
            .consumers()
            .heartbeat_as(info, &self.token, !self.taken, acked)
            .await?;
        self.taken = true;
        if self
            .incarnation
            .as_ref()
            .is_some_and(|last| *last != beat.incarnation)
        {
            beat.registered = true;
        }
        self.incarnation = Some(beat.incarnation.clone());
        Ok(beat)
    }
}
