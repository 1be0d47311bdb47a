use super::*;

/// A writer of the subscriber's lines into a shared buffer.
#[derive(Clone, Default)]
struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The lines a JSON subscriber at INFO wrote while `processor` ran the
/// example batch, as JSON values.
fn logged_while_processing<H: RecordHandler>(
    processor: KinesisProcessor<H>,
) -> Vec<serde_json::Value> {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let event = include_str!("../../../events/kinesis-batch.json");
    let run = || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(processor.process(event, None))
            .unwrap()
    };
    // A first run registers the callsites (another test's thread may
    // have registered them first, while no subscriber wanted them, and
    // tracing caches that answer); they are asked again with this
    // thread's subscriber in place, and the second run is the one read.
    let _ = run();
    tracing::subscriber::with_default(subscriber, || {
        tracing::callsite::rebuild_interest_cache();
        run();
    });
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_handlers_own_log_lines_carry_the_shard_sequence_number_and_partition_key() {
    let handler = |record: crate::processing::StreamRecord| async move {
        tracing::info!(bytes = record.data.len(), "handling an order");
        Ok::<(), std::io::Error>(())
    };
    let logged = logged_while_processing(KinesisProcessor::new(handler));
    let inside: Vec<&serde_json::Value> = logged
        .iter()
        .filter(|l| l["fields"]["message"] == "handling an order")
        .collect();
    assert_eq!(inside.len(), 3, "{logged:?}");
    let span = &inside[0]["span"];
    assert_eq!(span["name"], "record");
    assert_eq!(span["shard"], "shardId-000000000000");
    assert_eq!(
        span["sequence_number"],
        "49590338271490256608559692538361571095921575989136588898"
    );
    assert_eq!(span["partition_key"], "c-1");

    // Turned off, the lines carry no span.
    let options = ProcessingOptions {
        handler_spans: false,
        ..ProcessingOptions::default()
    };
    let logged = logged_while_processing(KinesisProcessor::new(handler).with_options(options));
    assert!(logged
        .iter()
        .filter(|l| l["fields"]["message"] == "handling an order")
        .all(|l| l.get("span").is_none()));
}
