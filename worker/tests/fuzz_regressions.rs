//! Every input the fuzzer ever failed on, replayed through the same checks the fuzz targets
//! run (`videoflow_worker::fuzz`), one named test per file: `fuzz/regressions/<target>/`
//! (the inputs of fixed crashes; a structure-aware target's in the raw form it renders) and
//! `fuzz/seeds/<target>/` (the corpus seeds), plus `config/samples/*.yaml`, which seed the
//! `flow_text` target. A fixed bug that comes back fails here, on stable, in the normal
//! suite; `scripts/fuzz` runs the fuzzer itself.
//!
//! `VF_FUZZ_WRITE_SEEDS=1` first rewrites `fuzz/seeds/{payload,frame,config}/` from the golden
//! vectors and the samples (what `scripts/fuzz` starts each corpus from), then replays.
//! The envelope decoder's targets replay in `core/tests/fuzz_regressions.rs`.

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};
use videoflow_core::component::proto::{
    ComponentMessage, Error as WireError, Hello, Output, Payload as WirePayload, Process,
    Result as WireResult, WorkerMessage, component_message, worker_message,
};
use videoflow_core::env::EnvValue;
use videoflow_core::envelope::{self, MsgType};
use videoflow_core::fuzz::PAYLOAD_TYPES;
use videoflow_worker::component::frame::write_frame;
use videoflow_worker::fuzz::to_environ;

/// A target's check of one input (panics when a property does not hold).
type Check = fn(&[u8]);

/// The targets replayed here and the check each input goes through.
const TARGETS: [(&str, Check); 3] = [
    ("frame", videoflow_worker::fuzz::frames),
    ("config", videoflow_worker::fuzz::config),
    ("flow_text", flow_text),
];

/// `flow_text`'s input is a Flow file: text, as the fuzz target reads it.
fn flow_text(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        videoflow_worker::fuzz::flow(text);
    }
}

fn repo() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR")).join("..")
}

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

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
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
    let fuzz = repo().join("fuzz");
    if std::env::var_os("VF_FUZZ_WRITE_SEEDS").is_some() {
        write_seeds(&fuzz.join("seeds"));
    }
    let mut trials = Vec::new();
    for (target, check) in TARGETS {
        let mut inputs: Vec<(String, PathBuf)> = Vec::new();
        for kind in ["regressions", "seeds"] {
            for path in files(&fuzz.join(kind).join(target)) {
                inputs.push((format!("{kind}/{}", file_name(&path)), path));
            }
        }
        if target == "flow_text" {
            for path in files(&repo().join("config/samples")) {
                inputs.push((format!("samples/{}", file_name(&path)), path));
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

// -- seeds ----------------------------------------------------------------------------------

/// The golden envelope vectors: `(file stem, bytes)`.
fn vectors() -> Vec<(String, Vec<u8>)> {
    let dir = repo()
        .join("..")
        .join("shared")
        .join("vectors")
        .join("envelope");
    let vectors: Vec<(String, Vec<u8>)> = files(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned());
            (stem.unwrap_or_default(), bytes)
        })
        .collect();
    assert!(!vectors.is_empty(), "golden vectors at {}", dir.display());
    vectors
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Rewrites the seeds the raw targets start from: each DATA vector's payload (`payload`),
/// a component's frames answering with those payloads and a worker's requests (`frame`),
/// and every sample node's rendered environment (`config`).
fn write_seeds(seeds: &Path) {
    let mut outputs = Vec::new();
    for (stem, bytes) in vectors() {
        let Ok(p) = envelope::peek(&bytes) else {
            continue;
        };
        if p.header.msg_type != MsgType::Data {
            continue;
        }
        if let Some(i) = PAYLOAD_TYPES.iter().position(|t| *t == p.payload_type) {
            let mut seed = vec![u8::try_from(i).unwrap_or(0)];
            seed.extend_from_slice(&p.payload);
            write(&seeds.join("payload"), &format!("{stem}.bin"), &seed);
        }
        outputs.push(WirePayload {
            payload_type: p.payload_type.clone(),
            data: p.payload.to_vec(),
        });
    }

    // A component: Hello, then one Result per vector payload, one failed, one end of input.
    let mut stream = vec![0u8];
    let hello = ComponentMessage {
        body: Some(component_message::Body::Hello(Hello {
            protocol_versions: vec![1],
            pid: 42,
            sdk: "videoflow-sdk-python/0.1.0".into(),
            max_in_flight: 8,
            ..Hello::default()
        })),
    };
    frame(&mut stream, &hello);
    write(&seeds.join("frame"), "hello.bin", &stream);
    for (i, payload) in outputs.iter().enumerate() {
        let result = ComponentMessage {
            body: Some(component_message::Body::Result(WireResult {
                request_id: i as u64 + 1,
                output: Some(Output {
                    payload: Some(payload.clone()),
                    partition_key: Some(
                        videoflow_core::component::value_to_wire(
                            &videoflow_core::value::Value::Int(i as i64),
                        )
                        .unwrap_or_default(),
                    ),
                    event_ts: Some(1.5),
                }),
                ..WireResult::default()
            })),
        };
        frame(&mut stream, &result);
    }
    let failed = ComponentMessage {
        body: Some(component_message::Body::Result(WireResult {
            request_id: 99,
            error: Some(WireError {
                code: "VF_POISON".into(),
                message: "bad input".into(),
                remedy: "fix it".into(),
                disposition: "poison".into(),
            }),
            end_of_input: true,
            ..WireResult::default()
        })),
    };
    frame(&mut stream, &failed);
    write(&seeds.join("frame"), "component_session.bin", &stream);

    // The worker's side of the socket: a process request with every payload as an input.
    let mut requests = vec![1u8];
    let process = WorkerMessage {
        request_id: 1,
        body: Some(worker_message::Body::Process(Process {
            inputs: outputs
                .iter()
                .map(|p| videoflow_core::component::proto::Input {
                    parent: "cam".into(),
                    kind: Some(videoflow_core::component::proto::input::Kind::Present(
                        p.clone(),
                    )),
                    info: None,
                })
                .collect(),
            input_key: "0123456789abcdef0123456789abcdef".into(),
        })),
    };
    frame(&mut requests, &process);
    write(&seeds.join("frame"), "worker_process.bin", &requests);

    // Every node of every sample, as its worker's environment.
    for path in files(&repo().join("config/samples")) {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let Some(compiled) = videoflow_core::fuzz::flow(&text) else {
            continue;
        };
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        for (node, env) in compiled.envs {
            let pairs: Vec<(String, String)> = env
                .into_iter()
                .map(|(k, v)| match v {
                    EnvValue::Literal(s) => (k, s),
                    EnvValue::Secret { .. } => (k, "nats://127.0.0.1:4222".into()),
                })
                .collect();
            write(
                &seeds.join("config"),
                &format!("{}-{node}.env", stem.clone().unwrap_or_default()),
                &to_environ(&pairs),
            );
        }
    }
}

fn frame<M: prost::Message>(stream: &mut Vec<u8>, msg: &M) {
    write_frame(stream, msg).unwrap_or_else(|e| panic!("a seed frame: {e}"));
}
