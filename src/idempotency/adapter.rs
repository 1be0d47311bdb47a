//! The idempotent handler: what it reads before a batch, and for each
//! record whether to run it, wait, fail it, or hand back a stored result.
//!
//! - A completion is staged with the record's effects when its call staged
//!   some (written with the progress that covers the record, in one
//!   transaction), and written alone otherwise (before the progress).
//! - A repeat is validated, then its stored result goes to `on_repeat`.
//! - A claim ([`Claim::BeforeRun`]) whose call failed is deleted, so that a
//!   retry need not wait for it to run out.

use crate::idempotency::entry::Entry;
use crate::idempotency::known::Local;
use crate::idempotency::table::{EntryPut, IdempotencyTable};
use crate::idempotency::{Claim, IdempotencyError, Idempotent};
use crate::processing::effects::staged_count;
use crate::processing::parking::sha256_hex;
use crate::processing::StreamRecord;
use crate::processing::{stage_effect, HandlerError, RecordContext, RecordHandler};
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a claim holds where the invocation has no deadline.
const CLAIM_WITHOUT_DEADLINE: Duration = Duration::from_secs(60);

/// The first pause while a claim held elsewhere is waited for; it doubles
/// up to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(50);
/// The longest pause between two reads of a claim held elsewhere.
const POLL_MAX: Duration = Duration::from_secs(1);

impl<F, Fut, T, E> RecordHandler for Idempotent<F, T>
where
    F: Fn(StreamRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send,
    T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
    E: Into<HandlerError>,
{
    const PREPARES: bool = true;

    fn before_batch(&self, records: &[&StreamRecord]) -> impl Future<Output = ()> + Send {
        let mut keys: Vec<String> = records
            .iter()
            .filter_map(|r| (self.key)(r))
            .map(|k| self.table.entry_key(&k))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        async move {
            if self.claim == Claim::BeforeRun {
                // The claim's condition reads: nothing is read before.
                self.known.batch(&keys, None);
                return;
            }
            match self.table.read_many(&keys, now_ms()).await {
                Ok(read) => self.known.batch(&keys, Some(read)),
                Err(error) => {
                    // Each record reads its own.
                    tracing::warn!(%error, "idempotency entries of the batch unread");
                    self.known.batch(&keys, Some(Default::default()));
                }
            }
        }
    }

    async fn handle(&self, record: StreamRecord) -> Result<(), HandlerError> {
        self.idempotent(record).await.map_err(|e| match e {
            Failed::Idempotency(e) => Box::new(e) as HandlerError,
            Failed::Handler(e) => e,
        })
    }
}

/// Why a record failed: the adapter, or the handler.
enum Failed {
    Idempotency(IdempotencyError),
    Handler(HandlerError),
}

impl From<IdempotencyError> for Failed {
    fn from(e: IdempotencyError) -> Self {
        Failed::Idempotency(e)
    }
}

impl From<crate::state::StateError> for Failed {
    fn from(e: crate::state::StateError) -> Self {
        Failed::Idempotency(e.into())
    }
}

impl<F, Fut, T, E> Idempotent<F, T>
where
    F: Fn(StreamRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send,
    T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
    E: Into<HandlerError>,
{
    async fn idempotent(&self, record: StreamRecord) -> Result<(), Failed> {
        let Some(key) = (self.key)(&record) else {
            return Err(IdempotencyError::NoKey {
                sequence_number: record.sequence_number.to_string(),
            }
            .into());
        };
        let hash = self
            .validate
            .as_ref()
            .map(|part| sha256_hex(&part(&record)));
        let entry_key = self.table.entry_key(&key);
        let known = self.known.get(&entry_key);
        if let Some(Local::Done {
            hash: stored,
            result,
            ..
        }) = &known
        {
            return self.repeat(&record, &key, hash.as_deref(), stored.as_deref(), result);
        }
        let token = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        match self.claim {
            Claim::BeforeRun => {
                let ours = match &known {
                    Some(Local::Claimed { token }) => Some(token.clone()),
                    _ => None,
                };
                if let Some(done) = self
                    .claim_entry(&key, &entry_key, &token, ours.as_deref(), hash.as_deref())
                    .await?
                {
                    let (stored, result) = done;
                    return self.repeat(&record, &key, hash.as_deref(), stored.as_deref(), &result);
                }
                self.known.set(
                    entry_key.clone(),
                    Local::Claimed {
                        token: token.clone(),
                    },
                );
            }
            Claim::AtCompletion => {
                let entry = match known {
                    Some(Local::Read(entry)) => entry,
                    _ => self.table.read(&entry_key, now_ms()).await?,
                };
                match entry {
                    Entry::Absent => {}
                    Entry::Completed {
                        hash: stored,
                        result,
                        ..
                    } => {
                        return self.repeat(
                            &record,
                            &key,
                            hash.as_deref(),
                            stored.as_deref(),
                            &result,
                        );
                    }
                    Entry::InProgress { until_ms, .. } => {
                        return Err(IdempotencyError::InProgress { key, until_ms }.into());
                    }
                }
            }
        }
        let claimed = self.claim == Claim::BeforeRun;
        let sequence = record.sequence_number.clone();
        let called = (self.handler)(record)
            .await
            .map_err(Into::<HandlerError>::into);
        let value = match called {
            Ok(value) => value,
            Err(e) => {
                if claimed {
                    if let Err(error) = self.table.release(&entry_key, &token).await {
                        tracing::warn!(%error, "a failed call's claim was not released");
                    }
                }
                return Err(Failed::Handler(e));
            }
        };
        let result = serde_json::to_string(&value).map_err(|e| IdempotencyError::Result {
            key: key.clone(),
            error: e.to_string(),
        })?;
        let put = self.table.completion(
            &entry_key,
            &token,
            claimed,
            self.expires,
            hash.as_deref(),
            result.clone(),
            &sequence,
            now_ms(),
        );
        self.complete(&key, &entry_key, &token, put).await?;
        self.known.set(
            entry_key,
            Local::Done {
                token,
                hash,
                result,
            },
        );
        Ok(())
    }

    /// Claims the key: `None` once claimed (waiting for a claim elsewhere
    /// that ends within this invocation's time), or the completion found
    /// (its hash and result).
    async fn claim_entry(
        &self,
        key: &str,
        entry_key: &str,
        token: &str,
        ours: Option<&str>,
        hash: Option<&str>,
    ) -> Result<Option<(Option<String>, String)>, Failed> {
        let deadline_ms = RecordContext::current()
            .and_then(|c| c.deadline)
            .map(epoch_ms);
        let mut waits = 0;
        loop {
            let now = now_ms();
            let until = deadline_ms.unwrap_or(now + CLAIM_WITHOUT_DEADLINE.as_millis() as u64);
            if self
                .table
                .claim(entry_key, token, ours, until, self.expires, hash, now)
                .await?
            {
                return Ok(None);
            }
            match self.table.read(entry_key, now_ms()).await? {
                Entry::Completed { hash, result, .. } => return Ok(Some((hash, result))),
                // Ours: the claim's answer was lost.
                Entry::InProgress { token: t, .. } if t == token => return Ok(None),
                Entry::InProgress { until_ms, .. } => {
                    // Waited for while it may end within this invocation's
                    // time, polling (it may finish well before its time).
                    let fits = deadline_ms.is_none_or(|d| until_ms < d.saturating_sub(1000));
                    if !fits {
                        return Err(IdempotencyError::InProgress {
                            key: key.to_owned(),
                            until_ms,
                        }
                        .into());
                    }
                    let poll = POLL_FIRST.saturating_mul(1 << waits.min(5)).min(POLL_MAX);
                    waits += 1;
                    let left = Duration::from_millis(until_ms.saturating_sub(now_ms()) + 1);
                    tokio::time::sleep(poll.min(left)).await;
                }
                Entry::Absent => {}
            }
        }
    }

    /// Writes the completion `put`: staged with the record's effects, or
    /// alone. A completion refused because another was written at the same
    /// time (two duplicates at once, [`Claim::AtCompletion`], or a claim
    /// that ran out and was taken over) is told: the handler ran twice.
    async fn complete(
        &self,
        key: &str,
        entry_key: &str,
        token: &str,
        put: EntryPut,
    ) -> Result<(), Failed> {
        // With effects of its own, the completion is one of them: both are
        // applied, or neither. Without, it is written alone, at once (one
        // write, not a transaction's two), before the progress.
        if staged_count() > 0 {
            return stage_effect(IdempotencyTable::transact_item(put)).map_err(|error| {
                IdempotencyError::Effect {
                    key: key.to_owned(),
                    error,
                }
                .into()
            });
        }
        if self.table.write(put).await? {
            return Ok(());
        }
        match self.table.read(entry_key, now_ms()).await? {
            // Ours: the answer was lost.
            Entry::Completed { token: t, .. } if t == token => {}
            _ => tracing::warn!(
                key,
                "completed at the same time by another call: this record's handler ran as well"
            ),
        }
        Ok(())
    }

    /// A repeat of a completed key: validated, then its result handed over.
    fn repeat(
        &self,
        record: &StreamRecord,
        key: &str,
        hash: Option<&str>,
        stored: Option<&str>,
        result: &str,
    ) -> Result<(), Failed> {
        if let (Some(hash), Some(stored)) = (hash, stored) {
            if hash != stored {
                return Err(IdempotencyError::PayloadMismatch {
                    key: key.to_owned(),
                }
                .into());
            }
        }
        tracing::debug!(key, sequence_number = %record.sequence_number, "a repeat: not handled again");
        if let Some(on_repeat) = &self.on_repeat {
            let value =
                serde_json::from_str(result).map_err(|e| IdempotencyError::StoredResult {
                    key: key.to_owned(),
                    error: e.to_string(),
                })?;
            on_repeat(record, value);
        }
        Ok(())
    }
}

/// Now, in epoch milliseconds.
fn now_ms() -> u64 {
    epoch_ms(SystemTime::now())
}

fn epoch_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
