//! The state store: tables, streams, consumers, leases, checkpoints,
//! positions, EFO locks, a group of 10,000 shards.

mod assignments;
mod buckets;
mod checkpoints;
mod consumers;
mod effects;
mod efo;
mod errors;
mod leases;
mod lost_responses;
mod parents;
mod positions;
mod scale;
mod stream;
mod table;
