//! Whole-system runs and tooling: the stress run, outages, the CLI, the
//! local servers and their fault proxy, the history checker, the template.

mod backfill;
mod cli;
mod cutover;
mod fault_proxy;
mod fleet;
mod guarantees;
mod history;
mod iam;
mod install;
mod local;
mod migration;
mod outage;
mod readme;
mod rewind;
mod shared_stream;
mod stress;
mod template;
