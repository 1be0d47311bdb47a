//! Command-line arguments.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Operate shardkeeper consumer groups: status, resets and rewinds,
/// backfills, positions moved between groups, KCL and event source
/// mappings, parked records.
#[derive(Debug, Parser)]
#[command(name = "shardkeeper", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The groups a state table holds, with their consumers, shards and
    /// parked records (one Scan of the table's keys).
    Groups(GroupsArgs),
    /// A group's consumers, leases, checkpoints (with the age of the last
    /// record), claims and EFO pool.
    Status(StatusArgs),
    /// Move a group's checkpoints (all shards, or one).
    Reset(ResetArgs),
    /// Move a running group's positions back (or on): every shard to a
    /// time, TRIM_HORIZON or LATEST, or one shard to a sequence number. The
    /// holders stop at their next heartbeat; the next ones start there.
    Rewind(RewindArgs),
    /// Start a bounded group (a backfill) beside a live one: it reads each
    /// shard from `--from` up to `--until` (a time) or up to where
    /// `--until-group` stands now, then its workers end.
    Backfill(BackfillArgs),
    /// Move a consumer between an event source mapping and the worker
    /// fleet, either way, losing nothing.
    Cutover(CutoverArgs),
    /// The poison records parked in the state table (oldest first per
    /// shard); `--replay` puts them back on their stream.
    Parked(ParkedArgs),
    /// A group's positions (each shard's checkpoint) as JSON on standard
    /// output, for `import` into another group, table or account.
    Export(ExportArgs),
    /// Set a group's checkpoints to the positions of an `export` (refused
    /// while registered consumers hold the leases, unless `--force`).
    Import(ImportArgs),
    /// Set a group's checkpoints to those of a KCL 2.x or 3.x lease table
    /// (refused while the KCL application still renews its leases).
    ImportKcl(ImportKclArgs),
    /// Write a group's positions into a KCL lease table, for a rollback to
    /// the KCL application (refused while the group's consumers hold
    /// leases, and while the KCL application renews its own).
    ExportKcl(ExportKclArgs),
    /// Move a group's shard items to another bucket count (partition keys),
    /// with every function of the group stopped.
    Spread(SpreadArgs),
    /// The batches a Kinesis event source mapping gave up on, from its
    /// on-failure records (its SQS or S3 destination's, saved to files):
    /// read again from the stream while it retains them and put back on it
    /// (or on `--to-stream`).
    ReplayFailures(ReplayFailuresArgs),
}

/// `replay-failures` (its arguments live beside the command).
pub use crate::failures::ReplayFailuresArgs;

/// Where the AWS services are, and with which credentials.
#[derive(Debug, Clone, Default, Args)]
pub struct Connection {
    /// AWS region (default: the standard region chain).
    #[arg(long)]
    pub region: Option<String>,
    /// A named profile of the shared AWS config and credentials files
    /// (default: the standard chain, which reads `AWS_PROFILE`).
    #[arg(long)]
    pub profile: Option<String>,
    /// DynamoDB endpoint URL (a local server, or a VPC endpoint). The
    /// credentials the standard chain finds are used; only when it finds
    /// none are dummy ones (what local servers accept).
    #[arg(long)]
    pub endpoint_url: Option<String>,
    /// Kinesis endpoint URL, for the commands that call Kinesis
    /// (`parked --replay`, `rewind`, `backfill`, `cutover`, `import-kcl`,
    /// `replay-failures`).
    #[arg(long)]
    pub kinesis_endpoint_url: Option<String>,
    /// S3 endpoint URL (path-style requests), for `replay-failures --from
    /// s3://...`.
    #[arg(long)]
    pub s3_endpoint_url: Option<String>,
}

/// Which group's state, where: named, or read from a deployed stack's
/// outputs (`--stack`; a name given explicitly wins).
#[derive(Debug, Clone, Default, Args)]
pub struct Target {
    /// A deployed stack (the control plane's, or an application's that
    /// nests it) whose outputs name the state table (`StateTableName`), the
    /// group (`ConsumerGroup`) and the stream (`StreamName`).
    #[arg(long, env = "SHARDKEEPER_STACK")]
    pub stack: Option<String>,
    /// The state table (default: the stack's, else `shardkeeper-state`).
    #[arg(long, visible_alias = "table-name", env = "SHARDKEEPER_TABLE")]
    pub table: Option<String>,
    /// The consumer group.
    #[arg(
        long,
        visible_alias = "group-name",
        env = "SHARDKEEPER_GROUP",
        required_unless_present = "stack"
    )]
    pub group: Option<String>,
    /// The stream the group consumes: its name, or its ARN (a stream another
    /// account shares).
    #[arg(
        long,
        visible_alias = "stream-name",
        env = "SHARDKEEPER_STREAM",
        required_unless_present = "stack"
    )]
    pub stream: Option<String>,
    /// Where, and with which credentials.
    #[command(flatten)]
    pub conn: Connection,
}

/// `groups`.
#[derive(Debug, Clone, Args)]
pub struct GroupsArgs {
    /// The state table.
    #[arg(
        long,
        visible_alias = "table-name",
        env = "SHARDKEEPER_TABLE",
        default_value = "shardkeeper-state"
    )]
    pub table: String,
    /// Where, and with which credentials.
    #[command(flatten)]
    pub conn: Connection,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Which group.
    #[command(flatten)]
    pub target: Target,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// A consumer whose heartbeat is older than this is shown as not live.
    #[arg(long, default_value_t = 10)]
    pub heartbeat_timeout_seconds: u64,
}

/// `parked`.
#[derive(Debug, Clone, Args)]
pub struct ParkedArgs {
    /// Which group.
    #[command(flatten)]
    pub target: Target,
    /// Print JSON (with each payload, base64) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Put each parked record back on its stream (with its partition key),
    /// oldest first per shard, and remove it from the parked set once put.
    /// Records kept only as a prefix (too large to park whole) and records
    /// of a DynamoDB stream are left and listed.
    #[arg(long)]
    pub replay: bool,
    /// With `--replay`: the Kinesis stream (name or ARN) to put the records
    /// on instead of the one each came from.
    #[arg(long, requires = "replay")]
    pub to_stream: Option<String>,
}

/// `reset`.
#[derive(Debug, Clone, Args)]
pub struct ResetArgs {
    /// Which group.
    #[command(flatten)]
    pub target: Target,
    /// Where to: `TRIM_HORIZON`, `LATEST`, a time (RFC 3339 or ms, also
    /// written `AT_TIMESTAMP:<time>`) or `AT_SEQUENCE_NUMBER:<sequence
    /// number>`: the text `status` prints (any case; `-` for `_` and `=`
    /// for `:` are read too).
    #[arg(long)]
    pub to: String,
    /// Only this shard (default: every shard of the scope).
    #[arg(long)]
    pub shard: Option<String>,
    /// Reset a standalone consumer's own checkpoints instead of the group's.
    #[arg(long, conflicts_with = "efo")]
    pub consumer: Option<String>,
    /// Reset a standalone EFO consumer's checkpoints instead of the group's.
    #[arg(long)]
    pub efo: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
    /// Reset even while live leases are held: the holders lose them.
    #[arg(long)]
    pub force: bool,
    /// Print what would be reset, and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How a command that changes a group goes: a dry run first, a
/// confirmation, the output.
#[derive(Debug, Clone, Default, Args)]
pub struct ChangeOptions {
    /// Print what would change, and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

impl ChangeOptions {
    /// Goes on if `--yes`, else asks `confirm` the `question`; refused as
    /// [`crate::Error::NotConfirmed`].
    pub fn confirm(
        &self,
        question: &str,
        confirm: impl FnOnce(&str) -> bool,
    ) -> Result<(), crate::Error> {
        if self.yes || confirm(question) {
            Ok(())
        } else {
            Err(crate::Error::NotConfirmed)
        }
    }

    /// With `--json`, `value` as pretty JSON (what the command prints).
    pub fn json<T: serde::Serialize>(&self, value: &T) -> Option<String> {
        self.json
            .then(|| serde_json::to_string_pretty(value).expect("a report serializes") + "\n")
    }
}

/// `rewind`.
#[derive(Debug, Clone, Args)]
pub struct RewindArgs {
    /// Which group (and with `--kinesis-endpoint-url`, where its stream is).
    #[command(flatten)]
    pub target: Target,
    /// Where every shard goes: `TRIM_HORIZON`, `LATEST` (the first record
    /// that arrives from now on) or a time (RFC 3339 or ms; also written
    /// `AT_TIMESTAMP:<time>`), as `reset --to` reads them.
    #[arg(long, required_unless_present = "shard", conflicts_with = "shard")]
    pub to: Option<String>,
    /// One shard only, to `--to-sequence`.
    #[arg(long, requires = "to_sequence")]
    pub shard: Option<String>,
    /// The sequence number `--shard` is read from again (inclusive).
    #[arg(long, requires = "shard")]
    pub to_sequence: Option<String>,
    /// Dry run, confirmation, output.
    #[command(flatten)]
    pub change: ChangeOptions,
}

/// `backfill`.
#[derive(Debug, Clone, Args)]
pub struct BackfillArgs {
    /// The backfill's own group (a new one), its stream and table (and with
    /// `--kinesis-endpoint-url`, where the stream is).
    #[command(flatten)]
    pub target: Target,
    /// Where it starts: `TRIM_HORIZON` or a time (RFC 3339 or ms), as
    /// `reset --to` reads them.
    #[arg(long, default_value = "TRIM_HORIZON")]
    pub from: String,
    /// Where it ends: the records that arrived before this time (RFC 3339
    /// or ms) are read.
    #[arg(
        long,
        required_unless_present = "until_group",
        conflicts_with = "until_group"
    )]
    pub until: Option<String>,
    /// Or: up to where this group (of the same stream and table) stands
    /// now, shard by shard.
    #[arg(long)]
    pub until_group: Option<String>,
    /// Dry run, confirmation, output.
    #[command(flatten)]
    pub change: ChangeOptions,
}

/// `cutover` (its arguments live beside the command).
pub use crate::cutover::{
    CutoverArgs, CutoverDirection, CutoverFromEsmArgs, CutoverToEsmArgs, EsmConsumer,
};

/// `export`.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// Which group.
    #[command(flatten)]
    pub target: Target,
}

/// `import`.
#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// Which group.
    #[command(flatten)]
    pub target: Target,
    /// The positions file an `export` wrote (`-`: standard input).
    #[arg(long)]
    pub file: PathBuf,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
    /// Import even while registered consumers hold the leases: the holders
    /// lose them.
    #[arg(long)]
    pub force: bool,
    /// Print what would be set, and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `import-kcl`.
#[derive(Debug, Clone, Args)]
pub struct ImportKclArgs {
    /// Which group (and with `--kinesis-endpoint-url`, where its stream is).
    #[command(flatten)]
    pub target: Target,
    /// The KCL application's lease table (by default KCL names it after
    /// the application).
    #[arg(long)]
    pub kcl_table: String,
    /// The time of an `AT_TIMESTAMP` start (RFC 3339 or ms), which KCL keeps
    /// in the application's configuration, not in the table.
    #[arg(long)]
    pub at_timestamp: Option<String>,
    /// How long to watch the table for renewals before importing: at least
    /// the KCL application's `failoverTimeMillis`.
    #[arg(long, default_value_t = 10_000)]
    pub watch_ms: u64,
    /// Import even while the group's registered consumers hold leases: the
    /// holders lose them.
    #[arg(long)]
    pub force: bool,
    /// Dry run, confirmation, output.
    #[command(flatten)]
    pub change: ChangeOptions,
}

/// `export-kcl`.
#[derive(Debug, Clone, Args)]
pub struct ExportKclArgs {
    /// Which group.
    #[command(flatten)]
    pub target: Target,
    /// The KCL application's lease table (it must exist).
    #[arg(long)]
    pub kcl_table: String,
    /// How long to watch the table for renewals before writing: at least
    /// the KCL application's `failoverTimeMillis`.
    #[arg(long, default_value_t = 10_000)]
    pub watch_ms: u64,
    /// Dry run, confirmation, output.
    #[command(flatten)]
    pub change: ChangeOptions,
}

/// `spread`.
#[derive(Debug, Clone, Args)]
pub struct SpreadArgs {
    /// Which group.
    #[command(flatten)]
    pub target: Target,
    /// The bucket count (a power of two up to 1024; default: what the
    /// group's open shards need).
    #[arg(long)]
    pub buckets: Option<u16>,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
    /// Move even while consumers heartbeat (they would keep writing under
    /// the layout they read).
    #[arg(long)]
    pub force: bool,
    /// Print what would move, and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// A consumer whose heartbeat is older than this counts as stopped.
    #[arg(long, default_value_t = 10)]
    pub heartbeat_timeout_seconds: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(
            ["shardkeeper"]
                .into_iter()
                .chain(args.split_whitespace())
                .chain(["--group", "g", "--stream", "s"]),
        )
    }

    #[test]
    fn the_commands_that_move_positions_parse_and_refuse_what_does_not_fit() {
        for ok in [
            "rewind --to LATEST --yes",
            "rewind --to 2026-11-21T10:00:00Z --dry-run --json",
            "rewind --shard shardId-000000000001 --to-sequence 4959",
            "backfill --from TRIM_HORIZON --until 1700000000000",
            "backfill --until-group live",
            "cutover from-esm --esm-group e --consumer orders --since 1700000000000",
            "cutover to-esm --esm-group e --consumer orders --dry-run",
            "import-kcl --kcl-table App --at-timestamp 1700000000000 --watch-ms 20000",
        ] {
            assert!(parse(ok).is_ok(), "{ok}: {:?}", parse(ok).err());
        }
        for refused in [
            "rewind --yes",
            "rewind --to LATEST --shard shardId-000000000001 --to-sequence 1",
            "rewind --shard shardId-000000000001",
            "backfill --from TRIM_HORIZON",
            "backfill --until 1 --until-group live",
            "cutover from-esm --consumer orders",
            "import-kcl",
        ] {
            assert!(parse(refused).is_err(), "{refused} parsed");
        }
    }
}
