//! The group's planners and their executor: pure decisions over a snapshot
//! of the group (one read of its keys), applied by conditional writes.
//!
//! - `sightings`: [`Sightings`] and [`Ages`], time as the planners see it.
//! - `rebalance`: `plan_rebalance`, the lease-rebalancer's plan
//!   ([`RebalanceConfig`]).
//! - `reap`: `plan_reap`, the heartbeat-reaper's plan ([`ReapConfig`]).
//! - `fleet`: `plan_fleet`, how many shard workers to start
//!   ([`FleetConfig`], [`FleetPlan`], [`Starts`]).
//! - `action`: the `Action`s the planners return, of an [`ActionKind`].
//! - `executor`: `execute`, which applies them ([`ExecutionReport`]).
//! - `reset`: [`plan_reset`] and [`apply_reset`], the operator's reset.
//! - `rewind`: [`plan_rewind`] and [`apply_rewind`], the operator's rewind
//!   of a running group.
//! - `status`: [`GroupStatus`], what the CLI shows.
//!
//! The planners run inside this crate, in the scheduled functions
//! ([`crate::functions::Rebalancer`], [`crate::functions::Reaper`]), which
//! are the API; their settings and reports above are public for that. The
//! planners themselves, their actions and the executor are public only with
//! the `testing` feature, for this workspace's tests and benchmarks, so
//! that how a tick decides can change without breaking users.

mod action;
mod executor;
mod fleet;
mod load;
mod reap;
mod rebalance;
mod reset;
mod rewind;
mod sightings;
mod status;

pub use action::ActionKind;
pub use executor::ExecutionReport;
pub use fleet::{FleetConfig, FleetPlan, Starts};
pub(crate) use reap::missed_its_heartbeat;
pub use reap::ReapConfig;
pub use rebalance::RebalanceConfig;
pub use reset::{apply_reset, plan_reset, ResetPlan, ResetRefused, ResetReport};
pub use rewind::{apply_rewind, plan_rewind, RewindMove, RewindPlan, RewindReport, RewindTarget};
pub use sightings::{Ages, Sightings};
pub use status::{BoundedRow, ConsumerRow, EfoRow, GroupStatus, RewindRow, ShardRow};

// The planner internals: public with the `testing` feature (the tests and
// benchmarks call them directly), visible to this crate only otherwise.
#[cfg(feature = "testing")]
pub use {
    action::Action,
    executor::execute,
    fleet::plan_fleet,
    reap::plan_reap,
    rebalance::{held_by, live_consumers, plan_rebalance},
};
#[cfg(not(feature = "testing"))]
pub(crate) use {
    action::Action,
    executor::execute,
    fleet::plan_fleet,
    reap::plan_reap,
    rebalance::{held_by, live_consumers, plan_rebalance},
};
