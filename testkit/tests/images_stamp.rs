//! `scripts/images stamp`: the fingerprint deciding whether the image archives the real-node
//! tests load are stale. It must change with the sources and only with them — committing files
//! that were already there must not read as a change, or every commit after a build would cost
//! a rebuild (the Python image's is a 5-minute package install).
//!
//! Run on a scratch git repository holding the script and a tiny source tree, so the checkout
//! itself is never touched.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit sits in the workspace root")
        .to_path_buf()
}

fn run(dir: &Path, program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn git(dir: &Path, args: &[&str]) {
    let mut all = vec!["-c", "user.name=test", "-c", "user.email=test@localhost"];
    all.extend_from_slice(args);
    run(dir, "git", &all);
}

fn stamp(dir: &Path) -> String {
    let s = run(dir, "scripts/images", &["stamp"]);
    assert_eq!(s.len(), 64, "a sha256: {s:?}");
    s
}

#[test]
fn the_stamp_follows_the_sources_and_not_whether_they_are_committed() {
    let tmp = std::env::temp_dir().join(format!("vf-images-stamp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(tmp.join("scripts")).expect("scripts dir");
    std::fs::create_dir_all(tmp.join("worker/src")).expect("src dir");
    for script in ["images", "env.sh", "testenv-node"] {
        std::fs::copy(
            root().join("scripts").join(script),
            tmp.join("scripts").join(script),
        )
        .unwrap_or_else(|e| panic!("copying scripts/{script}: {e}"));
    }
    std::fs::write(tmp.join("Cargo.toml"), "[workspace]\n").expect("Cargo.toml");
    std::fs::write(tmp.join("worker/src/a.rs"), "fn a() {}\n").expect("a.rs");
    run(&tmp, "git", &["init", "-q"]);
    git(&tmp, &["add", "-A"]);
    git(&tmp, &["commit", "-qm", "init"]);
    let committed = stamp(&tmp);
    assert_eq!(stamp(&tmp), committed, "the stamp is deterministic");

    // A new source file, not yet committed (names sorting before and after the tracked one).
    std::fs::write(tmp.join("worker/src/b.rs"), "fn b() {}\n").expect("b.rs");
    std::fs::write(tmp.join("worker/src/0.rs"), "fn z() {}\n").expect("0.rs");
    let added = stamp(&tmp);
    assert_ne!(added, committed, "a new source changes the stamp");
    git(&tmp, &["add", "-A"]);
    git(&tmp, &["commit", "-qm", "b"]);
    assert_eq!(
        stamp(&tmp),
        added,
        "committing the same files changes nothing"
    );

    // An edit changes it; a file outside the sources does not.
    std::fs::write(tmp.join("worker/src/a.rs"), "fn a() { }\n").expect("a.rs");
    let edited = stamp(&tmp);
    assert_ne!(edited, added, "an edit changes the stamp");
    std::fs::write(tmp.join("NOTES.md"), "not a source\n").expect("notes");
    assert_eq!(
        stamp(&tmp),
        edited,
        "a file outside the sources changes nothing"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
