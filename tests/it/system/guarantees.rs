//! docs/GUARANTEES.md names, for every promise, the tests that would fail
//! were it false: each of those tests exists.

use std::path::{Path, PathBuf};

/// Every Rust file of the workspace's sources and tests.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The test paths a table row names: backquoted, with `::` in them.
fn named_tests(markdown: &str) -> Vec<String> {
    markdown
        .lines()
        .filter(|l| l.starts_with('|'))
        .filter_map(|l| l.rsplit('|').nth(1))
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .filter(|name| name.contains("::") && !name.contains(' '))
        // A type's item (`KinesisProcessor::from_env`) is prose, not a test.
        .filter(|name| name.starts_with(|c: char| c.is_ascii_lowercase()))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_test_the_guarantees_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("docs/GUARANTEES.md")).unwrap();
    let mut files = Vec::new();
    for dir in ["src", "crates", "tests", "examples", "functions"] {
        rust_files(&root.join(dir), &mut files);
    }
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let path = f
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (path, std::fs::read_to_string(f).unwrap())
        })
        .collect();
    let names = named_tests(&text);
    assert!(names.len() > 100, "the table names {} tests", names.len());
    let mut missing = Vec::new();
    for name in &names {
        let mut parts: Vec<&str> = name.split("::").collect();
        let last = parts.pop().unwrap();
        // The module's place in the tree: `a::b::tests::f` is in `a/b.rs`
        // or `a/b/tests.rs`, in some crate or in `tests/it`.
        let place = parts
            .iter()
            .filter(|p| **p != "tests")
            .copied()
            .collect::<Vec<_>>()
            .join("/");
        let found = sources.iter().any(|(path, text)| {
            let in_place =
                path.contains(&format!("{place}.rs")) || path.contains(&format!("{place}/"));
            in_place && (last == "*" || text.contains(&format!("fn {last}(")))
        });
        if !found {
            missing.push(name.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "docs/GUARANTEES.md names tests that do not exist: {missing:#?}"
    );
}
