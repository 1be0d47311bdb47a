//! The enhanced fan-out consumer pool: register, lock, release, and deregister idle ones.

use crate::clock::duration_millis;
use crate::error::{Result, StateError};
use crate::item::{n, s, Expr};
use crate::model::{EfoLock, EfoState};
use crate::names::{ConsumerId, EfoName};
use crate::retry::call_kinesis;
use crate::schema::{attr, efo_sk, SK_EFO};
use crate::store::{sk_suffix, StateStore};
use aws_sdk_dynamodb::types::AttributeValue;
use std::time::Duration;

const LOCK_NAMES: [&str; 5] = [
    attr::USED_BY,
    attr::LOCK_COUNTER,
    attr::RELEASED,
    attr::UPDATED,
    attr::RETIRING,
];

/// The enhanced fan-out consumers of the pool and their locks (see the
/// module docs). From [`StateStore::efo_consumers`].
#[derive(Debug, Clone, Copy)]
pub struct EfoConsumers<'a> {
    pub(crate) store: &'a StateStore,
}

impl EfoConsumers<'_> {
    /// Records an EFO consumer of the pool (free, released now); `false` if it
    /// was recorded already.
    pub async fn register(self, name: &EfoName, arn: &str) -> Result<bool> {
        if arn.is_empty() {
            return Err(StateError::validation("consumer ARN", "must not be empty"));
        }
        let now = self.store.now();
        let expr = Expr::new()
            .names(&[attr::ARN])
            .names(&LOCK_NAMES)
            .value("arn", s(arn))
            .value("zero", n(0))
            .value("now", n(now));
        let req = self.store.update_req(
            &self.store.home(efo_sk(name)),
            &expr,
            "SET #arn = :arn, #lock_counter = :zero, #released = :now, #updated = :now",
            Some("attribute_not_exists(pk)"),
        );
        Ok(self.store.conditional_update(req).await?.is_ok())
    }

    /// Removes an EFO consumer from the state; `false` if it was not there.
    pub async fn deregister(self, name: &EfoName) -> Result<bool> {
        self.store
            .delete_item(
                &self.store.home(efo_sk(name)),
                Some("attribute_exists(pk)"),
                &Expr::new(),
            )
            .await
    }

    /// Every EFO consumer of the pool, by name.
    pub async fn list(self) -> Result<Vec<EfoState>> {
        let mut pool = self
            .store
            .query_home(SK_EFO)
            .await?
            .iter()
            .filter_map(|item| sk_suffix(item, SK_EFO).map(|name| (name, item)))
            .map(|(name, item)| EfoState::from_item(name, item))
            .collect::<Result<Vec<_>>>()?;
        pool.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(pool)
    }

    /// The EFO consumer locked by `consumer`, locking a free one if it holds
    /// none (each lock is conditional on the consumer being free at the
    /// counter seen, so two consumers never share one). When none is free the
    /// consumer is marked inactive (it is given no leases) and `None` comes
    /// back; when it holds one it is marked active.
    pub async fn get_or_lock(self, consumer: &ConsumerId) -> Result<Option<EfoLock>> {
        let pool = self.list().await?;
        let held = pool
            .iter()
            .find(|e| e.used_by.as_ref() == Some(consumer))
            .and_then(|e| e.lock());
        let mut locked = held;
        if locked.is_none() {
            let mut free: Vec<&EfoState> = pool
                .iter()
                .filter(|e| e.used_by.is_none() && !e.retiring)
                .collect();
            // Racing consumers start at different places of the free list.
            fastrand::shuffle(&mut free);
            for efo in free {
                if let Some(lock) = self.lock(efo, consumer).await? {
                    locked = Some(lock);
                    break;
                }
            }
        }
        if locked.is_none() {
            tracing::warn!(%consumer, pool = pool.len(), "every enhanced fan-out consumer is locked; waiting for one to be free");
        }
        self.store
            .consumers()
            .set_active(consumer, locked.is_some())
            .await?;
        Ok(locked)
    }

    /// Locks `efo` for `consumer` if it is still free at the counter seen
    /// and not retiring. Safe to apply twice: a retry whose first answer was
    /// lost finds the lock its first attempt took (this consumer, the next
    /// counter) and returns it.
    pub async fn lock(self, efo: &EfoState, consumer: &ConsumerId) -> Result<Option<EfoLock>> {
        let expr = Expr::new()
            .names(&LOCK_NAMES)
            .value("me", s(consumer.as_str()))
            .value("n", n(efo.lock_counter))
            .value("one", n(1))
            .value("now", n(self.store.now()));
        let req = self.store.update_req(
            &self.store.home(efo_sk(&efo.name)),
            &expr,
            "SET #used_by = :me, #updated = :now ADD #lock_counter :one REMOVE #released",
            Some(
                "attribute_exists(pk) AND attribute_not_exists(#used_by) AND #lock_counter = :n \
                 AND attribute_not_exists(#retiring)",
            ),
        );
        let item = match self.store.conditional_update(req).await? {
            Ok(item) => item,
            Err(Some(old)) => old,
            Err(None) => return Ok(None),
        };
        let state = EfoState::from_item(efo.name.as_str(), &item)?;
        let ours =
            state.used_by.as_ref() == Some(consumer) && state.lock_counter == efo.lock_counter + 1;
        Ok(state.lock().filter(|_| ours))
    }

    /// Releases an EFO lock (its idle timer starts now); `false` if the lock
    /// was no longer held at that counter. Safe to apply twice: a retry
    /// finding it free at the next counter reports the release.
    pub async fn release(self, lock: &EfoLock) -> Result<bool> {
        let expr = Expr::new()
            .names(&LOCK_NAMES)
            .value("me", s(lock.consumer.as_str()))
            .value("n", n(lock.lock_counter))
            .value("one", n(1))
            .value("now", n(self.store.now()));
        let req = self.store.update_req(
            &self.store.home(efo_sk(&lock.name)),
            &expr,
            "SET #released = :now, #updated = :now ADD #lock_counter :one REMOVE #used_by",
            Some("#used_by = :me AND #lock_counter = :n"),
        );
        match self.store.conditional_update(req).await? {
            Ok(_) => Ok(true),
            Err(Some(old)) => {
                let state = EfoState::from_item(lock.name.as_str(), &old)?;
                Ok(state.used_by.is_none() && state.lock_counter == lock.lock_counter + 1)
            }
            Err(None) => Ok(false),
        }
    }

    /// Retires the EFO consumer `lock` holds because it is gone from Kinesis
    /// (a subscription with it was refused as not found): one write marks
    /// it retiring (no lock takes it again) and releases the lock, so the
    /// holder can lock another; the reaper finishes the retirement. `false`
    /// if the lock was no longer held.
    pub async fn retire_lent(self, lock: &EfoLock) -> Result<bool> {
        let expr = Expr::new()
            .names(&LOCK_NAMES)
            .value("me", s(lock.consumer.as_str()))
            .value("n", n(lock.lock_counter))
            .value("one", n(1))
            .value("true", AttributeValue::Bool(true))
            .value("now", n(self.store.now()));
        let req = self.store.update_req(
            &self.store.home(efo_sk(&lock.name)),
            &expr,
            "SET #retiring = :true, #released = :now, #updated = :now ADD #lock_counter :one REMOVE #used_by",
            Some("#used_by = :me AND #lock_counter = :n"),
        );
        let done = self.store.conditional_update(req).await?.is_ok();
        if done {
            tracing::warn!(efo = %lock.name, arn = %lock.arn, "enhanced fan-out consumer gone from Kinesis: retired from the pool");
        }
        Ok(done)
    }

    /// Deregisters EFO consumers that stayed free for longer than
    /// `idle_timeout` (they cost money per shard-hour), keeping at least one
    /// in the pool. Each is first removed from the state on the condition that
    /// it is still free at the counter seen; only when that removal won is it
    /// deregistered from Kinesis. Returns the names deregistered.
    pub async fn deregister_idle(
        self,
        kinesis: &aws_sdk_kinesis::Client,
        idle_timeout: Duration,
    ) -> Result<Vec<EfoName>> {
        let pool = self.list().await?;
        let now = self.store.now();
        let limit = duration_millis(idle_timeout);
        let idle: Vec<&EfoState> = pool
            .iter()
            .filter(|e| e.used_by.is_none() && e.released.is_some_and(|r| now - r > limit))
            .collect();
        let kept = pool.len() - idle.len();
        let removable = if kept > 0 {
            &idle[..]
        } else {
            &idle[idle.len().min(1)..]
        };
        let mut deregistered = Vec::new();
        for efo in removable {
            if self
                .remove_idle(kinesis, &efo.name, &efo.arn, efo.lock_counter)
                .await?
            {
                deregistered.push(efo.name.clone());
            }
        }
        Ok(deregistered)
    }

    /// Retires one EFO consumer that is still free at `lock_counter`, in
    /// three steps, each safe to repeat: mark it retiring (no new lock can
    /// take it from then on), deregister it from Kinesis (one already gone is
    /// fine), then remove it from the state. A retirement interrupted after
    /// the mark is finished by the next call (the reaper plans one for every
    /// retiring entry), so the pool never hands out a consumer that Kinesis
    /// no longer has. `false` if it was in use again, or gone.
    pub async fn remove_idle(
        self,
        kinesis: &aws_sdk_kinesis::Client,
        name: &EfoName,
        arn: &str,
        lock_counter: u64,
    ) -> Result<bool> {
        self.check_consumer_arn(name, arn)?;
        let expr = Expr::new()
            .names(&[attr::USED_BY, attr::LOCK_COUNTER, attr::RETIRING])
            .value("n", n(lock_counter))
            .value("true", AttributeValue::Bool(true));
        let mark = self.store.update_req(
            &self.store.home(efo_sk(name)),
            &expr,
            "SET #retiring = :true",
            Some("attribute_exists(pk) AND attribute_not_exists(#used_by) AND #lock_counter = :n"),
        );
        if self.store.conditional_update(mark).await?.is_err() {
            tracing::debug!(efo = %name, "enhanced fan-out consumer in use again, or gone: kept");
            return Ok(false);
        }
        let req = kinesis.deregister_stream_consumer().consumer_arn(arn);
        match call_kinesis(
            &self.store.config().retry,
            "DeregisterStreamConsumer",
            || req.clone().send(),
        )
        .await
        {
            Ok(_) => tracing::info!(efo = %name, "deregistered an idle enhanced fan-out consumer"),
            Err(StateError::Sdk {
                code: Some(code), ..
            }) if code == "ResourceNotFoundException" => {
                tracing::debug!(efo = %name, "enhanced fan-out consumer was already gone");
            }
            Err(e) => return Err(e),
        }
        // A retried delete whose first attempt was applied finds nothing: done too.
        self.store
            .delete_item(
                &self.store.home(efo_sk(name)),
                Some("attribute_not_exists(pk) OR (#retiring = :true AND #lock_counter = :n)"),
                &expr,
            )
            .await?;
        Ok(true)
    }

    /// Refuses (a typed validation error) an ARN that is not the ARN of
    /// consumer `name` of this store's stream: the pool's item is writable by
    /// every function of the group, and a deregistration is not undone, so
    /// an item naming another stream's consumer, or another consumer of
    /// this one, never reaches `DeregisterStreamConsumer`. Kinesis consumer
    /// ARNs are `<stream ARN>/consumer/<name>:<creation timestamp>`.
    fn check_consumer_arn(self, name: &EfoName, arn: &str) -> Result<()> {
        let stream = &self.store.config().stream;
        let ours = match arn.split_once(":stream/") {
            Some((head, tail)) => {
                let of_stream = match stream.arn() {
                    Some(stream_arn) => {
                        arn.starts_with(&format!("{}/consumer/", stream_arn.as_str()))
                    }
                    None => head.starts_with("arn:") && head.contains(":kinesis:"),
                };
                let consumer = tail
                    .strip_prefix(&format!("{}/consumer/", stream.name()))
                    .and_then(|rest| rest.rsplit_once(':'))
                    .map(|(consumer, _)| consumer);
                of_stream && consumer == Some(name.as_str())
            }
            None => false,
        };
        if ours {
            Ok(())
        } else {
            Err(StateError::validation(
                "consumer ARN",
                format!(
                    "{arn} is not the ARN of enhanced fan-out consumer {name} of stream {}: not deregistered",
                    stream.name()
                ),
            ))
        }
    }
}

impl EfoState {
    /// The lock as currently held, if the consumer is in use.
    pub fn lock(&self) -> Option<EfoLock> {
        self.used_by.as_ref().map(|holder| EfoLock {
            name: self.name.clone(),
            arn: self.arn.clone(),
            consumer: holder.clone(),
            lock_counter: self.lock_counter,
        })
    }
}
