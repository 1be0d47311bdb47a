//! `groups`, `status`, `parked` and `reset`: read the group, decide (pure), write (thin).

use crate::args::{GroupsArgs, ParkedArgs, ResetArgs, SpreadArgs, StatusArgs};
use crate::error::Error;
use crate::render;
use shardkeeper::group::{apply_reset, plan_reset, GroupStatus};
use shardkeeper::state::{
    Buckets, Checkpoint, ConsumerId, EfoName, ForStream, ParkedRecord, ShardId, ShardScope,
    StateStore, StreamAddress,
};
use std::time::Duration;

/// The group's status as tables, or as JSON with `--json`.
pub async fn status(store: &StateStore, args: &StatusArgs) -> Result<String, Error> {
    let snapshot = store.load_group().await?;
    let status = GroupStatus::from_snapshot(
        &snapshot,
        Duration::from_secs(args.heartbeat_timeout_seconds),
    );
    if args.json {
        Ok(serde_json::to_string_pretty(&status).expect("status serializes") + "\n")
    } else {
        Ok(render::status(&status))
    }
}

/// The groups of the table as a table, or as JSON with `--json`.
pub async fn groups(client: &aws_sdk_dynamodb::Client, args: &GroupsArgs) -> Result<String, Error> {
    let groups = shardkeeper::state::list_groups(
        client,
        &args.table,
        &shardkeeper::state::RetryPolicy::default(),
    )
    .await?;
    if args.json {
        Ok(serde_json::to_string_pretty(&groups).expect("groups serialize") + "\n")
    } else {
        Ok(render::groups(&groups))
    }
}

/// The parked records as a table, or as JSON with `--json`.
pub async fn parked(store: &StateStore, args: &ParkedArgs) -> Result<String, Error> {
    let parked = store.record_state().list_parked().await?;
    if args.json {
        let rows: Vec<serde_json::Value> = parked.iter().map(render::parked_json).collect();
        Ok(serde_json::to_string_pretty(&rows).expect("parked records serialize") + "\n")
    } else {
        Ok(render::parked(&parked, store.now()))
    }
}

/// Where a parked record goes back to (`--to-stream`, else the Kinesis
/// stream it came from, else the group's), or why it cannot.
fn replay_target(
    record: &ParkedRecord,
    to_stream: Option<&StreamAddress>,
    group_stream: &StreamAddress,
) -> Result<StreamAddress, &'static str> {
    if record.data_sha256.is_some() {
        return Err("kept only as a prefix (read it from the stream by its key)");
    }
    match (to_stream, record.key.source.as_deref()) {
        (Some(stream), _) => Ok(stream.clone()),
        (None, None) => Ok(group_stream.clone()),
        (None, Some(arn)) => StreamAddress::parse(arn)
            .map_err(|_| "from a DynamoDB stream (give --to-stream to put it on a Kinesis stream)"),
    }
}

/// `parked --replay`: each parked record put back on its stream (or
/// `--to-stream`) with its partition key, oldest first per shard, then
/// removed from the parked set. Records that cannot be put back whole are
/// left, with why. A failed put stops the replay (what was put is removed;
/// the rest stays parked).
pub async fn replay_parked(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    args: &ParkedArgs,
) -> Result<String, Error> {
    let parked = store.record_state().list_parked().await?;
    let to_stream = args
        .to_stream
        .as_deref()
        .map(StreamAddress::parse)
        .transpose()?;
    let group_stream = &store.config().stream;
    let mut out = String::new();
    let mut replayed = 0;
    for record in &parked {
        let at = format!("{}/{}", record.key.sequence, record.key.sub_sequence);
        let stream = match replay_target(record, to_stream.as_ref(), group_stream) {
            Ok(target) => target,
            Err(why) => {
                out.push_str(&format!("left {at}: {why}\n"));
                continue;
            }
        };
        let sent = kinesis
            .put_record()
            .for_stream(&stream)
            .partition_key(&record.partition_key)
            .data(aws_sdk_kinesis::primitives::Blob::new(record.data.clone()))
            .send()
            .await
            .map_err(|e| Error::from(shardkeeper::state::kinesis_error("PutRecord", &e)))?;
        store.record_state().remove_parked(&record.key).await?;
        replayed += 1;
        out.push_str(&format!(
            "replayed {at} to {stream} as {}\n",
            sent.sequence_number()
        ));
    }
    out.push_str(&format!(
        "{replayed} of {} parked records replayed\n",
        parked.len()
    ));
    Ok(out)
}

/// Parses a time given as RFC 3339 or as epoch milliseconds, for the
/// argument `name`.
pub fn parse_time(name: &'static str, text: &str) -> Result<i64, Error> {
    match text.parse::<i64>() {
        Ok(ms) => Ok(ms),
        Err(_) => Ok(chrono::DateTime::parse_from_rfc3339(text)
            .map_err(|e| Error::bad(name, format!("{text:?} is not a timestamp: {e}")))?
            .timestamp_millis()),
    }
}

/// The one way the commands read a position (`reset --to`, `rewind --to`,
/// `backfill --from`): the text `status` prints for a checkpoint
/// (`TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP:<time>`,
/// `AT_SEQUENCE_NUMBER:<sequence number>`), in either case, with `-` for
/// `_` and `=` for `:` if preferred; a time is RFC 3339 or epoch
/// milliseconds, and a time alone means `AT_TIMESTAMP`. `arg` names the
/// argument in the error.
pub fn parse_position(arg: &'static str, text: &str) -> Result<Checkpoint, Error> {
    let word = |s: &str| s.trim().to_ascii_uppercase().replace('-', "_");
    if let Some((kind, value)) = text.split_once([':', '=']) {
        match word(kind).as_str() {
            "AT_TIMESTAMP" => return Ok(Checkpoint::AtTimestamp(parse_time(arg, value.trim())?)),
            "AT_SEQUENCE_NUMBER" | "AT_SEQUENCE" => {
                return shardkeeper::state::SequenceNumber::new(value.trim())
                    .map(Checkpoint::AtSequence)
                    .map_err(|e| Error::bad(arg, e.to_string()))
            }
            _ => {}
        }
    }
    match word(text).as_str() {
        "TRIM_HORIZON" => Ok(Checkpoint::TrimHorizon),
        "LATEST" => Ok(Checkpoint::Latest),
        _ => parse_time(arg, text.trim())
            .map(Checkpoint::AtTimestamp)
            .map_err(|_| {
                Error::bad(
                    arg,
                    format!(
                        "{text:?}: expected TRIM_HORIZON, LATEST, a time (RFC 3339 or ms), \
                     AT_TIMESTAMP:<time> or AT_SEQUENCE_NUMBER:<sequence number>"
                    ),
                )
            }),
    }
}

/// Resets checkpoints: plans (refusing while leases are held unless
/// `--force`), prints the plan and stops with `--dry-run`, asks `confirm`
/// with a description of the plan unless `--yes`, then applies.
pub async fn reset(
    store: &StateStore,
    args: &ResetArgs,
    confirm: impl FnOnce(&str) -> bool,
) -> Result<String, Error> {
    let to = parse_position("--to", &args.to)?;
    let scope = match (&args.consumer, &args.efo) {
        (Some(c), _) => ShardScope::Consumer(ConsumerId::new(c)?),
        (_, Some(e)) => ShardScope::Efo(EfoName::new(e)?),
        _ => ShardScope::Group,
    };
    let shard = args.shard.as_deref().map(ShardId::new).transpose()?;
    let snapshot = store.load_group().await?;
    let plan = plan_reset(&snapshot, &scope, shard.as_ref(), args.force)?;
    let config = store.config();
    let question = format!(
        "reset {} shard(s) of group {} on stream {} to {to}{}?",
        plan.shards.len(),
        config.group,
        config.stream,
        if plan.evict {
            ", ending the live leases held on them"
        } else {
            ""
        }
    );
    if args.dry_run {
        return Ok(dry_run(
            &question,
            plan.shards.iter().map(|s| s.shard_id.as_str()),
        ));
    }
    if !args.yes && !confirm(&question) {
        return Err(Error::NotConfirmed);
    }
    let report = apply_reset(store, &plan, &to).await?;
    if args.json {
        Ok(serde_json::to_string_pretty(&report).expect("report serializes") + "\n")
    } else {
        Ok(render::reset(&report))
    }
}

/// Moves the group's shard items to another bucket count: refuses while a
/// consumer heartbeats (unless `--force`), prints the move and stops with
/// `--dry-run`, asks `confirm` unless `--yes`, then moves (see
/// `Layout::respread`).
pub async fn spread(
    store: &StateStore,
    args: &SpreadArgs,
    confirm: impl FnOnce(&str) -> bool,
) -> Result<String, Error> {
    let snapshot = store.load_group().await?;
    let status = GroupStatus::from_snapshot(
        &snapshot,
        Duration::from_secs(args.heartbeat_timeout_seconds),
    );
    let limit = (args.heartbeat_timeout_seconds * 1000) as i64;
    let beating: Vec<&str> = status
        .consumers
        .iter()
        .filter(|c| c.heartbeat_age_ms < limit)
        .map(|c| c.id.as_str())
        .collect();
    if !beating.is_empty() && !args.force {
        return Err(Error::SpreadRefused(format!(
            "consumers still heartbeat ({}): stop every function of the group first, or pass --force",
            beating.join(", ")
        )));
    }
    let to = Buckets::new(args.buckets.unwrap_or(status.buckets_for_open_shards))?;
    let config = store.config();
    let question = format!(
        "move the shard items of group {} on stream {} from {} to {to} buckets?",
        config.group, config.stream, snapshot.buckets
    );
    if args.dry_run {
        return Ok(dry_run(&question, std::iter::empty()));
    }
    if !args.yes && !confirm(&question) {
        return Err(Error::NotConfirmed);
    }
    let report = store.layout().respread(to).await?;
    Ok(format!(
        "spread over {} buckets (was {}): {} items moved, {} already in place\n",
        report.to, report.from, report.moved, report.in_place
    ))
}

/// What a `--dry-run` prints: the question the command would ask, and the
/// shards it names, one a line.
pub(crate) fn dry_run<'a>(question: &str, shards: impl Iterator<Item = &'a str>) -> String {
    let mut out = format!(
        "dry run, nothing written: would {}\n",
        question.trim_end_matches('?')
    );
    for shard in shards {
        out.push_str("  ");
        out.push_str(shard);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Checkpoint {
        Checkpoint::AtTimestamp(ms)
    }

    #[test]
    fn every_command_reads_a_position_the_way_status_prints_it_and_in_friendlier_spellings() {
        let same = [
            ("TRIM_HORIZON", Checkpoint::TrimHorizon),
            ("trim-horizon", Checkpoint::TrimHorizon),
            ("Trim_Horizon", Checkpoint::TrimHorizon),
            ("LATEST", Checkpoint::Latest),
            ("latest", Checkpoint::Latest),
            ("AT_TIMESTAMP:1700000000000", at(1_700_000_000_000)),
            ("at-timestamp=1700000000000", at(1_700_000_000_000)),
            ("1700000000000", at(1_700_000_000_000)),
            ("2023-11-14T22:13:20Z", at(1_700_000_000_000)),
            ("AT_TIMESTAMP:2023-11-14T22:13:20Z", at(1_700_000_000_000)),
        ];
        for (text, expected) in same {
            assert_eq!(parse_position("--to", text).unwrap(), expected, "{text}");
        }
        // What `status` prints for a checkpoint reads back as it.
        for cp in [Checkpoint::TrimHorizon, Checkpoint::Latest, at(5)] {
            assert_eq!(parse_position("--to", &cp.to_string()).unwrap(), cp);
        }
        let seq = "49590338271490256608559692538361571095921575989136588898";
        let expected =
            Checkpoint::AtSequence(shardkeeper::state::SequenceNumber::new(seq).unwrap());
        assert_eq!(
            parse_position("--to", &format!("AT_SEQUENCE_NUMBER:{seq}")).unwrap(),
            expected
        );
        assert_eq!(
            parse_position("--to", &format!("at-sequence={seq}")).unwrap(),
            expected
        );
    }

    #[test]
    fn a_position_that_is_none_of_them_is_a_typed_error_naming_the_argument() {
        for text in [
            "yesterday",
            "AT_TIMESTAMP:soon",
            "AT_SEQUENCE_NUMBER:abc",
            "",
        ] {
            match parse_position("--from", text) {
                Err(Error::BadArgument { name, .. }) => assert_eq!(name, "--from", "{text}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
