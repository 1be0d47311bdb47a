//! README.md's code examples compile: each Rust block stands verbatim in
//! `examples/readme.rs`, which `cargo test` builds.

fn normalized(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```rust") => current = Some(Vec::new()),
            (Some(block), "```") => {
                blocks.push(block.join("\n"));
                current = None;
            }
            (Some(block), _) => block.push(line),
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn every_rust_block_of_the_readme_is_in_the_compiled_example() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let example =
        normalized(&std::fs::read_to_string(format!("{root}/examples/readme.rs")).unwrap());
    let blocks = rust_blocks(&readme);
    assert!(blocks.len() >= 3, "README has its examples: {blocks:?}");
    for block in blocks {
        assert!(
            example.contains(&normalized(&block)),
            "this README block is not in examples/readme.rs:\n{block}"
        );
    }
}
