//! A positions file (`shardkeeper export`), as `import` reads it.
//!
//! Checked: a file reads or fails with an error, never a panic; a file
//! that reads writes back (as `export` writes) to a file that reads to the
//! same positions.

use shardkeeper_cli::positions::parse;

/// One input.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok((positions, wanted)) = parse(text) else {
        return;
    };
    let written = serde_json::to_string_pretty(&positions).expect("positions serialize");
    let (_, again) = parse(&written).expect("a file written from positions reads");
    assert_eq!(wanted, again, "the positions changed on the way back");
}
