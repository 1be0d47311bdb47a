//! `--stack NAME`: the state table, group and stream of a deployed stack,
//! read from its outputs (`StateTableName`, `ConsumerGroup`, `StreamName`:
//! the control plane's, which the example applications' stacks pass on),
//! so an operator names the stack instead of the names CloudFormation
//! generated. A name given explicitly wins over the stack's.

use crate::args::{Command, Connection, CutoverDirection, Target};
use crate::error::Error;
use std::collections::BTreeMap;
use std::future::Future;

/// The state table when neither `--table` nor a stack names one.
pub const DEFAULT_TABLE: &str = "shardkeeper-state";

/// Where a stack's outputs come from: CloudFormation, or a test's fake.
pub trait StackOutputs {
    /// The outputs of `stack` (key to value).
    fn outputs(
        &self,
        conn: &Connection,
        stack: &str,
    ) -> impl Future<Output = Result<BTreeMap<String, String>, Error>>;
}

/// A stack's outputs by CloudFormation `DescribeStacks`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CloudFormation;

impl StackOutputs for CloudFormation {
    async fn outputs(
        &self,
        conn: &Connection,
        stack: &str,
    ) -> Result<BTreeMap<String, String>, Error> {
        let client = crate::connect::cloudformation(conn).await;
        let out = client
            .describe_stacks()
            .stack_name(stack)
            .send()
            .await
            .map_err(|e| {
                Error::bad(
                    "--stack",
                    format!(
                        "{stack}: {}",
                        aws_sdk_cloudformation::error::DisplayErrorContext(e)
                    ),
                )
            })?;
        Ok(out
            .stacks()
            .first()
            .map(|s| {
                s.outputs()
                    .iter()
                    .filter_map(|o| {
                        Some((o.output_key()?.to_owned(), o.output_value()?.to_owned()))
                    })
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// The command's target, if it has one.
fn target_mut(command: &mut Command) -> Option<&mut Target> {
    Some(match command {
        Command::Groups(_) | Command::ReplayFailures(_) => return None,
        Command::Status(a) => &mut a.target,
        Command::Reset(a) => &mut a.target,
        Command::Rewind(a) => &mut a.target,
        Command::Backfill(a) => &mut a.target,
        Command::Cutover(a) => match &mut a.direction {
            CutoverDirection::FromEsm(a) => &mut a.target,
            CutoverDirection::ToEsm(a) => &mut a.target,
        },
        Command::Parked(a) => &mut a.target,
        Command::Export(a) => &mut a.target,
        Command::Import(a) => &mut a.target,
        Command::ImportKcl(a) => &mut a.target,
        Command::ExportKcl(a) => &mut a.target,
        Command::Spread(a) => &mut a.target,
    })
}

/// Fills the command's table, group and stream from its `--stack`'s
/// outputs where they were not given, and the table's default without a
/// stack. A name neither given nor in the stack is a typed error naming
/// both ways to give it.
pub async fn resolve(command: &mut Command, stacks: &impl StackOutputs) -> Result<(), Error> {
    let Some(target) = target_mut(command) else {
        return Ok(());
    };
    let outputs = match &target.stack {
        Some(stack) => stacks.outputs(&target.conn, stack).await?,
        None => BTreeMap::new(),
    };
    let stack = target.stack.as_deref().unwrap_or("");
    let from = |given: &mut Option<String>, output: &str, arg: &'static str| {
        if given.is_none() {
            *given = outputs.get(output).cloned();
        }
        if given.is_none() && !stack.is_empty() {
            return Err(Error::bad(
                arg,
                format!("stack {stack} has no output {output}: give {arg}"),
            ));
        }
        Ok(())
    };
    if target.table.is_none() && !outputs.contains_key("StateTableName") {
        target.table = Some(DEFAULT_TABLE.to_owned());
    }
    from(&mut target.table, "StateTableName", "--table")?;
    from(&mut target.group, "ConsumerGroup", "--group")?;
    from(&mut target.stream, "StreamName", "--stream")?;
    Ok(())
}
