//! How a consumer process of a group test (the stress runs', the
//! simulator's) ended by itself.

use shardkeeper::state::StateError;

/// How a consumer process ended by itself.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Stopped when asked.
    Stopped,
    /// A newer process took its id over.
    Superseded,
    /// Failed for good.
    Failed,
}

impl Ended {
    /// How a worker's run that returned `result` ended.
    pub fn of<T>(result: &shardkeeper::Result<T>) -> Self {
        match result {
            Ok(_) => Ended::Stopped,
            Err(shardkeeper::Error::State(StateError::Superseded { .. })) => Ended::Superseded,
            Err(_) => Ended::Failed,
        }
    }
}
