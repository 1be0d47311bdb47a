//! Plain-text tables for people (the `--json` forms are the serde output).

use shardkeeper::group::{GroupStatus, ResetReport};
use std::fmt::Write;

/// `1.2s`, `3m04s`, `2h05m`; `-` for none; negative for the past.
pub fn age(ms: Option<i64>) -> String {
    let Some(ms) = ms else {
        return "-".to_owned();
    };
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.unsigned_abs();
    let text = if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60)
    };
    format!("{sign}{text}")
}

/// Rows as aligned columns under a header.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", text.join("  ").trim_end());
    };
    line(header.to_vec(), &mut out);
    for row in rows {
        line(row.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

/// The groups of a state table, one row each.
pub fn groups(groups: &[shardkeeper::state::GroupSummary]) -> String {
    if groups.is_empty() {
        return "no groups\n".to_owned();
    }
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            vec![
                g.group.clone(),
                g.stream.clone(),
                g.consumers.to_string(),
                g.shards.to_string(),
                g.parked.to_string(),
                g.items.to_string(),
            ]
        })
        .collect();
    table(
        &["GROUP", "STREAM", "CONSUMERS", "SHARDS", "PARKED", "ITEMS"],
        &rows,
    )
}

/// Parked records: where each came from, when, after how many attempts,
/// why, and how much of its payload is kept.
pub fn parked(records: &[shardkeeper::state::ParkedRecord], now: i64) -> String {
    if records.is_empty() {
        return "no parked records\n".to_owned();
    }
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|p| {
            let kept = match &p.data_sha256 {
                Some(_) => format!("{} of {} bytes", p.data.len(), p.data_size),
                None => format!("{} bytes", p.data_size),
            };
            let mut error = p.error.clone();
            if error.chars().count() > 60 {
                error = error.chars().take(57).collect::<String>() + "...";
            }
            vec![
                or_dash(p.key.source.as_deref()),
                or_dash(p.key.shard_id.as_ref().map(|s| s.as_str())),
                format!("{}/{}", p.key.sequence, p.key.sub_sequence),
                p.partition_key.clone(),
                p.attempts.to_string(),
                age(Some(now - p.parked_at)),
                kept,
                error,
            ]
        })
        .collect();
    table(
        &[
            "SOURCE", "SHARD", "RECORD", "KEY", "ATTEMPTS", "PARKED", "PAYLOAD", "ERROR",
        ],
        &rows,
    )
}

/// One parked record as JSON, its payload (or kept prefix) in base64.
pub fn parked_json(p: &shardkeeper::state::ParkedRecord) -> serde_json::Value {
    serde_json::json!({
        "source": p.key.source,
        "shard_id": p.key.shard_id.as_ref().map(|s| s.as_str()),
        "sequence_number": p.key.sequence.as_str(),
        "sub_sequence": p.key.sub_sequence,
        "partition_key": p.partition_key,
        "attempts": p.attempts,
        "parked_at": p.parked_at,
        "error": p.error,
        "data": base64_simd::STANDARD.encode_to_string(&p.data),
        "data_size": p.data_size,
        "data_sha256": p.data_sha256,
    })
}

/// `v`, or `-` for none.
pub fn or_dash(v: Option<&str>) -> String {
    v.unwrap_or("-").to_owned()
}

/// The status as three tables: consumers, shards, EFO pool.
pub fn status(s: &GroupStatus) -> String {
    let mut out = String::new();
    let consumers: Vec<Vec<String>> = s
        .consumers
        .iter()
        .map(|c| {
            vec![
                c.id.clone(),
                c.host.clone(),
                age(Some(c.heartbeat_age_ms)),
                if c.live { "live" } else { "not live" }.to_owned(),
                if c.standalone {
                    "standalone"
                } else if c.active {
                    "active"
                } else {
                    "inactive"
                }
                .to_owned(),
                c.leases.to_string(),
            ]
        })
        .collect();
    let _ = writeln!(out, "consumers ({})", consumers.len());
    out.push_str(&table(
        &["consumer", "host", "heartbeat", "state", "mode", "leases"],
        &consumers,
    ));
    let shards: Vec<Vec<String>> = s
        .shards
        .iter()
        .map(|r| {
            vec![
                r.scope.clone(),
                r.shard.clone(),
                r.state.to_owned(),
                or_dash(r.owner.as_deref()),
                age(r.owner_heartbeat_age_ms),
                r.counter.to_string(),
                r.claim
                    .as_ref()
                    .map(|(by, a)| format!("{by} ({})", age(Some(*a))))
                    .unwrap_or_else(|| "-".to_owned()),
                age(r.last_record_age_ms),
                or_dash(r.checkpoint.as_deref()),
            ]
        })
        .collect();
    let _ = writeln!(out, "\nshards ({})", shards.len());
    if s.buckets_for_open_shards > s.buckets {
        let _ = writeln!(
            out,
            "spread over {} buckets; its open shards would be given {}: see OPERATIONS.md, \"Spreading a group over more buckets\"",
            s.buckets, s.buckets_for_open_shards
        );
    }
    if let Some(b) = &s.bounded {
        let _ = writeln!(
            out,
            "bounded group (a backfill) up to {}: {} of {} shard(s) read to their end{}",
            b.end,
            b.done,
            b.shards,
            if b.finished { ", finished" } else { "" }
        );
    }
    if let Some(r) = &s.rewind {
        let _ = writeln!(
            out,
            "rewind {} (to {}, begun {} ago): {} of {} shard(s) moved, {}",
            r.request,
            r.to,
            age(Some(s.taken_at - r.started)),
            r.moved,
            r.shards,
            if r.finished {
                "finished"
            } else {
                "unfinished: run the same rewind again to finish it"
            }
        );
    }
    out.push_str(&table(
        &[
            "scope",
            "shard",
            "state",
            "owner",
            "owner beat",
            "counter",
            "claim",
            "last record age",
            "checkpoint",
        ],
        &shards,
    ));
    let efo: Vec<Vec<String>> = s
        .efo
        .iter()
        .map(|e| {
            vec![
                e.name.clone(),
                or_dash(e.used_by.as_deref()),
                age(e.idle_ms),
                e.arn.clone(),
            ]
        })
        .collect();
    let _ = writeln!(out, "\nEFO pool ({})", efo.len());
    out.push_str(&table(&["name", "locked by", "idle", "arn"], &efo));
    out
}

/// What a reset did.
pub fn reset(r: &ResetReport) -> String {
    let mut out = format!("reset: {} shard(s)\n", r.reset.len());
    for s in &r.reset {
        let _ = writeln!(out, "  {s}");
    }
    if !r.changed.is_empty() {
        let _ = writeln!(
            out,
            "changed while resetting (not touched; run again): {}",
            r.changed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if !r.skipped_depleted.is_empty() {
        let _ = writeln!(
            out,
            "depleted, left alone: {}",
            r.skipped_depleted
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out
}

/// What `rewind` did, or on a dry run would do.
pub fn rewind(o: &crate::rewind::RewindOutcome) -> String {
    let p = &o.plan;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rewind {} to {}{}: {} shard(s) {}",
        p.request,
        p.to,
        if p.resumed {
            ", carrying on the one cut short"
        } else {
            ""
        },
        p.moves.len(),
        if o.report.is_some() {
            "to move"
        } else {
            "would move"
        }
    );
    for m in &p.moves {
        let mut line = format!(
            "  {}: {} -> {}",
            m.shard,
            m.from.as_ref().map_or("-".to_owned(), ToString::to_string),
            p.to
        );
        if let Some(h) = &m.holder {
            let _ = write!(line, ", ending {h}'s lease");
        }
        if m.reopen {
            line.push_str(", read again");
        }
        if !m.wait_for.is_empty() {
            let waits: Vec<&str> = m.wait_for.iter().map(|s| s.as_str()).collect();
            let _ = write!(line, ", waits for {}", waits.join(", "));
        }
        let _ = writeln!(out, "{line}");
    }
    let ids = |v: &[shardkeeper::state::ShardId]| {
        v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
    };
    if !p.already.is_empty() {
        let _ = writeln!(
            out,
            "moved by this rewind before, left: {}",
            ids(&p.already)
        );
    }
    if !p.gone.is_empty() {
        let _ = writeln!(
            out,
            "no longer in the stream, left as they are: {}",
            ids(&p.gone)
        );
    }
    if let Some(r) = &o.report {
        let _ = writeln!(out, "moved: {} shard(s)", r.moved.len());
        if !r.changed.is_empty() {
            let _ = writeln!(
                out,
                "changed while moving (not moved): {}; run the same rewind again to finish",
                ids(&r.changed)
            );
        }
        let _ = writeln!(
            out,
            "{}",
            if r.finished {
                "rewind finished"
            } else {
                "rewind unfinished"
            }
        );
    }
    out
}

/// What `import-kcl` did, or on a dry run would do.
pub fn kcl_import(r: &crate::kcl_import::KclImportReport) -> String {
    let plan = &r.plan;
    let mut out = String::new();
    let verb = if r.reset.is_some() {
        "moved"
    } else {
        "would move"
    };
    let _ = writeln!(
        out,
        "{verb} from the KCL table: {} shard(s)",
        plan.moves.len()
    );
    for (shard, cp) in &plan.moves {
        let _ = writeln!(out, "  {shard} -> {cp}");
    }
    let list = |out: &mut String, what: &str, items: Vec<String>| {
        if !items.is_empty() {
            let _ = writeln!(out, "{what}: {}", items.join(", "));
        }
    };
    list(
        &mut out,
        "prepared, uncommitted KCL checkpoints (records up to them are processed again)",
        plan.pending
            .iter()
            .map(|(s, p)| format!("{s} at {p}"))
            .collect(),
    );
    list(
        &mut out,
        "leases of shards the stream no longer lists, left out",
        plan.gone.clone(),
    );
    list(
        &mut out,
        "leases of other streams, left out",
        plan.other_streams.clone(),
    );
    list(
        &mut out,
        "shards without a KCL lease, left as they are",
        plan.without_lease.iter().map(ToString::to_string).collect(),
    );
    if let Some(done) = &r.reset {
        out.push_str(&reset(done));
    }
    out
}
