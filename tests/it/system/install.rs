//! README's dependency line for teams before a release resolves: a crate
//! outside this workspace that depends on the repository by `git` and tag,
//! as README writes it, gets `shardkeeper` with its features from a tagged
//! copy of this repository (the URL redirected to the copy with git's
//! `url.<base>.insteadOf`, which cargo follows when it fetches with the git
//! command line).

use std::path::Path;
use std::process::Command;

/// README's `git` dependency line, and its URL and tag.
fn readme_git_line() -> (String, String, String) {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("shardkeeper = { git = "))
        .expect("README gives a git dependency line")
        .to_owned();
    let quoted = |key: &str| {
        let start = line.find(&format!("{key} = \"")).unwrap() + key.len() + 4;
        line[start..start + line[start..].find('"').unwrap()].to_owned()
    };
    let (url, tag) = (quoted("git"), quoted("tag"));
    (line, url, tag)
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_readmes_git_dependency_line_resolves_from_a_tagged_copy() {
    let (line, url, tag) = readme_git_line();
    let scratch = std::env::temp_dir().join(shardkeeper_local::unique_name("install"));
    let copy = scratch.join("repository");
    let app = scratch.join("app");
    std::fs::create_dir_all(app.join("src")).unwrap();
    // The repository as committed, tagged as a release would be.
    run(Command::new("git")
        .args(["clone", "-q", "--no-hardlinks", env!("CARGO_MANIFEST_DIR")])
        .arg(&copy));
    run(Command::new("git").arg("-C").arg(&copy).args(["tag", &tag]));
    std::fs::write(
        app.join("Cargo.toml"),
        format!(
            "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n\n[dependencies]\n{line}\n"
        ),
    )
    .unwrap();
    std::fs::write(app.join("src/main.rs"), "fn main() {}\n").unwrap();
    let metadata = run(Command::new(env!("CARGO"))
        .current_dir(&app)
        .args(["metadata", "--format-version", "1"])
        .env("CARGO_NET_GIT_FETCH_WITH_CLI", "true")
        .env("GIT_CONFIG_COUNT", "1")
        .env(
            "GIT_CONFIG_KEY_0",
            format!("url.{}.insteadOf", file_url(&copy)),
        )
        .env("GIT_CONFIG_VALUE_0", &url));
    let metadata: serde_json::Value = serde_json::from_str(&metadata).unwrap();
    let package = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "shardkeeper")
        .expect("shardkeeper resolved");
    let source = package["source"].as_str().unwrap();
    assert!(
        source.starts_with(&format!("git+{url}?tag={tag}")),
        "{source}"
    );
    let resolved = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == package["id"])
        .unwrap();
    assert!(
        resolved["features"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "worker"),
        "README's features are on: {resolved}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}
