//! The house rules a newcomer relies on, checked over the whole checkout: module folders read
//! top-down (no import circle among siblings), comments say why rather than which issue,
//! production crates depend on no test crate, the worker reads its environment in one
//! module only, and tests find the checkout where Cargo runs them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (this crate's parent).
fn root() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit sits in the workspace root")
        .to_path_buf()
}

const SOURCE_DIRS: [&str; 5] = [
    "core/src",
    "operator/src",
    "worker/src",
    "services/src",
    "testkit/src",
];
const PRODUCTION_CRATES: [&str; 4] = ["core", "operator", "worker", "services"];

/// Every `*.rs` file under `dir`, recursively, in a stable order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `(issue|stop) #?[0-9]+`, the pattern the house rule is stated in.
fn names_an_issue(line: &str) -> bool {
    ["issue ", "stop "].iter().any(|word| {
        line.match_indices(word).any(|(at, w)| {
            let rest = &line[at + w.len()..];
            let rest = rest.strip_prefix('#').unwrap_or(rest);
            rest.starts_with(|c: char| c.is_ascii_digit())
        })
    })
}

#[test]
fn no_module_folder_has_an_import_circle() {
    let root = root();
    let mut folders = Vec::new();
    for dir in SOURCE_DIRS {
        for file in rust_files(&root.join(dir)) {
            if file.file_name().is_some_and(|n| n == "mod.rs") {
                let folder = file.parent().expect("mod.rs has a folder");
                folders.push(
                    folder
                        .strip_prefix(&root)
                        .expect("under root")
                        .to_path_buf(),
                );
            }
        }
    }
    assert!(folders.len() >= 10, "module folders found: {folders:?}");
    let out = Command::new("python3")
        .arg(root.join("scripts/modgraph"))
        .args(&folders)
        .current_dir(&root)
        .output()
        .expect("python3 runs scripts/modgraph");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "import circles (scripts/modgraph -v <folder> shows each edge's file:line):\n{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        report.matches("no cycles").count(),
        folders.len(),
        "{report}"
    );
}

#[test]
fn the_circle_finder_sees_a_circle() {
    let dir = std::env::temp_dir().join(format!("vf-house-{}", std::process::id()));
    let folder = dir.join("src/loop");
    std::fs::create_dir_all(&folder).expect("temp folder");
    std::fs::write(folder.join("mod.rs"), "mod a;\nmod b;\n").expect("mod.rs");
    std::fs::write(folder.join("a.rs"), "use super::b::B;\npub struct A;\n").expect("a.rs");
    std::fs::write(folder.join("b.rs"), "use super::a::A;\npub struct B;\n").expect("b.rs");
    let out = Command::new("python3")
        .arg(root().join("scripts/modgraph"))
        .arg("src/loop")
        .current_dir(&dir)
        .output()
        .expect("python3 runs scripts/modgraph");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("CYCLE among {a, b}"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn source_comments_name_no_issue_or_stop_numbers() {
    assert!(names_an_issue("// (issue #12) ") && names_an_issue("stop 16 said"));
    assert!(!names_an_issue("STREAM-15, design §5") && !names_an_issue("non-stop #x"));
    let root = root();
    let mut hits = Vec::new();
    for dir in SOURCE_DIRS {
        for file in rust_files(&root.join(dir)) {
            let text = std::fs::read_to_string(&file).expect("readable source");
            for (n, line) in text.lines().enumerate() {
                if names_an_issue(line) {
                    hits.push(format!("{}:{}: {line}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "history belongs in git; say why the code is as it is:\n{}",
        hits.join("\n")
    );
}

#[test]
fn production_crates_depend_on_no_test_crate() {
    let root = root();
    for krate in PRODUCTION_CRATES {
        let manifest =
            std::fs::read_to_string(root.join(krate).join("Cargo.toml")).expect("crate manifest");
        let mut section = String::new();
        for line in manifest.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line.to_owned();
            } else if section == "[dependencies]" {
                assert!(
                    !line.starts_with("videoflow-testkit"),
                    "{krate}/Cargo.toml: videoflow-testkit belongs under [dev-dependencies]"
                );
            }
        }
    }
}

#[test]
fn only_the_config_module_reads_the_worker_environment() {
    let root = root();
    let config = root.join("worker/src/config");
    let mut hits = Vec::new();
    for file in rust_files(&root.join("worker/src")) {
        if file.starts_with(&config) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            if ["env::var(", "env::vars(", "env::var_os(", "env::vars_os("]
                .iter()
                .any(|read| line.contains(read))
            {
                hits.push(format!("{}:{}: {line}", file.display(), n + 1));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "read it through worker/src/config (Environment, WorkerConfig and its sub-configs):\n{}",
        hits.join("\n")
    );
}

/// Test, bench and support code of every crate: where the checkout's files are looked up.
const TEST_DIRS: [&str; 7] = [
    "core/tests",
    "operator/tests",
    "worker/tests",
    "worker/benches",
    "services/tests",
    "testkit/src",
    "testkit/tests",
];

#[test]
fn tests_find_the_checkout_at_run_time() {
    let root = root();
    let mut hits = Vec::new();
    for dir in TEST_DIRS {
        let dir = root.join(dir);
        if !dir.is_dir() {
            continue;
        }
        for file in rust_files(&dir) {
            let text = std::fs::read_to_string(&file).expect("readable source");
            let lines: Vec<&str> = text.lines().collect();
            for (n, line) in lines.iter().enumerate() {
                // `manifest_dir(env!(…))`, or the same lookup written out: the compiled-in
                // path only as the fallback of Cargo's run-time variable, read the line before.
                let run_time_first =
                    n > 0 && lines[n - 1].contains("var_os(\"CARGO_MANIFEST_DIR\")");
                if line.contains("env!(\"CARGO_MANIFEST_DIR\")")
                    && !line.trim_start().starts_with("//")
                    && !line.contains("manifest_dir(")
                    && !run_time_first
                {
                    hits.push(format!("{}:{}: {line}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "a compiled-in path names the clone that built the binary, and the shared target \
         directory reuses that binary in another clone; use \
         videoflow_testkit::manifest_dir(env!(\"CARGO_MANIFEST_DIR\")):\n{}",
        hits.join("\n")
    );
}
