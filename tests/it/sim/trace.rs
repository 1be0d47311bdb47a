//! A run's trace: a digest of every request sent (operation and body) and
//! every answer's status, in order, and of the history. Two runs of one
//! seed must end with the same digest.

/// An FNV-1a digest of what was fed, in order, and how many entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub digest: u64,
    pub entries: u64,
    /// With `SHARDKEEPER_SIM_TRACE` set, every entry's text (to find where
    /// two runs part).
    pub lines: Option<Vec<String>>,
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            digest: 0xcbf2_9ce4_8422_2325,
            entries: 0,
            lines: std::env::var("SHARDKEEPER_SIM_TRACE")
                .is_ok()
                .then(Vec::new),
        }
    }
}

impl Trace {
    fn feed(&mut self, bytes: &[u8]) {
        if let Some(lines) = &mut self.lines {
            lines.push(String::from_utf8_lossy(bytes).into_owned());
        }
        for b in bytes {
            self.digest ^= u64::from(*b);
            self.digest = self.digest.wrapping_mul(0x0100_0000_01b3);
        }
        self.entries += 1;
    }

    /// A request sent. Its body is fed with every object's keys in order:
    /// the SDK writes a map (an item's attributes, expression values) in
    /// its hash map's order, which changes from run to run.
    pub fn request(&mut self, operation: &str, body: &str) {
        self.feed(operation.as_bytes());
        match serde_json::from_str::<serde_json::Value>(body) {
            Ok(v) => {
                let mut text = String::with_capacity(body.len());
                canonical(&v, &mut text);
                self.feed(text.as_bytes());
            }
            Err(_) => self.feed(body.as_bytes()),
        }
    }

    /// An answer's status (answer bodies carry server-made ids).
    pub fn answer(&mut self, status: u16, _body: &str) {
        self.feed(&status.to_be_bytes());
    }

    /// Anything else the run wants in the digest.
    pub fn note(&mut self, text: &str) {
        self.feed(text.as_bytes());
    }
}

/// `v` as JSON text with every object's keys sorted.
fn canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for k in keys {
                // A digest of the request's own content (a forced move's
                // token), which the trace holds already.
                if k == "ClientRequestToken" {
                    continue;
                }
                // This process's id and its program's name, which the
                // consumer registry records: not the seed's.
                if k == ":pid" || k == ":app" {
                    out.push_str(k);
                    out.push_str(":<process>,");
                    continue;
                }
                out.push_str(k);
                out.push(':');
                canonical(&map[k], out);
                out.push(',');
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for item in items {
                canonical(item, out);
                out.push(',');
            }
            out.push(']');
        }
        other => {
            let text = other.to_string();
            out.push_str(if system_clock_reading(&text) {
                "<system clock>"
            } else {
                &text
            });
        }
    }
}

/// Whether a value is a reading of the system's wall clock, not of the
/// simulation's: the CLI's rewind takes its id from this machine's clock on
/// purpose (`LATEST` is compared with the stream's arrival times there), so
/// two runs of a seed differ in it and in nothing it decides. The
/// simulation's own times lie within days of `clock::EPOCH`.
fn system_clock_reading(text: &str) -> bool {
    let digits = text.trim_matches('"');
    digits.len() == 13
        && digits.bytes().all(|b| b.is_ascii_digit())
        && digits
            .parse::<i64>()
            .is_ok_and(|ms| ms > super::clock::EPOCH + 30 * 86_400_000)
}
