//! The event source mapping a `cutover from-esm` moves away from, as
//! Lambda's `GetEventSourceMapping` describes it: checked before anything
//! is written.

use crate::Error;

/// What the cut-over needs of the mapping: disabled, reading this stream,
/// at a ParallelizationFactor of 1 (at a factor above 1 a lane's progress
/// can pass another lane's records not done yet).
pub async fn check(
    lambda: &aws_sdk_lambda::Client,
    uuid: &str,
    stream_arn: &str,
) -> Result<(), Error> {
    let mapping = lambda
        .get_event_source_mapping()
        .uuid(uuid)
        .send()
        .await
        .map_err(|e| {
            Error::bad(
                "--mapping",
                format!("{uuid}: {}", aws_sdk_lambda::error::DisplayErrorContext(e)),
            )
        })?;
    let state = mapping.state().unwrap_or("unknown");
    if state != "Disabled" {
        return Err(Error::bad(
            "--mapping",
            format!(
                "mapping {uuid} is {state}: disable it (aws lambda update-event-source-mapping --uuid {uuid} --no-enabled), wait for its last invocations to end (the function's timeout), then cut over"
            ),
        ));
    }
    let source = mapping.event_source_arn().unwrap_or("");
    if source != stream_arn {
        return Err(Error::bad(
            "--mapping",
            format!("mapping {uuid} reads {source}, not the group's stream {stream_arn}"),
        ));
    }
    let factor = mapping.parallelization_factor().unwrap_or(1);
    if factor > 1 {
        return Err(Error::bad(
            "--mapping",
            format!(
                "mapping {uuid} has ParallelizationFactor {factor}: a lane's progress can pass another lane's records not done yet; set it to 1, let it run, and give the time as --since"
            ),
        ));
    }
    Ok(())
}
