//! A fold or a window's action that keeps failing: each failure counted,
//! and at `max_attempts` the record (or the window, with its state) parked
//! so the shard moves on.

use super::*;

impl<Src, S, A, F, Fut, E> WindowProcessor<Src, S, A, F>
where
    Src: WindowSource,
    S: Serialize + DeserializeOwned + Default + Clone + Send,
    A: Fn(&mut S, StreamRecord) -> Result<(), E> + Send + Sync,
    F: Fn(S, WindowInfo) -> Fut + Send + Sync,
    Fut: Future<Output = Result<(), HandlerError>> + Send,
    E: Into<HandlerError>,
{
    /// Counts a failed attempt of `record` (kept under `key`) and parks it
    /// at `max_attempts`; `true` if it was parked. Without a store nothing
    /// is counted.
    pub(super) async fn give_up(
        &self,
        key: Option<RecordKey>,
        record: &StreamRecord,
        error: &RecordError,
    ) -> bool {
        let (Some(store), Some(key)) = (&self.store, key) else {
            return false;
        };
        let attempt = crate::processing::RecordContext::current()
            .map(|c| c.request_id)
            .filter(|id| !id.is_empty());
        let at_limit = park_at_limit(
            store,
            &self.options,
            &key,
            record,
            error,
            attempt.as_deref(),
            None,
        )
        .await;
        match at_limit {
            AtLimit::Parked(_) => true,
            AtLimit::Below => false,
            AtLimit::Uncounted(e) => {
                tracing::warn!(error = %e, "the attempt could not be counted");
                false
            }
            AtLimit::ParkFailed(e) => {
                tracing::error!(error = %e, "parking failed; the failure is reported");
                false
            }
        }
    }

    /// Whose attempts and parked records these are: the configured consumer,
    /// else the invoked function with its qualifier, else `local`.
    pub(super) fn consumer(&self) -> String {
        if let Some(consumer) = &self.options.consumer {
            return consumer.clone();
        }
        crate::processing::RecordContext::current()
            .filter(|c| !c.function_name.is_empty())
            .map_or_else(
                || "local".to_owned(),
                |c| crate::lambda::processor::qualified(&c.function_name, &c.function_arn),
            )
    }

    /// Counts a failed attempt of the window's action and, at
    /// `max_attempts`, parks the window (its state, `state_json`, as the
    /// data; keyed by the window's shard and start as an event id, so no
    /// replay puts it on a stream); `true` if it was parked.
    pub(super) async fn park_window(
        &self,
        props: &TimeWindowProperties,
        stream: &Option<String>,
        error: String,
        state_json: &str,
    ) -> bool {
        let shard = props.shard_id.clone().unwrap_or_default();
        let start = props.window.start.timestamp_millis().max(0);
        let Ok(sequence) = SequenceNumber::new(&start.to_string()) else {
            return false;
        };
        let key = stream.as_ref().map(|stream| RecordKey {
            consumer: Some(self.consumer()),
            source: Some(stream.clone()),
            shard_id: None,
            event_id: Some(format!("window-{shard}-{start}")),
            sequence,
            sub_sequence: 0,
        });
        let record = StreamRecord {
            shard_id: shard.as_str().into(),
            sequence_number: start.to_string().into(),
            sub_sequence: 0,
            aggregated: false,
            partition_key: "window".into(),
            explicit_hash_key: None,
            data: bytes::Bytes::copy_from_slice(state_json.as_bytes()),
            approximate_arrival: None,
            event_source_arn: stream.as_deref().map(Into::into),
            change: None,
        };
        let error = RecordError::Window {
            window_start: start.to_string(),
            error,
        };
        let parked = self.give_up(key, &record, &error).await;
        if parked {
            tracing::error!(
                shard,
                window_start = start,
                "the window's action kept failing: the window is parked and closed"
            );
        }
        parked
    }
}
