//! The demo's report as text: its verification and the final assignment
//! table.

use shardkeeper_cli::render::{or_dash, table};
use std::fmt::Write;

/// The demo's verification and the final assignment table.
pub fn demo(r: &crate::DemoReport) -> String {
    let v = &r.verification;
    let mut out = String::new();
    let _ = writeln!(out, "\nverification ({:.1}s)", r.elapsed.as_secs_f64());
    let ids = |s: &[shardkeeper::state::ShardId]| {
        s.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
    };
    let rows = vec![
        vec![
            "records produced".into(),
            v.produced.to_string(),
            String::new(),
        ],
        vec![
            "records processed".into(),
            v.processed.to_string(),
            format!("{} duplicates, re-run after a lost lease", v.duplicates),
        ],
        vec![
            "duplicates the checkpoints rule out".into(),
            v.unjustified_duplicates.to_string(),
            check(v.unjustified_duplicates == 0).into(),
        ],
        vec![
            "records lost".into(),
            v.lost.to_string(),
            check(v.lost == 0).into(),
        ],
        vec![
            "per-key order violations".into(),
            v.order_violations.to_string(),
            check(v.order_violations == 0).into(),
        ],
        vec![
            "shards held by two consumers at once".into(),
            v.double_owned.len().to_string(),
            format!(
                "{} {}",
                check(v.double_owned.is_empty()),
                ids(&v.double_owned)
            ),
        ],
        vec![
            "handler calls of two consumers on one shard at once".into(),
            v.overlaps.len().to_string(),
            check(v.overlaps.is_empty()).into(),
        ],
        vec![
            "handler calls in another consumer's holding".into(),
            v.intrusions.len().to_string(),
            check(v.intrusions.is_empty()).into(),
        ],
        vec![
            "checkpoints moved backwards".into(),
            v.checkpoint_regressions.len().to_string(),
            format!(
                "{} {}",
                check(v.checkpoint_regressions.is_empty()),
                ids(&v.checkpoint_regressions)
            ),
        ],
        vec![
            "children read before their parents ended".into(),
            v.children_before_parents.len().to_string(),
            format!(
                "{} {}",
                check(v.children_before_parents.is_empty()),
                ids(&v.children_before_parents)
            ),
        ],
    ];
    out.push_str(&table(&["check", "value", "result"], &rows));
    if let Some(k) = &r.killed {
        let _ = writeln!(out, "killed part-way: {k}");
    }
    if let Some(s) = &r.split {
        let _ = writeln!(out, "split part-way: {s}");
    }
    let _ = writeln!(out, "\nfinal assignments");
    let shards: Vec<Vec<String>> = r
        .final_status
        .shards
        .iter()
        .map(|s| {
            vec![
                s.shard.clone(),
                s.state.to_owned(),
                or_dash(s.owner.as_deref()),
                or_dash(s.checkpoint.as_deref()),
            ]
        })
        .collect();
    out.push_str(&table(&["shard", "state", "owner", "checkpoint"], &shards));
    let _ = writeln!(
        out,
        "\n{}",
        if v.passed() {
            "demo passed"
        } else {
            "demo FAILED"
        }
    );
    out
}

fn check(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "FAILED"
    }
}
