//! The differential tests' plumbing: the reference helper process, a seeded generator and the
//! typed JSON descriptions both sides speak (see `tests/conformance/refhelper.py`).
//!
//! Why a helper process rather than golden files: the reference (videoflow 1.0.4) is the
//! oracle, so thousands of freshly generated cases per run can be asked of it directly. A
//! missing reference fails the tests with the remedy — a skipped conformance suite would be a
//! green build that proves nothing.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::{Value as Json, json};
use videoflow_core::envelope::{self, Envelope, MsgType, Payload, WireError};
use videoflow_core::errors::Disposition;
use videoflow_core::value::{Tensor, Value};

/// The reference version these tests pin (`scripts/env.sh` `VF_REF_VERSION`).
pub const REF_VERSION: &str = "1.0.4";

const REMEDY: &str = "Install the Python reference with `./scripts/install-deps` (it creates the \
    private virtualenv $VF_REF_VENV with videoflow==1.0.4), then run the tests with \
    `source scripts/env.sh` so VF_REF_PYTHON points at it.";

// -- the helper process ----------------------------------------------------------------------

struct Helper {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python interpreter of the reference virtualenv: `$VF_REF_PYTHON`, else
/// `$VF_REF_VENV/bin/python`, else `$VF_CACHE/refvenv/bin/python`, else
/// `~/.cache/videoflow/refvenv/bin/python` (the defaults of `scripts/env.sh`).
pub fn reference_python() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(p) = env("VF_REF_PYTHON") {
        return PathBuf::from(p);
    }
    if let Some(v) = env("VF_REF_VENV") {
        return PathBuf::from(v).join("bin/python");
    }
    let cache = env("VF_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env("HOME").unwrap_or_default()).join(".cache/videoflow"));
    cache.join("refvenv/bin/python")
}

fn helper_script() -> PathBuf {
    manifest_dir().join("../tests/conformance/refhelper.py")
}

fn start() -> Helper {
    let python = reference_python();
    assert!(
        python.is_file(),
        "the Python reference videoflow=={REF_VERSION} is not installed: {} does not exist. {REMEDY}",
        python.display()
    );
    let mut child = Command::new(&python)
        .arg(helper_script())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}. {REMEDY}", python.display()));
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        panic!("the helper's pipes were not created");
    };
    let mut helper = Helper {
        child,
        stdin,
        stdout: BufReader::new(stdout),
    };
    let hello = helper.call("hello", Json::Null);
    assert_eq!(
        hello["videoflow"],
        REF_VERSION,
        "{} runs videoflow {} but these tests pin {REF_VERSION}. {REMEDY}",
        python.display(),
        hello["videoflow"]
    );
    helper
}

impl Helper {
    fn call(&mut self, op: &str, args: Json) -> Json {
        let mut line = serde_json::to_string(&json!({"op": op, "args": args}))
            .unwrap_or_else(|e| panic!("request for {op} is not JSON: {e}"));
        line.push('\n');
        let sent = self
            .stdin
            .write_all(line.as_bytes())
            .and_then(|()| self.stdin.flush());
        let mut reply = String::new();
        let read = sent.and_then(|()| self.stdout.read_line(&mut reply));
        match read {
            Ok(n) if n > 0 => {}
            other => panic!(
                "the reference helper died during {op} ({other:?}); its stderr is above. {REMEDY}"
            ),
        }
        let mut reply: Json = serde_json::from_str(&reply)
            .unwrap_or_else(|e| panic!("helper reply to {op} is not JSON: {e}: {reply}"));
        if let Some(tb) = reply.get("err") {
            panic!(
                "the reference helper failed on {op}:\n{}",
                tb.as_str().unwrap_or_default()
            );
        }
        reply["ok"].take()
    }
}

static HELPER: OnceLock<Mutex<Helper>> = OnceLock::new();

/// Sends one batch to the reference helper (started once per test binary) and returns its
/// answer. Panics — never skips — when the reference is missing.
pub fn reference(op: &str, args: Json) -> Json {
    let helper = HELPER.get_or_init(|| Mutex::new(start()));
    let mut guard = helper
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    guard.call(op, args)
}

/// A batched call whose answer is one value per case.
pub fn reference_batch(op: &str, cases: &[Json]) -> Vec<Json> {
    let out = reference(op, Json::Array(cases.to_vec()));
    let Json::Array(out) = out else {
        panic!("{op}: the helper did not answer a list");
    };
    assert_eq!(out.len(), cases.len(), "{op}: one answer per case");
    out
}

// -- seeds and the generator -----------------------------------------------------------------

/// The run's seed: `VF_DIFF_SEED` (decimal or `0x` hex), else a fixed default so CI is
/// reproducible run to run.
pub fn seed() -> u64 {
    const DEFAULT: u64 = 0x5eed_0013_d1ff_0001;
    match std::env::var("VF_DIFF_SEED") {
        Ok(s) if !s.trim().is_empty() => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("VF_DIFF_SEED={s:?} is not a u64: {e}"))
        }
        _ => DEFAULT,
    }
}

/// SplitMix64: tiny, fast, and the same sequence on every platform for a given seed.
pub struct Rng {
    state: u64,
    /// The run seed (printed on failure).
    pub seed: u64,
    /// The test's name (mixed into its stream so tests are independent of each other).
    pub test: &'static str,
}

impl Rng {
    /// The stream of test `test` under the run seed.
    pub fn for_test(test: &'static str) -> Self {
        let seed = seed();
        // FNV-1a of the name, so adding a test never shifts another test's cases.
        let name = test.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        Rng {
            state: seed ^ name,
            seed,
            test,
        }
    }

    pub fn u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.u64() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi as i128 - lo as i128 + 1) as u128;
        (lo as i128 + (u128::from(self.u64()) % span) as i128) as i64
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// A double with the awkward ones likely: any bit pattern, specials, decimal-looking
    /// values, the repr layout boundaries and exact binary fractions.
    pub fn double(&mut self) -> f64 {
        match self.below(10) {
            0..=2 => f64::from_bits(self.u64()),
            3 => *self.pick(&[
                f64::NAN,
                -f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                0.0,
                -0.0,
                f64::MIN_POSITIVE,
                f64::MAX,
                f64::MIN,
                5e-324,
                1e16,
                1e-4,
                1e-5,
                9_999_999_999_999_998.0,
                0.1 + 0.2,
                1_059_438_285_926_254.2,
            ]),
            4 => {
                // k / 10^n: what people type.
                let k = self.range(-1_000_000, 1_000_000) as f64;
                k / 10f64.powi(self.range(0, 8) as i32)
            }
            5 => {
                // Around the scientific-notation thresholds of repr.
                let e = self.range(-7, 18) as i32;
                let m = 1.0 + self.below(1000) as f64 / 1000.0;
                m * 10f64.powi(e) * if self.chance(30) { -1.0 } else { 1.0 }
            }
            6 => self.range(i64::MIN / 2, i64::MAX / 2) as f64,
            _ => {
                let scale = 10f64.powi(self.range(-12, 12) as i32);
                (self.u64() as f64 / u64::MAX as f64 - 0.5) * scale
            }
        }
    }

    /// Text from a pool of awkward but assigned characters: ASCII with controls and quotes,
    /// Latin-1, combining and format characters, separators, private use, astral.
    pub fn text(&mut self, max_len: u64) -> String {
        const POOL: &[char] = &[
            'a',
            'b',
            'z',
            'A',
            'Z',
            '0',
            '9',
            ' ',
            ':',
            '.',
            '-',
            '_',
            '/',
            '|',
            '=',
            '\'',
            '"',
            '\\',
            '\t',
            '\n',
            '\r',
            '\0',
            '\x01',
            '\x1b',
            '\x7f',
            '\u{80}',
            '\u{9f}',
            '\u{a0}',
            '\u{ad}',
            'é',
            'ß',
            'Ω',
            'ж',
            '中',
            '日',
            '\u{301}',
            '\u{200b}',
            '\u{200d}',
            '\u{2028}',
            '\u{2029}',
            '\u{202e}',
            '\u{3000}',
            '\u{feff}',
            '\u{e000}',
            '\u{f8ff}',
            '\u{fffd}',
            '🎥',
            '😀',
            '\u{1d173}',
            '\u{e0001}',
            '\u{f0000}',
            '\u{10fffd}',
        ];
        let len = self.below(max_len + 1);
        (0..len).map(|_| *self.pick(POOL)).collect()
    }

    /// A short identifier-ish name (flows, runs, nodes, parents).
    pub fn name(&mut self) -> String {
        if self.chance(70) {
            let len = self.range(1, 8);
            (0..len)
                .map(|_| *self.pick(&['a', 'b', 'c', 'x', '-', '_', '1', '2', 'é', ':', '.']))
                .collect()
        } else {
            self.text(6)
        }
    }
}

/// The failure report every differential test ends with: the seed that reproduces it.
pub fn report(rng: &Rng, cases: usize, failures: &[String]) {
    if failures.is_empty() {
        eprintln!(
            "{}: {cases} cases agree with videoflow {REF_VERSION} (seed {:#x})",
            rng.test, rng.seed
        );
        return;
    }
    let shown: Vec<&String> = failures.iter().take(8).collect();
    panic!(
        "{}: {} of {cases} cases differ from videoflow {REF_VERSION}.\n\
         Reproduce: VF_DIFF_SEED={:#x} cargo test -p {} --test {} {}\n\n{}",
        rng.test,
        failures.len(),
        rng.seed,
        // The test binary including this module (core's `differential`, the worker's too).
        env!("CARGO_PKG_NAME"),
        env!("CARGO_CRATE_NAME"),
        rng.test,
        shown
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

// -- typed descriptions ----------------------------------------------------------------------

pub fn f2h(x: f64) -> String {
    format!("{:016x}", x.to_bits())
}

pub fn h2f(h: &Json) -> f64 {
    let s = h
        .as_str()
        .unwrap_or_else(|| panic!("float bits expected: {h}"));
    f64::from_bits(u64::from_str_radix(s, 16).unwrap_or_else(|e| panic!("bad bits {s}: {e}")))
}

pub fn opt_f2h(x: Option<f64>) -> Json {
    x.map_or(Json::Null, |x| json!(f2h(x)))
}

/// The typed description of a value.
pub fn desc(v: &Value) -> Json {
    match v {
        Value::Null => json!({"t": "null"}),
        Value::Bool(b) => json!({"t": "bool", "v": b}),
        Value::Int(i) => json!({"t": "int", "v": i}),
        Value::Double(d) => json!({"t": "double", "v": f2h(*d)}),
        Value::String(s) => json!({"t": "str", "v": s}),
        Value::Bytes(b) => json!({"t": "bytes", "v": hex::encode(b)}),
        Value::List(items) => json!({"t": "list", "v": items.iter().map(desc).collect::<Vec<_>>()}),
        Value::Map(m) => {
            json!({"t": "map", "v": m.iter().map(|(k, v)| json!([k, desc(v)])).collect::<Vec<_>>()})
        }
        Value::Tensor(t) => tensor_desc(t),
    }
}

pub fn tensor_desc(t: &Tensor) -> Json {
    json!({"t": "tensor", "shape": t.shape, "dtype": t.dtype, "data": hex::encode(&t.data)})
}

/// Canonical form for comparison: map entries sorted by key (the wire gives maps no order).
pub fn norm(j: &Json) -> Json {
    match j {
        Json::Object(o) if o.get("t").and_then(Json::as_str) == Some("map") => {
            let mut pairs: Vec<(String, Json)> = o["v"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| (p[0].as_str().unwrap_or_default().to_owned(), norm(&p[1])))
                .collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            json!({"t": "map", "v": pairs.into_iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()})
        }
        Json::Object(o) => Json::Object(
            o.iter()
                .map(|(k, v)| match (k.as_str(), v) {
                    // An envelope's metadata map, as [key, value] pairs.
                    ("metadata", Json::Array(_)) => {
                        let sorted = norm(&json!({"t": "map", "v": v}));
                        (k.clone(), sorted["v"].clone())
                    }
                    _ => (k.clone(), norm(v)),
                })
                .collect(),
        ),
        Json::Array(a) => Json::Array(a.iter().map(norm).collect()),
        other => other.clone(),
    }
}

fn disposition_word(d: Disposition) -> &'static str {
    d.as_str()
}

/// The typed description of an error record, as the reference decoder reports it.
pub fn error_desc(e: &WireError) -> Json {
    json!({
        "code": e.code,
        "message": e.message,
        "remedy": e.remedy,
        "disposition": e.disposition.map(disposition_word),
        "node": e.node,
        "trace_id": e.trace_id,
        "num_delivered": e.num_delivered,
        "context": e.context,
    })
}

/// The description of an envelope to encode (what the helper's `encode` takes).
pub fn envelope_desc(env: &Envelope) -> Json {
    let payload = match &env.payload {
        Payload::None => Json::Null,
        Payload::Value(v) => desc(v),
        Payload::Tensor(t) => tensor_desc(t),
        other => panic!("no description for payload {other:?}"),
    };
    json!({
        "producer_name": env.producer_name,
        "flow_id": env.flow_id,
        "run_id": env.run_id,
        "trace_id": env.trace_id,
        "seq": env.seq,
        "event_ts": opt_f2h(env.event_ts),
        "type": env.msg_type.as_str(),
        "span_id": env.span_id,
        "parent_span_id": env.parent_span_id,
        "replica_id": env.replica_id,
        "metadata": env.metadata.iter().map(|(k, v)| json!([k, desc(v)])).collect::<Vec<_>>(),
        "payload": payload,
        "error": env.error.as_ref().map(error_desc),
    })
}

/// The description of a *decoded* envelope, field for field what the helper's `decode`
/// answers for the reference.
pub fn decoded_desc(env: &Envelope) -> Json {
    let (payload_type, payload) = match &env.payload {
        Payload::None => (String::new(), Json::Null),
        p @ Payload::Value(v) => (p.payload_type().unwrap_or_default().to_owned(), desc(v)),
        p @ Payload::Tensor(t) => (
            p.payload_type().unwrap_or_default().to_owned(),
            tensor_desc(t),
        ),
        Payload::Opaque { payload_type, data } => (
            payload_type.clone(),
            json!({"t": "raw", "type": payload_type, "data": hex::encode(data)}),
        ),
        other => {
            let (payload_type, data) = envelope::encode_payload(other)
                .unwrap_or_else(|e| panic!("re-encoding {other:?}: {e}"));
            let d = json!({"t": "proto", "type": payload_type, "data": hex::encode(data)});
            (payload_type, d)
        }
    };
    json!({
        "producer_name": env.producer_name,
        "flow_id": env.flow_id,
        "run_id": env.run_id,
        "trace_id": env.trace_id,
        "seq": env.seq,
        "event_ts": opt_f2h(env.event_ts),
        "type": env.msg_type.as_str(),
        "is_stop_signal": env.is_stop_signal(),
        "is_abort": env.is_abort(),
        "span_id": env.span_id,
        "parent_span_id": env.parent_span_id,
        "replica_id": env.replica_id,
        "metadata": env.metadata.iter().map(|(k, v)| json!([k, desc(v)])).collect::<Vec<_>>(),
        "payload_type": payload_type,
        "payload": payload,
        "error": env.error.as_ref().map(error_desc),
    })
}

/// Whether any map in the envelope has more than one entry (then encoders may order entries
/// differently and only the decoded forms are compared, not the bytes).
pub fn has_multi_entry_map(env: &Envelope) -> bool {
    fn in_value(v: &Value) -> bool {
        match v {
            Value::List(items) => items.iter().any(in_value),
            Value::Map(m) => m.len() > 1 || m.values().any(in_value),
            _ => false,
        }
    }
    env.metadata.len() > 1
        || env.metadata.values().any(in_value)
        || matches!(&env.payload, Payload::Value(v) if in_value(v))
        || env.error.as_ref().is_some_and(|e| e.context.len() > 1)
}

/// Shorthand for the envelope types.
pub fn msg_type_of(word: &str) -> MsgType {
    match word {
        "data" => MsgType::Data,
        "eos" => MsgType::Eos,
        _ => MsgType::Abort,
    }
}

/// A metadata map from pairs.
pub fn meta(pairs: Vec<(String, Value)>) -> BTreeMap<String, Value> {
    pairs.into_iter().collect()
}

/// The crate directory: `CARGO_MANIFEST_DIR` as Cargo sets it when it runs the test, else the
/// compiled-in one (the shared target dir may hold a binary built in another checkout).
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}
