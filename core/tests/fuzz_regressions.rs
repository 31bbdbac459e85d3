//! Every input the fuzzer ever failed on, replayed through the same checks the fuzz targets
//! run (`videoflow_core::fuzz`), one named test per file: `fuzz/regressions/<target>/` (the
//! inputs of fixed crashes) and `fuzz/seeds/<target>/` (the corpus seeds), plus the golden
//! envelope and reject vectors, which seed the `envelope` target. A fixed bug that comes back
//! fails here, on stable, in the normal suite; `scripts/fuzz` runs the fuzzer itself.
//!
//! The worker's targets (`frame`, `config`, `flow_text`) replay in
//! `worker/tests/fuzz_regressions.rs`.

mod support;

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};

/// A target's check of one input (panics when a property does not hold).
type Check = fn(&[u8]);

/// The targets replayed here and the check each input goes through.
const TARGETS: [(&str, Check); 2] = [
    ("envelope", videoflow_core::fuzz::envelope),
    ("payload", videoflow_core::fuzz::payload),
];

/// The files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.file_name().is_none_or(|n| n != "README.md"))
        .collect();
    out.sort();
    out
}

/// One trial: the check run on the file's bytes, its panic turned into a failure.
fn trial(name: String, path: PathBuf, check: Check) -> Trial {
    Trial::test(name, move || {
        let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        std::panic::catch_unwind(|| check(&data)).map_err(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            Failed::from(format!("{}: {why}", path.display()))
        })
    })
}

fn main() {
    let fuzz = support::manifest_dir().join("..").join("fuzz");
    let vectors = support::vectors_dir();
    let mut trials = Vec::new();
    for (target, check) in TARGETS {
        let mut inputs: Vec<(String, PathBuf)> = Vec::new();
        for kind in ["regressions", "seeds"] {
            for path in files(&fuzz.join(kind).join(target)) {
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                inputs.push((format!("{kind}/{}", name.unwrap_or_default()), path));
            }
        }
        if target == "envelope" {
            for dir in ["envelope", "reject"] {
                for path in files(&vectors.join(dir)) {
                    if path.extension().is_some_and(|x| x == "bin") {
                        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                        inputs.push((format!("vectors/{dir}/{}", name.unwrap_or_default()), path));
                    }
                }
            }
        }
        assert!(
            !inputs.is_empty(),
            "no input to replay for the {target} target under {}",
            fuzz.display()
        );
        trials.extend(
            inputs
                .into_iter()
                .map(|(name, path)| trial(format!("{target}::{name}"), path, check)),
        );
    }
    libtest_mimic::run(&Arguments::from_args(), trials).exit();
}
