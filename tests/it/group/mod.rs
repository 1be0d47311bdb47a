//! The group's planners (table-driven and property tests) and the
//! scheduled rebalancer and reaper with consumer sessions.

mod liveness;
mod pickup;
mod plan_fleet;
mod plan_load;
mod plan_reap;
mod plan_rebalance;
mod retention;
mod scheduled;
mod skew;
