//! Kinesis event-source-mapping events, read the way a consumer function
//! reads them: through the batch processor (both failure modes) and the
//! tumbling-window processor, with KPL aggregates de-aggregated.
//!
//! The handler fails a record whose payload is not JSON, as the `json`
//! handler does, so that the failure paths run too.

use super::block_on;
use aws_lambda_events::time_window::TimeWindowProperties;
use shardkeeper::lambda::{KinesisProcessor, KinesisWindowProcessor, STATE_KEY};
use shardkeeper::processing::{
    FailureMode, HandlerError, ProcessingOptions, RecordError, StreamRecord,
};
use shardkeeper::state::SequenceNumber;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One input.
pub fn run(data: &[u8]) {
    let Ok(event) = std::str::from_utf8(data) else {
        return;
    };
    batch(event, FailureMode::StopAtFirstFailure);
    batch(event, FailureMode::ReportAllFailures);
    window(event);
}

/// What the handler was given.
struct Seen {
    sequence_number: Arc<str>,
    sub_sequence: u64,
    aggregated: bool,
    ok: bool,
}

fn is_json(record: &StreamRecord) -> bool {
    record.json::<serde_json::Value>().is_ok()
}

fn batch(event: &str, mode: FailureMode) {
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = seen.clone();
    let handler = move |record: StreamRecord| {
        let ok = is_json(&record);
        log.lock().unwrap().push(Seen {
            sequence_number: record.sequence_number.clone(),
            sub_sequence: record.sub_sequence,
            aggregated: record.aggregated,
            ok,
        });
        async move {
            if ok {
                Ok(())
            } else {
                Err("payload is not JSON")
            }
        }
    };
    let options = ProcessingOptions::default().mode(mode);
    let processor = KinesisProcessor::new(handler).with_options(options);
    let result = block_on(processor.process(event, None));
    let seen = seen.lock().unwrap();

    let mut previous: Option<&Seen> = None;
    for s in seen.iter() {
        assert!(
            SequenceNumber::new(&s.sequence_number).is_ok(),
            "the handler got an invalid sequence number {:?}",
            s.sequence_number
        );
        if !s.aggregated {
            assert_eq!(
                s.sub_sequence, 0,
                "a plain record has a sub-sequence number"
            );
        } else if s.sub_sequence > 0 {
            let p = previous.expect("a later user record follows an earlier one");
            assert!(p.aggregated && p.sequence_number == s.sequence_number);
            assert_eq!(
                p.sub_sequence + 1,
                s.sub_sequence,
                "user records out of order"
            );
        }
        previous = Some(s);
    }

    let Ok(report) = result else {
        return;
    };
    let handled_ok = seen.iter().filter(|s| s.ok).count() as u64;
    assert_eq!(report.processed, handled_ok);
    assert_eq!(
        report.duplicates_skipped, 0,
        "no store, no checkpoint to skip by"
    );
    assert_eq!(report.parked, 0, "no store, no parking");
    assert_eq!(report.checkpoints, 0, "no store, no checkpoint");

    let handler_failures: Vec<&str> = report
        .failures
        .iter()
        .filter(|f| matches!(f.error, RecordError::Handler { .. }))
        .map(|f| f.item_identifier.as_str())
        .collect();
    let failed_calls: Vec<&str> = seen
        .iter()
        .filter(|s| !s.ok)
        .map(|s| &*s.sequence_number)
        .collect();
    assert_eq!(
        handler_failures, failed_calls,
        "a failed record was not reported"
    );

    match mode {
        FailureMode::StopAtFirstFailure => {
            assert!(
                report.failures.len() <= 1,
                "the batch went on after a failure"
            );
            if report.failures.is_empty() {
                assert_eq!(report.not_attempted, 0);
            }
            if let Some(i) = seen.iter().position(|s| !s.ok) {
                assert_eq!(i + 1, seen.len(), "the handler ran after a failure");
            }
        }
        _ => assert_eq!(report.not_attempted, 0, "every record is attempted"),
    }
}

fn window(event: &str) {
    let folded = Arc::new(AtomicU64::new(0));
    let count = folded.clone();
    let processor = KinesisWindowProcessor::new(
        move |state: &mut u64, record: StreamRecord| {
            if !is_json(&record) {
                return Err("payload is not JSON");
            }
            *state = state.wrapping_add(1);
            count.fetch_add(1, Ordering::Relaxed);
            Ok(())
        },
        |_state: u64, window| async move {
            let _ = window;
            Ok::<(), HandlerError>(())
        },
    );
    let Ok(response) = block_on(processor.process(event)) else {
        return;
    };
    let props: TimeWindowProperties =
        serde_json::from_str(event).expect("the processor read these properties");
    // A state that does not decode is dropped (counted), and the window
    // goes on from a fresh one.
    let initial = props
        .state
        .get(STATE_KEY)
        .and_then(|json| serde_json::from_str::<u64>(json).ok())
        .unwrap_or(0);
    if let Some(state) = response
        .time_window_event_response_properties
        .state
        .get(STATE_KEY)
    {
        let state: u64 = serde_json::from_str(state).expect("the returned state is a count");
        let folded = folded.load(Ordering::Relaxed);
        assert_eq!(
            state,
            initial.wrapping_add(folded),
            "the state is not the initial state plus the records folded"
        );
    }
}
