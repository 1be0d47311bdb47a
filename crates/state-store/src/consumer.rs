//! Consumers: register and heartbeat in one call, the active flag, and clearing dead consumers.

mod registry;

use crate::clock::{duration_millis, EpochMillis};
use crate::error::{Result, StateError};
use crate::item::{n, s, Expr, ItemReader};
use crate::model::{ConsumerInfo, ConsumerState, EfoLock, Lease};
use crate::names::{ConsumerId, EfoName, ShardId};
use crate::schema::{attr, consumer_sk, SK_CONSUMER};
use crate::store::{sk_suffix, StateStore};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use std::collections::BTreeSet;
use std::time::Duration;

impl ConsumerInfo {
    /// Describes this process: app from `AWS_LAMBDA_FUNCTION_NAME` (or the
    /// executable name), host from `HOSTNAME`, environment from
    /// `AWS_EXECUTION_ENV` (or `process`).
    pub fn for_this_process(id: ConsumerId, started: EpochMillis) -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let app = var("AWS_LAMBDA_FUNCTION_NAME")
            .or_else(|| {
                std::env::current_exe()
                    .ok()
                    .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            })
            .unwrap_or_else(|| "unknown".to_owned());
        ConsumerInfo {
            id,
            app,
            host: var("HOSTNAME").unwrap_or_else(|| "localhost".to_owned()),
            env: var("AWS_EXECUTION_ENV").unwrap_or_else(|| "process".to_owned()),
            pid: std::process::id(),
            started,
            standalone: false,
            ends: None,
            busy: None,
            loads: Default::default(),
            draining: false,
            lease_term: None,
        }
    }
}

/// How many given shards may wait unacknowledged on a consumer's item (see
/// [`Consumers::notify_assigned`]): far under DynamoDB's 400 KB an item.
pub const MAX_GIVEN: usize = 1000;

/// A string set of shard ids.
fn shard_set<'a>(shards: impl Iterator<Item = &'a ShardId>) -> AttributeValue {
    AttributeValue::Ss(shards.map(|s| s.as_str().to_owned()).collect())
}

/// The note of a give on the receiver's item: its expression, update and
/// condition. `named`: the counter moves and the shards are named, while
/// fewer than [`MAX_GIVEN`] names wait; else the counter alone moves. Both
/// need the consumer registered.
fn given_note<'a>(
    shards: impl Iterator<Item = &'a ShardId>,
    named: bool,
) -> (Expr, &'static str, &'static str) {
    if named {
        let expr = Expr::new()
            .names(&[attr::ASSIGNED, attr::NAMED, attr::GIVEN])
            .value("one", n(1))
            .value("shards", shard_set(shards))
            .value("max", n(MAX_GIVEN));
        (
            expr,
            "ADD #assigned :one, #named :one, #given :shards",
            "attribute_exists(pk) AND (attribute_not_exists(#given) OR size(#given) < :max)",
        )
    } else {
        let expr = Expr::new().names(&[attr::ASSIGNED]).value("one", n(1));
        (expr, "ADD #assigned :one", "attribute_exists(pk)")
    }
}

/// What a heartbeat found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The consumer was not registered (new, or cleared as dead) and is now;
    /// `false`: it was registered and its heartbeat was refreshed.
    pub registered: bool,
    /// The consumer's assignment counter: it moves each time another party
    /// gives the consumer a lease.
    pub assignments: u64,
    /// How many of the moves of `assignments` named the shards given: while
    /// both moved alike, every shard given since is in `given`; when
    /// `assignments` moved more, a giver named none (code from before names
    /// were kept, or names at their bound) and the consumer reads every shard.
    pub named: u64,
    /// The shards named as given to the consumer since it last acknowledged
    /// them (see [`Consumers::notify_assigned`]), as the item was before
    /// this heartbeat removed the acknowledged ones.
    pub given: BTreeSet<ShardId>,
    /// The registration's identity: drawn by the heartbeat that created the
    /// consumer's item and kept by every later one. A process that sees it
    /// change between two of its heartbeats knows the consumer was removed
    /// and registered again, even when the registering heartbeat's answer was
    /// lost and its retry found the item already there.
    pub incarnation: String,
    /// Leases taken from the consumer while its session was seen stale,
    /// since it last acknowledged them, as the item was before this
    /// heartbeat: a lease held at the counter named is no longer the
    /// consumer's, and this heartbeat keeps it alive no more.
    pub revoked: BTreeSet<Revocation>,
    /// Shards of the consumer's leases that another consumer claimed, since
    /// it last acknowledged them: hand each over (its lease item tells to
    /// whom, if the claim still stands).
    pub claimed: BTreeSet<ShardId>,
    /// A heartbeat that took the id over ([`Consumers::heartbeat_as`] with
    /// `take_over`) found a token on the item: another process's, which may
    /// still be processing under leases in the id's name until a term after
    /// this heartbeat (or this process's own, from an attempt whose answer
    /// was lost: the two cannot be told apart, so it counts as another's).
    pub took_over: bool,
}

/// A lease taken from a consumer whose session was seen stale: the shard,
/// and the counter the consumer held it at.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revocation {
    /// The shard.
    pub shard_id: ShardId,
    /// The lease counter its owner held it at.
    pub counter: u64,
}

impl Revocation {
    /// As stored in the consumer's `revoked` set: `<shard>@<counter>`
    /// (shard ids hold no `@`).
    pub(crate) fn encode(&self) -> String {
        format!("{}@{}", self.shard_id, self.counter)
    }

    fn decode(stored: &str) -> Result<Self> {
        let corrupt = || StateError::Corrupt {
            key: stored.to_owned(),
            reason: "a revocation is <shard>@<counter>".to_owned(),
        };
        let (shard, counter) = stored.rsplit_once('@').ok_or_else(corrupt)?;
        Ok(Revocation {
            shard_id: ShardId::new(shard)?,
            counter: counter.parse().map_err(|_| corrupt())?,
        })
    }
}

/// The notes on a consumer's item its process has acted on, which its next
/// heartbeat removes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acks {
    /// Given shards looked at.
    pub given: BTreeSet<ShardId>,
    /// Revocations seen.
    pub revoked: BTreeSet<Revocation>,
    /// Claims seen.
    pub claimed: BTreeSet<ShardId>,
}

impl Acks {
    /// Nothing to acknowledge.
    pub fn is_empty(&self) -> bool {
        self.given.is_empty() && self.revoked.is_empty() && self.claimed.is_empty()
    }

    /// Adds `other`'s acknowledgements to these.
    pub fn extend(&mut self, other: Acks) {
        self.given.extend(other.given);
        self.revoked.extend(other.revoked);
        self.claimed.extend(other.claimed);
    }
}

/// The shard ids of a string set attribute of `item` (absent: none).
fn shard_ids(item: &crate::item::RawItem, name: &str) -> Result<BTreeSet<ShardId>> {
    match item.get(name) {
        Some(AttributeValue::Ss(ids)) => ids.iter().map(ShardId::new).collect(),
        _ => Ok(BTreeSet::new()),
    }
}

/// What [`Consumers::clear_old`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClearReport {
    /// Consumers removed for a missed heartbeat.
    pub removed: Vec<ConsumerId>,
    /// Shard leases released because their owner was removed.
    pub leases_released: Vec<ShardId>,
    /// EFO consumers unlocked because their holder was removed or is unknown.
    pub efo_released: Vec<EfoName>,
}

/// The group's consumers (see the module docs). From [`StateStore::consumers`].
#[derive(Debug, Clone, Copy)]
pub struct Consumers<'a> {
    pub(crate) store: &'a StateStore,
}

impl Consumers<'_> {
    /// Registers the consumer if it is absent, else refreshes its heartbeat:
    /// one unconditional UpdateItem either way. The answer carries the
    /// consumer's assignment counter, which moves whenever another party gave
    /// it a lease (see [`Consumers::notify_assigned`]), so a consumer learns
    /// of new leases without reading every shard.
    pub async fn heartbeat(self, info: &ConsumerInfo) -> Result<Heartbeat> {
        self.beat(info, None, &Acks::default()).await
    }

    /// [`Consumers::heartbeat`] by one process holding the consumer id,
    /// whose `token` is stored with the heartbeat. With `take_over` (a
    /// session's first heartbeat) the token replaces any other: a new process
    /// takes the id over. Without it the heartbeat applies only while the
    /// stored token is this one (or none, after the reaper removed the
    /// consumer); once a newer process took the id over it fails with
    /// [`StateError::Superseded`], so two processes with one id never both
    /// carry on. The notes in `acks` (given shards, revocations and claims
    /// the process has acted on) are removed from the consumer's item.
    ///
    /// Every heartbeat moves the consumer's beat counter: an observer that
    /// saw it unchanged for a lease term knows the consumer's process can
    /// no longer be processing under any of its leases.
    pub async fn heartbeat_as(
        self,
        info: &ConsumerInfo,
        token: &str,
        take_over: bool,
        acks: &Acks,
    ) -> Result<Heartbeat> {
        self.beat(info, Some((token, take_over)), acks).await
    }

    async fn beat(
        self,
        info: &ConsumerInfo,
        token: Option<(&str, bool)>,
        acks: &Acks,
    ) -> Result<Heartbeat> {
        let now = self.store.now();
        let fresh = format!("{:016x}", fastrand::u64(..));
        let mut expr = Expr::new()
            .names(&[
                attr::HEARTBEAT,
                attr::APP,
                attr::HOST,
                attr::ENV,
                attr::PID,
                attr::STARTED,
                attr::ACTIVE,
                attr::STANDALONE,
                attr::INCARNATION,
                attr::BEAT,
            ])
            .value("now", n(now))
            .value("one", n(1))
            .value("fresh", s(&fresh))
            .value("app", s(&info.app))
            .value("host", s(&info.host))
            .value("env", s(&info.env))
            .value("pid", n(info.pid))
            .value("started", n(info.started))
            .value("standalone", AttributeValue::Bool(info.standalone))
            .names(&[attr::DRAINING])
            .value("draining", AttributeValue::Bool(info.draining));
        // A draining consumer stays inactive, even when this heartbeat
        // registers it again (after a reap).
        let active = if info.draining {
            expr = expr.value("false", AttributeValue::Bool(false));
            ":false"
        } else {
            expr = expr.value("true", AttributeValue::Bool(true));
            "if_not_exists(#active, :true)"
        };
        let mut update = format!(
            "SET #heartbeat = :now, #app = :app, #host = :host, #env = :env, #pid = :pid, \
             #started = :started, #standalone = :standalone, #active = {active}, #draining = :draining"
        );
        for (name, value) in [
            (attr::ENDS, info.ends),
            (attr::BUSY, info.busy.map(i64::from)),
            (attr::TERM, info.lease_term.map(duration_millis)),
        ] {
            if let Some(value) = value {
                expr = expr.names(&[name]).value(name, n(value));
                update.push_str(&format!(", #{name} = :{name}"));
            }
        }
        if info.busy.is_some() {
            let loads = info
                .loads
                .iter()
                .map(|(shard, load)| (shard.to_string(), n(i64::from(*load))))
                .collect();
            expr = expr
                .names(&[attr::LOADS])
                .value(attr::LOADS, AttributeValue::M(loads));
            update.push_str(&format!(", #{l} = :{l}", l = attr::LOADS));
        }
        let add = ", #incarnation = if_not_exists(#incarnation, :fresh)";
        let mut condition = None;
        if let Some((token, take_over)) = token {
            expr = expr.names(&[attr::TOKEN]).value("token", s(token));
            update.push_str(", #token = :token");
            if !take_over {
                condition = Some("attribute_not_exists(#token) OR #token = :token");
            }
        }
        update.push_str(add);
        update.push_str(" ADD #beat :one");
        let revoked: Vec<String> = acks.revoked.iter().map(Revocation::encode).collect();
        let deletes = [
            (
                attr::GIVEN,
                acks.given.iter().map(|s| s.to_string()).collect(),
            ),
            (attr::REVOKED, revoked),
            (
                attr::CLAIMED,
                acks.claimed.iter().map(|s| s.to_string()).collect(),
            ),
        ];
        let mut clause = " DELETE";
        for (name, values) in deletes {
            if values.is_empty() {
                continue;
            }
            expr = expr
                .names(&[name])
                .value(&format!("{name}_acked"), AttributeValue::Ss(values));
            update.push_str(&format!("{clause} #{name} :{name}_acked"));
            clause = ",";
        }
        let req = self
            .store
            .update_req(
                &self.store.home(consumer_sk(&info.id)),
                &expr,
                &update,
                condition,
            )
            .return_values(ReturnValue::AllOld);
        let old = match self.store.conditional_update(req).await? {
            Ok(old) => old,
            Err(_) => {
                return Err(StateError::Superseded {
                    consumer: info.id.to_string(),
                })
            }
        };
        let registered = !old.contains_key(attr::HEARTBEAT);
        if registered {
            tracing::debug!(consumer = %info.id, "consumer registered");
        }
        let incarnation = match old.get(attr::INCARNATION) {
            Some(_) => ItemReader::new(&old).s(attr::INCARNATION)?.to_owned(),
            None => fresh,
        };
        let revoked = match old.get(attr::REVOKED) {
            Some(AttributeValue::Ss(stored)) => stored
                .iter()
                .map(|r| Revocation::decode(r))
                .collect::<Result<BTreeSet<_>>>()?,
            _ => BTreeSet::new(),
        };
        // A token found is taken for another process's: it may be this
        // one's, from an attempt whose answer was lost, which cannot be told.
        let took_over =
            token.is_some_and(|(_, take_over)| take_over) && old.contains_key(attr::TOKEN);
        let reader = ItemReader::new(&old);
        Ok(Heartbeat {
            took_over,
            registered,
            assignments: reader.u64_or(attr::ASSIGNED, 0)?,
            named: reader.u64_or(attr::NAMED, 0)?,
            given: shard_ids(&old, attr::GIVEN)?,
            incarnation,
            revoked,
            claimed: shard_ids(&old, attr::CLAIMED)?,
        })
    }

    /// Tells a consumer that it was given the leases of `shards` by a write
    /// of its own (a tool's, or code from before gives carried their note):
    /// moves its assignment counter and names the shards beside it, both of
    /// which its next heartbeat sees, so it reads those shards instead of
    /// every one. While [`MAX_GIVEN`] names wait unacknowledged (a consumer
    /// that does not acknowledge them, as code from before them), only the
    /// counter moves. `false` if the consumer is not registered. A give by
    /// [`Leases::give`](crate::Leases::give) carries this note in its own
    /// transaction.
    pub async fn notify_assigned(self, consumer: &ConsumerId, shards: &[ShardId]) -> Result<bool> {
        let at = self.store.home(consumer_sk(consumer));
        if !shards.is_empty() {
            let (expr, update, condition) = given_note(shards.iter(), true);
            let req = self.store.update_req(&at, &expr, update, Some(condition));
            match self.store.conditional_update(req).await? {
                Ok(_) => return Ok(true),
                Err(None) => return Ok(false),
                Err(Some(_)) => {} // at the bound: the counter alone
            }
        }
        let (expr, update, condition) = given_note(shards.iter(), false);
        let req = self.store.update_req(&at, &expr, update, Some(condition));
        Ok(self.store.conditional_update(req).await?.is_ok())
    }

    /// The part of a give that tells the consumer, in the give's
    /// transaction: its assignment counter moves, and with `named` the
    /// shard is named beside it (conditioned on fewer than [`MAX_GIVEN`]
    /// names waiting; without it the counter alone moves, and its next
    /// heartbeat reads every shard). Fails the transaction if `consumer` is
    /// not registered.
    pub(crate) fn given_part(
        self,
        consumer: &ConsumerId,
        shard: &ShardId,
        named: bool,
    ) -> Result<aws_sdk_dynamodb::types::TransactWriteItem> {
        let (expr, update, condition) = given_note(std::iter::once(shard), named);
        self.store.tx_update(
            &self.store.home(consumer_sk(consumer)),
            &expr,
            update,
            Some(condition),
        )
    }

    /// The part of an operator's move that tells the lease's owner, in the
    /// move's transaction: the lease at the counter it held is revoked
    /// (it stops at its next heartbeat), and the shard is given to it again
    /// by name (the same heartbeat takes it up at the moved counter, from
    /// the moved position). Fails the transaction if `consumer` is not
    /// registered.
    pub(crate) fn moved_part(
        self,
        consumer: &ConsumerId,
        revoked: &Revocation,
    ) -> Result<aws_sdk_dynamodb::types::TransactWriteItem> {
        let expr = Expr::new()
            .names(&[attr::REVOKED, attr::ASSIGNED, attr::NAMED, attr::GIVEN])
            .value("revoked", AttributeValue::Ss(vec![revoked.encode()]))
            .value("one", n(1))
            .value("shards", shard_set(std::iter::once(&revoked.shard_id)));
        self.store.tx_update(
            &self.store.home(consumer_sk(consumer)),
            &expr,
            "ADD #revoked :revoked, #assigned :one, #named :one, #given :shards",
            Some("attribute_exists(pk)"),
        )
    }

    /// Sets the consumer's active flag (an inactive consumer is given no
    /// leases); `false` if the consumer is not registered, or is draining
    /// and would be made active.
    pub async fn set_active(self, consumer: &ConsumerId, active: bool) -> Result<bool> {
        let mut expr = Expr::new()
            .names(&[attr::ACTIVE])
            .value("active", AttributeValue::Bool(active));
        let condition = if active {
            expr = expr
                .names(&[attr::DRAINING])
                .value("false", AttributeValue::Bool(false));
            "attribute_exists(pk) AND (attribute_not_exists(#draining) OR #draining = :false)"
        } else {
            "attribute_exists(pk)"
        };
        let req = self.store.update_req(
            &self.store.home(consumer_sk(consumer)),
            &expr,
            "SET #active = :active",
            Some(condition),
        );
        Ok(self.store.conditional_update(req).await?.is_ok())
    }
}
