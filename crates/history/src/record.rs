//! Recording a run into a [`SharedHistory`]: a record handler and a worker
//! observer. Records carry their number among their key's records as text
//! (`"0"`, `"1"`, ...), which is how the demo and the stress run produce them.

use super::{Processed, SharedHistory};
use shardkeeper::consumer::Observer;
use shardkeeper::processing::{RecordHandler, StreamRecord};
use shardkeeper::state::{SequenceNumber, ShardId};
use std::sync::Arc;
use std::time::Instant;

/// A handler that records every record it processes for `consumer`. A record
/// whose data is not a number fails (it was not produced by the run).
pub fn recording_handler(history: &SharedHistory, consumer: &str) -> impl RecordHandler {
    let (history, me) = (history.clone(), consumer.to_owned());
    move |record: StreamRecord| {
        let (history, me) = (history.clone(), me.clone());
        async move {
            let n: u64 = std::str::from_utf8(&record.data)
                .ok()
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| std::io::Error::other("not a numbered record"))?;
            let processed = Processed {
                consumer: me,
                shard: ShardId::new(&*record.shard_id).map_err(std::io::Error::other)?,
                key: record.partition_key.to_string(),
                n,
                sequence: SequenceNumber::new(&record.sequence_number)
                    .map_err(std::io::Error::other)?,
                sub_sequence: record.sub_sequence,
                at: Instant::now(),
            };
            history.lock().expect("history").processed.push(processed);
            Ok::<(), std::io::Error>(())
        }
    }
}

/// An observer that appends `consumer`'s worker events to the history.
pub fn recording_observer(history: &SharedHistory, consumer: &str) -> Observer {
    let (history, me) = (history.clone(), consumer.to_owned());
    Arc::new(move |event| {
        history
            .lock()
            .expect("history")
            .events
            .push((me.clone(), event));
    })
}
