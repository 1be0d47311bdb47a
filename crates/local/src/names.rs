//! Unique resource names, so tests never collide on a shared server or account.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A name no other call in any process is likely to return: `prefix`, the
/// time in microseconds, the process id and a counter. Valid as a DynamoDB
/// table, Kinesis stream and consumer group name.
pub fn unique_name(prefix: &str) -> String {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{micros:x}-{:x}-{n}", std::process::id())
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_unique() {
        let a = super::unique_name("t");
        let b = super::unique_name("t");
        assert_ne!(a, b);
        assert!(a.starts_with("t-"));
    }
}
