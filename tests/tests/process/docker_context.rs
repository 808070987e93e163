//! The image build context: `docker/Dockerfile` copies the context that
//! `docker/Dockerfile.dockerignore` leaves, and runs `cargo build --locked`
//! in it. Cargo loads the whole workspace even to build one binary, so
//! every workspace member must be in that context (a member left out fails
//! the build at the workspace load).
//!
//! No Docker daemon is needed: the ignore file is applied here with
//! Docker's rules (`moby/patternmatcher`: patterns in order, `!` re-includes,
//! a pattern matching a parent directory matches everything under it, `*`
//! and `?` within one path segment, `**` across any number of segments,
//! every pattern cleaned of a leading and trailing `/`), the files it leaves
//! are copied to a temporary directory, the Corium patches are applied there
//! from the context (as the build does), and `cargo metadata --locked` must
//! load the workspace there.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// One line of a `.dockerignore`.
#[derive(Debug)]
struct Pattern {
    /// `!pattern`: re-include what earlier patterns excluded.
    include: bool,
    segments: Vec<String>,
}

/// The patterns of a `.dockerignore`, in order.
fn patterns(text: &str) -> Vec<Pattern> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (include, pattern) = match line.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, line),
            };
            assert!(
                !pattern.contains(['[', '\\']) && !pattern.contains("..") && !pattern.contains("./"),
                "{pattern:?}: this check implements `*`, `?` and `**` only"
            );
            let segments: Vec<String> = pattern
                .split('/')
                .filter(|segment| !segment.is_empty())
                .map(str::to_owned)
                .collect();
            assert!(
                segments
                    .iter()
                    .all(|segment| segment == "**" || !segment.contains("**")),
                "{pattern:?}: `**` only as a whole segment"
            );
            Pattern { include, segments }
        })
        .collect()
}

/// `*` and `?` within one segment.
fn segment_matches(pattern: &[char], name: &[char]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|skip| segment_matches(rest, &name[skip..])),
        Some(('?', rest)) => !name.is_empty() && segment_matches(rest, &name[1..]),
        Some((literal, rest)) => name.first() == Some(literal) && segment_matches(rest, &name[1..]),
    }
}

/// Whether `pattern` matches the whole of `path` (its segments).
fn path_matches(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=path.len()).any(|skip| path_matches(rest, &path[skip..]))
        }
        Some((first, rest)) => path.split_first().is_some_and(|(name, path)| {
            segment_matches(
                &first.chars().collect::<Vec<_>>(),
                &name.chars().collect::<Vec<_>>(),
            ) && path_matches(rest, path)
        }),
    }
}

/// Whether the file at `path` (relative, `/`-separated) is left out of the
/// context: the last pattern that matches it or one of its parent
/// directories decides.
fn ignored(patterns: &[Pattern], path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').collect();
    let mut ignored = false;
    for pattern in patterns {
        // Only a re-include can change an ignored path, only an exclude a kept one.
        if pattern.include != ignored {
            continue;
        }
        if (1..=segments.len()).any(|len| path_matches(&pattern.segments, &segments[..len])) {
            ignored = !pattern.include;
        }
    }
    ignored
}

/// Whether `pattern` could match a path below the directory `dir`.
fn reaches_under(pattern: &[String], dir: &str) -> bool {
    let dir: Vec<&str> = dir.split('/').collect();
    let mut pattern = pattern.iter();
    for name in dir {
        match pattern.next() {
            None => return false,
            Some(segment) if segment == "**" => return true,
            Some(segment) => {
                if !segment_matches(
                    &segment.chars().collect::<Vec<_>>(),
                    &name.chars().collect::<Vec<_>>(),
                ) {
                    return false;
                }
            }
        }
    }
    pattern.next().is_some()
}

/// The repository root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the repository")
        .to_path_buf()
}

/// Every file under `dir` (relative to `root`, `/`-separated), leaving
/// out `.git` and `target` directories and, when `patterns` are given,
/// files they ignore.
fn files(root: &Path, dir: &Path, patterns: Option<&[Pattern]>, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        let name = entry.file_name();
        if name == ".git" || name == "target" {
            continue;
        }
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            // An ignored directory no `!` pattern reaches into: skip its
            // contents (e.g. a local fleet's data).
            let reincluded = patterns.is_none_or(|patterns| {
                !ignored(patterns, &relative)
                    || patterns
                        .iter()
                        .any(|pattern| pattern.include && reaches_under(&pattern.segments, &relative))
            });
            if reincluded {
                files(root, &path, patterns, out);
            }
        } else if kind.is_file() && patterns.is_none_or(|patterns| !ignored(patterns, &relative)) {
            out.push(relative);
        }
    }
}

/// The workspace members' directories (relative), from `cargo metadata`.
fn members(root: &Path) -> Vec<String> {
    let output = cargo(
        root,
        &["metadata", "--format-version", "1", "--no-deps", "--offline"],
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output).unwrap();
    let mut members: Vec<String> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|package| {
            let manifest = Path::new(package["manifest_path"].as_str().unwrap());
            manifest
                .parent()
                .unwrap()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    members.sort();
    members
}

/// Runs cargo in `dir` (at most 5 min) and returns its stdout.
///
/// # Panics
/// When it fails or overruns: with its stderr.
fn cargo(dir: &Path, args: &[&str]) -> Vec<u8> {
    let child = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    // Read its output while it runs (a full pipe would stall it).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(output) = rx.recv_timeout(Duration::from_mins(5)) else {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        panic!("cargo {args:?} in {} did not finish within 5 min", dir.display());
    };
    let output = output.unwrap();
    assert!(
        output.status.success(),
        "cargo {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn dockerignore() -> Vec<Pattern> {
    patterns(&std::fs::read_to_string(root().join("docker/Dockerfile.dockerignore")).unwrap())
}

#[test]
fn the_ignore_rules_follow_docker() {
    let rules = patterns("*\n!cli/\n**/target/\n# comment\n!docs/*.md\ndocs/secret.md\n");
    assert!(ignored(&rules, "README.md"));
    assert!(
        ignored(&rules, "charts/corium-fleet/values.yaml"),
        "a parent matches `*`"
    );
    assert!(
        !ignored(&rules, "cli/src/main.rs"),
        "re-included with its directory"
    );
    assert!(ignored(&rules, "cli/target/debug/x"), "`**` matches any depth");
    assert!(!ignored(&rules, "docs/a.md"));
    assert!(ignored(&rules, "docs/a.txt"));
    assert!(
        ignored(&rules, "docs/secret.md"),
        "the last matching pattern decides"
    );
    assert!(reaches_under(&rules[3].segments, "docs") && !reaches_under(&rules[3].segments, "charts"));
    assert!(reaches_under(&rules[2].segments, "anything/at/all"), "`**`");
    // The ignore file this check was written for: two members missing.
    let old =
        patterns("*\n!Cargo.toml\n!Cargo.lock\n!proto/\n!common/\n!transactor/\n!ingress/\n!cli/\n!tests/\n");
    assert!(ignored(&old, "client/Cargo.toml") && ignored(&old, "bench/Cargo.toml"));
}

#[test]
fn every_workspace_member_is_in_the_image_build_context() {
    let root = root();
    let rules = dockerignore();
    for required in ["Cargo.toml", "Cargo.lock"] {
        assert!(
            !ignored(&rules, required),
            "{required} is left out of the context"
        );
    }
    let members = members(&root);
    assert!(members.len() >= 11, "{members:?}");
    for member in &members {
        let mut all = Vec::new();
        files(&root, &root.join(member), None, &mut all);
        let left_out: Vec<&String> = all.iter().filter(|file| ignored(&rules, file)).collect();
        assert!(
            all.iter().any(|file| file == &format!("{member}/Cargo.toml")),
            "{member}: no Cargo.toml among {all:?}"
        );
        assert!(
            left_out.is_empty(),
            "docker/Dockerfile.dockerignore leaves out files of the workspace member {member}: {left_out:?}"
        );
    }
}

#[test]
fn cargo_loads_the_workspace_locked_from_exactly_the_image_build_context() {
    let root = root();
    let rules = dockerignore();
    let mut context = Vec::new();
    files(&root, &root, Some(&rules), &mut context);
    let copy = tempfile::tempdir().unwrap();
    for file in &context {
        let to = copy.path().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root.join(file), &to).unwrap();
    }
    assert!(
        !context
            .iter()
            .any(|file| file.starts_with("charts/") || file.starts_with("docs/")),
        "only what the build needs: {context:?}"
    );
    // The build applies the Corium patches first (`scripts/corium-patch.sh`,
    // from the context), as the Dockerfile does.
    let applied = Command::new("bash")
        .args(["scripts/corium-patch.sh", "apply"])
        .current_dir(copy.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        applied.status.success(),
        "the Corium patches apply in the build context: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    // The workspace loads and resolves against the lock file as it is
    // (`--locked`: the build's flag); offline, from the local registry cache,
    // which holds the packages of this platform.
    let version = String::from_utf8(cargo(&root, &["-vV"])).unwrap();
    let host = version
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("`cargo -vV` names the host");
    let output = cargo(
        copy.path(),
        &[
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--offline",
            "--filter-platform",
            host,
        ],
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output).unwrap();
    let names: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect();
    assert_eq!(names.len(), members(&root).len(), "{names:?}");
}
