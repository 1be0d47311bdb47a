//! The group's planners and their executor: pure decisions over a snapshot
//! of the group (one read of its keys), applied by conditional writes.
//!
//! - `sightings`: [`Sightings`] and [`Ages`], time as the planners see it.
//! - `rebalance`: [`plan_rebalance`], the lease-rebalancer's plan.
//! - `reap`: [`plan_reap`], the heartbeat-reaper's plan.
//! - `fleet`: [`plan_fleet`], how many shard workers to start.
//! - `action`: the [`Action`]s the planners return.
//! - `executor`: [`execute`], which applies them.
//! - `reset`: [`plan_reset`] and [`apply_reset`], the operator's reset.
//! - `status`: [`GroupStatus`], what the CLI shows.

mod action;
mod executor;
mod fleet;
mod reap;
mod rebalance;
mod reset;
mod sightings;
mod status;

pub use action::{Action, ActionKind};
pub use executor::{execute, ExecutionReport};
pub use fleet::{plan_fleet, time_left, FleetConfig, FleetPlan, Starts};
pub use reap::{plan_reap, ReapConfig};
pub use rebalance::{
    available_shards, held_by, live_consumers, plan_rebalance, stranded_children, RebalanceConfig,
};
pub use reset::{apply_reset, plan_reset, ResetPlan, ResetRefused, ResetReport};
pub use sightings::{Ages, Sightings};
pub use status::{ConsumerRow, EfoRow, GroupStatus, ShardRow};
