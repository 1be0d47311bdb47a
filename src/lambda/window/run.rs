//! One invocation of a window: the state read, the fold over the records
//! (a failure rolls back its whole outer record; a fold that keeps failing
//! parks its record), the final action, and the state carried on, within
//! what Lambda carries.

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
    /// [`WindowProcessor::process`], with what it set aside.
    pub(super) async fn run(
        &self,
        event_json: &str,
    ) -> crate::Result<(Src::WindowResponse, SetAside)> {
        let mut set_aside = SetAside::default();
        let props: TimeWindowProperties = serde_json::from_str(event_json)
            .map_err(|e| crate::Error::Event(format!("not a {}: {e}", Src::EVENT)))?;
        let mut state: S = match props.state.get(STATE_KEY) {
            Some(json) => serde_json::from_str(json).unwrap_or_else(|e| {
                tracing::error!(
                    error = %e,
                    shard = props.shard_id.as_deref().unwrap_or(""),
                    window_start = %props.window.start,
                    "the window state does not decode (a deploy changed its shape?): \
                     the window goes on with a fresh state"
                );
                set_aside.states_dropped += 1;
                S::default()
            }),
            None => S::default(),
        };
        let mut units = Src::window_units(event_json).map_err(crate::Error::Event)?;
        if units.stream.is_none() {
            // A final invoke holds no records: the event's own ARN.
            units.stream = serde_json::from_str::<EventArn>(event_json)
                .ok()
                .and_then(|e| e.arn);
        }
        set_aside.stream = units.stream.clone();
        let consumer = self.consumer();
        let shard = props.shard_id.clone().or(units.shard.clone());
        let key_of = |record: &StreamRecord| -> Option<RecordKey> {
            Some(RecordKey {
                consumer: Some(consumer.clone()),
                source: Some(units.stream.clone()?),
                shard_id: Some(ShardId::new(shard.as_deref()?).ok()?),
                event_id: None,
                sequence: SequenceNumber::new(&record.sequence_number).ok()?,
                sub_sequence: record.sub_sequence,
            })
        };
        let mut failure: Option<(String, RecordError)> = None;
        'records: for (item, unit) in units.items.iter().cloned() {
            let records = match unit {
                Unit::Record(record) => vec![record],
                Unit::Records(records) => records,
                Unit::Broken(record, error) => {
                    if self.give_up(key_of(&record), &record, &error).await {
                        set_aside.records_parked += 1;
                        continue;
                    }
                    failure = Some((item.to_string(), error));
                    break;
                }
                Unit::Unreadable(_, error) => {
                    failure = Some((item.to_string(), error));
                    break;
                }
            };
            // A failure rolls back the whole outer record (all of a KPL
            // aggregate's user records): the retry delivers it whole again.
            // A user record parked instead is left out: the ones before it
            // are folded again on the state from before the outer record.
            let before = state.clone();
            let mut left_out = Vec::new();
            let mut i = 0;
            while i < records.len() {
                let record = &records[i];
                if left_out.contains(&i) {
                    i += 1;
                    continue;
                }
                if let Err(e) = (self.fold)(&mut state, record.clone()) {
                    let error = RecordError::Handler {
                        sequence_number: record.sequence_number.to_string(),
                        sub_sequence: record.sub_sequence,
                        error: e.into().to_string(),
                    };
                    state = before.clone();
                    if self.give_up(key_of(record), record, &error).await {
                        set_aside.records_parked += 1;
                        left_out.push(i);
                        i = 0;
                        continue;
                    }
                    failure = Some((record.sequence_number.to_string(), error));
                    break 'records;
                }
                i += 1;
            }
        }
        let action = |source| crate::Error::Window {
            what: "action",
            source,
        };
        let encoded = |state: &S| {
            serde_json::to_string(state).map_err(|e| crate::Error::Window {
                what: "state",
                source: e.into(),
            })
        };
        let window = |terminated_early| WindowInfo {
            start: props.window.start,
            end: props.window.end,
            shard_id: props.shard_id.clone(),
            terminated_early,
        };
        let mut failed = None;
        if let Some((item, error)) = failure {
            let logged = crate::processing::redact::LoggedError {
                error: &error,
                values: self.options.log_values,
            };
            tracing::warn!(item, error = %logged, "window record failed");
            failed = Some(item);
        } else if props.is_final_invoke_for_window {
            let kept = encoded(&state)?;
            let info = window(props.is_window_terminated_early);
            let done = (self.on_window)(state, info).await;
            if let Err(e) = done {
                if self
                    .park_window(&props, &units.stream, e.to_string(), &kept)
                    .await
                {
                    set_aside.actions_parked += 1;
                    return Ok((Src::window_response(None, None), set_aside));
                }
                return Err(action(e));
            }
            return Ok((Src::window_response(None, None), set_aside));
        }
        let mut kept = encoded(&state)?;
        let sent = sent_size(&kept);
        if sent > MAX_STATE_BYTES {
            tracing::warn!(
                bytes = sent,
                max = MAX_STATE_BYTES,
                "the window state would pass what Lambda carries: the window ends early \
                 and goes on with a fresh state"
            );
            if let Err(e) = (self.on_window)(state, window(true)).await {
                if !self
                    .park_window(&props, &units.stream, e.to_string(), &kept)
                    .await
                {
                    return Err(action(e));
                }
                set_aside.actions_parked += 1;
            }
            kept = encoded(&S::default())?;
        }
        Ok((Src::window_response(failed, Some(kept)), set_aside))
    }
}
