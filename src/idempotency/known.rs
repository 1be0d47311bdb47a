//! What this process knows of entries: read for the batch, or written (or
//! staged) by its own calls.
//!
//! - A batch's reads replace what was known of its keys: a completion staged
//!   with an earlier batch's effects is trusted only until the next batch
//!   (its commit may have failed, and its records come again).
//! - Knowledge older than [`KEEP`] is dropped, and past [`MOST`] entries
//!   the oldest half (a busy worker completes many keys in a quarter hour).

use crate::idempotency::entry::Entry;
use crate::state::instant_now;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long knowledge is kept: past the longest invocation.
const KEEP: Duration = Duration::from_secs(15 * 60);

/// The most entries kept.
const MOST: usize = 100_000;

/// What this process knows of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Local {
    /// As read before the batch.
    Read(Entry),
    /// Completed by a call here (written, or staged with its effects).
    Done {
        /// The completion's token.
        token: String,
        /// The validated hash.
        hash: Option<String>,
        /// The result, JSON.
        result: String,
    },
    /// Claimed by a call here and not known completed: a later claim here
    /// may take it over.
    Claimed {
        /// The claim's token.
        token: String,
    },
}

/// The knowledge, by entry key.
#[derive(Debug, Default)]
pub(crate) struct Known {
    entries: Mutex<HashMap<String, (Local, Instant)>>,
}

impl Known {
    /// What is known of `entry_key`.
    pub(crate) fn get(&self, entry_key: &str) -> Option<Local> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(entry_key).map(|(local, _)| local.clone())
    }

    /// Knows `local` of `entry_key` from now.
    pub(crate) fn set(&self, entry_key: String, local: Local) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.insert(entry_key, (local, instant_now()));
        if entries.len() > MOST {
            entries.retain(|_, (_, at)| at.elapsed() < KEEP);
        }
        if entries.len() > MOST {
            let mut ages: Vec<Instant> = entries.values().map(|(_, at)| *at).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            entries.retain(|_, (_, at)| *at > cut);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }

    /// A new batch of `entry_keys` starts: `read` replaces what was known of
    /// them (`None`: nothing was read, and a completion of this process
    /// becomes a claim of it, to take over if its commit failed).
    pub(crate) fn batch(&self, entry_keys: &[String], read: Option<HashMap<String, Entry>>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, (_, at)| at.elapsed() < KEEP);
        let now = instant_now();
        match read {
            Some(read) => {
                for key in entry_keys {
                    match read.get(key) {
                        Some(entry) => {
                            entries.insert(key.clone(), (Local::Read(entry.clone()), now));
                        }
                        None => {
                            entries.remove(key);
                        }
                    }
                }
            }
            None => {
                for key in entry_keys {
                    if let Some((Local::Done { token, .. }, _)) = entries.get(key) {
                        let token = token.clone();
                        entries.insert(key.clone(), (Local::Claimed { token }, now));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(token: &str) -> Local {
        Local::Done {
            token: token.into(),
            hash: None,
            result: "null".into(),
        }
    }

    #[test]
    fn a_batch_read_replaces_what_a_staged_completion_said() {
        let known = Known::default();
        known.set("a".into(), done("t"));
        known.set("b".into(), done("u"));
        let read = HashMap::from([("a".to_owned(), Entry::Absent)]);
        known.batch(&["a".into(), "c".into()], Some(read));
        assert_eq!(known.get("a"), Some(Local::Read(Entry::Absent)));
        // Not in this batch: kept.
        assert_eq!(known.get("b"), Some(done("u")));
        assert_eq!(known.get("c"), None);
    }

    #[test]
    fn past_the_most_entries_the_oldest_half_goes() {
        let known = Known::default();
        for i in 0..=MOST {
            known.set(format!("k{i}"), done("t"));
        }
        assert!(known.len() <= MOST / 2 + 1, "{}", known.len());
        assert!(known.get(&format!("k{MOST}")).is_some(), "the newest stays");
    }

    #[test]
    fn without_reads_a_completion_here_becomes_a_claim_to_take_over() {
        let known = Known::default();
        known.set("a".into(), done("t"));
        known.batch(&["a".into()], None);
        assert_eq!(known.get("a"), Some(Local::Claimed { token: "t".into() }));
    }
}
