//! The fuzz targets (`fuzz/src/targets`) on the stable toolchain, bounded:
//! each on its committed seeds, then on mutations of them drawn from a
//! seeded generator (bit flips, bytes set, inserted, removed or repeated,
//! tokens of the target's dictionary, splices of two seeds). A target that
//! panics fails the test with its input. `SHARDKEEPER_FUZZ_INPUTS` sets
//! the mutations per target (default 5,000), `SHARDKEEPER_FUZZ_SEED` the
//! generator's seed. libFuzzer's coverage-guided runs (`fuzz/run.sh`, on
//! nightly) go much further; this keeps every target building and holding
//! on every CI run.

#[path = "../../fuzz/src/targets/mod.rs"]
mod targets;

use std::path::{Path, PathBuf};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The committed seeds of `target`.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = fuzz_dir().join("corpus").join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("seed-"))
        })
        .collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// The tokens of `target`'s libFuzzer dictionary (`"token"` or
/// `name="token"` lines), and a few of JSON's own.
fn tokens(target: &str) -> Vec<Vec<u8>> {
    let mut tokens: Vec<Vec<u8>> = [
        "{", "}", "[", "]", ",", ":", "\"", "null", "true", "-1", "1e308", "\"S\"", "\"N\"",
        "\"B\"", "\"M\"", "\"L\"", "\"SS\"", "\"NS\"", "\"BOOL\"", "\"NULL\"",
    ]
    .iter()
    .map(|t| t.as_bytes().to_vec())
    .collect();
    let dict = fuzz_dir().join("dict").join(format!("{target}.dict"));
    if let Ok(text) = std::fs::read_to_string(dict) {
        for line in text.lines().map(str::trim) {
            let quoted = match line.split_once('=') {
                _ if line.starts_with('#') => continue,
                _ if line.starts_with('"') => line,
                Some((_, quoted)) => quoted.trim(),
                None => continue,
            };
            let inner = quoted.strip_prefix('"').and_then(|q| q.strip_suffix('"'));
            let token = inner.unwrap_or_default().replace("\\\"", "\"");
            if !token.is_empty() {
                tokens.push(token.into_bytes());
            }
        }
    }
    tokens
}

/// One to four mutations of a seed.
fn mutate(rng: &mut fastrand::Rng, seeds: &[Vec<u8>], tokens: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.usize(..seeds.len())].clone();
    for _ in 0..rng.usize(1..=4) {
        let at = rng.usize(..=data.len());
        match rng.u8(..7) {
            0 if !data.is_empty() => {
                let i = rng.usize(..data.len());
                data[i] ^= 1 << rng.u8(..8);
            }
            1 if !data.is_empty() => {
                let i = rng.usize(..data.len());
                data[i] = rng.u8(..);
            }
            2 => {
                let bytes: Vec<u8> = (0..rng.usize(1..=8)).map(|_| rng.u8(..)).collect();
                data.splice(at..at, bytes);
            }
            3 if !data.is_empty() => {
                let end = (at + rng.usize(1..=16)).min(data.len());
                data.drain(at.min(end)..end);
            }
            4 if !data.is_empty() => {
                let start = rng.usize(..data.len());
                let end = (start + rng.usize(1..=64)).min(data.len());
                let part = data[start..end].to_vec();
                for _ in 0..rng.usize(1..=3) {
                    data.splice(at..at, part.iter().copied());
                }
            }
            5 => {
                let token = &tokens[rng.usize(..tokens.len())];
                data.splice(at..at, token.iter().copied());
            }
            _ => {
                let other = &seeds[rng.usize(..seeds.len())];
                let from = rng.usize(..=other.len());
                data.truncate(at);
                data.extend_from_slice(&other[from..]);
            }
        }
    }
    data
}

/// Runs `run` on `data`; a panic fails the test, naming the input.
fn try_input(target: &str, run: targets::Target, data: &[u8], what: &str) {
    if let Err(panic) = std::panic::catch_unwind(|| run(data)) {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!(
            "{target} failed on {what} ({} bytes): {message}\ninput: {:?}",
            data.len(),
            String::from_utf8_lossy(data)
        );
    }
}

#[test]
fn every_fuzz_target_holds_on_its_seeds_and_bounded_mutations() {
    let inputs = env_u64("SHARDKEEPER_FUZZ_INPUTS", 5000);
    let seed = env_u64("SHARDKEEPER_FUZZ_SEED", 1);
    for &(target, run) in targets::ALL {
        let seeds = seeds(target);
        assert!(!seeds.is_empty(), "{target} has no seeds");
        let tokens = tokens(target);
        for (i, s) in seeds.iter().enumerate() {
            try_input(target, run, s, &format!("seed {i}"));
        }
        let mut rng = fastrand::Rng::with_seed(seed ^ target.len() as u64);
        for n in 0..inputs {
            let data = mutate(&mut rng, &seeds, &tokens);
            try_input(target, run, &data, &format!("mutation {n} (seed {seed})"));
        }
    }
}
