//! What the fuzz targets in `fuzz/` check on the worker's side, shared with the stable replay
//! of every saved input (`worker/tests/fuzz_regressions.rs`) so a target and its regression
//! test run the same code. Not an API: each function panics, naming what failed, when a
//! property does not hold — that panic is the fuzzer's "crash".
//!
//! - [`frames`] — the component socket's frame reader ([`crate::component::frame`]): both
//!   readers, any slicing of the stream, the `videoflow.component.v1` messages and what the
//!   host makes of a component's answers.
//! - [`config`] — every `VF_*` parser over an arbitrary process environment (`KEY=VALUE`
//!   entries separated by NUL bytes, as `/proc/<pid>/environ` holds them): the node, job,
//!   teardown, fault, logging and device settings, and what the runtime derives from them.
//! - [`flow`] — a Flow text through core's checks (`videoflow_core::fuzz::flow`), then what a
//!   control plane does with it: every node's rendered environment must start its worker, the
//!   provision job must read the compiled records, and both must derive the same durables.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::ffi::OsStringExt;

use prost::Message;
use videoflow_core::component::negotiate;
use videoflow_core::component::proto::{ComponentMessage, WorkerMessage, component_message};
use videoflow_core::env::EnvValue;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::redact::split_credentials;

use crate::broker::{DurableRequest, keepalive_period};
use crate::component::frame::{FrameError, FrameReader, READ_CHUNK, read_frame, write_frame};
use crate::component::nodes::{component_error, take_output};
use crate::config::{
    Environment, FaultConfig, JobConfig, LogConfig, TeardownConfig, WorkerConfig,
    termination_log_path,
};
use crate::faults::FaultSchedule;
use crate::gpu::DeliveredGrant;
use crate::nodes::NodeContext;
use crate::provision::{data_durables, node_vars, spec_vars};

/// Where [`config`] points `VF_FLOW_SPECS_PATH`: the job reads that file when
/// `VF_FLOW_SPECS_JSON` is empty, and a check must never read a path an input names
/// (`/dev/zero` would never end).
pub const SPECS_PATH: &str = "/nonexistent/videoflow-fuzz/specs.json";

/// The password [`config`] looks for in error texts: an input that puts it into a URL's user
/// information must never see it in an error, a log line or a termination record.
pub const PLANTED_PASSWORD: &str = "pw0PLANTEDz9";

// -- the component frame reader ----------------------------------------------------------------

/// Every check on one byte stream from a component (the `frame` target). The first byte
/// picks the message type (its low bit: the worker's `ComponentMessage`, or the SDK side's
/// `WorkerMessage`) and how the stream is sliced into reads (the other bits); the rest is
/// the stream.
pub fn frames(data: &[u8]) {
    let Some((&head, stream)) = data.split_first() else {
        return;
    };
    if head & 1 == 0 {
        let got = frames_of::<ComponentMessage>(head >> 1, stream);
        for msg in got {
            component_answer(msg);
        }
    } else {
        frames_of::<WorkerMessage>(head >> 1, stream);
    }
}

/// How a sequence of frames ended.
#[derive(Debug, PartialEq)]
enum End {
    /// The stream ended between two frames.
    Clean,
    /// The stream ended inside a frame.
    MidFrame,
    /// A header announced more than the limit.
    TooLarge(u32),
    /// A frame's bytes are not the message.
    Undecodable,
}

/// Reads `stream` with [`read_frame`] and with a [`FrameReader`] fed in slices; both must see
/// the same frames and the same ending, and every frame must re-encode to itself.
fn frames_of<M: Message + Default + std::fmt::Debug>(slicing: u8, stream: &[u8]) -> Vec<M> {
    let (whole, whole_end) = by_read_frame::<M>(slicing, stream);
    let (sliced, sliced_end) = by_frame_reader::<M>(slicing, stream);
    assert_eq!(
        whole_end, sliced_end,
        "read_frame and FrameReader end alike"
    );
    let whole_bytes: Vec<Vec<u8>> = whole.iter().map(Message::encode_to_vec).collect();
    let sliced_bytes: Vec<Vec<u8>> = sliced.iter().map(Message::encode_to_vec).collect();
    assert_eq!(
        whole_bytes, sliced_bytes,
        "read_frame and FrameReader read the same frames"
    );
    for body in &whole_bytes {
        let msg = match M::decode(body.as_slice()) {
            Ok(msg) => msg,
            Err(e) => panic!("a re-encoded frame body does not decode: {e}"),
        };
        let mut framed = Vec::new();
        if let Err(e) = write_frame(&mut framed, &msg) {
            panic!("a decoded message cannot be written as a frame: {e}");
        }
        match read_frame::<_, M>(&mut framed.as_slice()) {
            Ok(Some(back)) => {
                assert_eq!(&back.encode_to_vec(), body, "a frame reads back as itself")
            }
            other => panic!("a written frame does not read back: {other:?}"),
        }
    }
    whole
}

fn by_read_frame<M: Message + Default>(slicing: u8, stream: &[u8]) -> (Vec<M>, End) {
    let mut src = Sliced::new(slicing, stream);
    let mut got = Vec::new();
    loop {
        match read_frame::<_, M>(&mut src) {
            Ok(Some(m)) => got.push(m),
            Ok(None) => return (got, End::Clean),
            Err(FrameError::TooLarge(n)) => return (got, End::TooLarge(n)),
            Err(FrameError::Decode(_)) => return (got, End::Undecodable),
            Err(FrameError::Io(e)) => {
                assert_eq!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof,
                    "a slice only ends: {e}"
                );
                return (got, End::MidFrame);
            }
        }
    }
}

/// The most memory a reader may hold after `delivered` bytes arrived: a few resting buffers
/// plus twice what arrived. A header announcing a gigabyte must not buy a gigabyte.
fn memory_bound(delivered: usize) -> usize {
    2 * delivered + 2 * READ_CHUNK
}

/// A reader that hands out the stream in slices whose sizes cycle through a few lengths
/// derived from `slicing`, with an `Interrupted` now and then, as a socket may; it checks
/// that no read is offered more room than [`memory_bound`] allows (the room offered is
/// memory the frame reader allocated).
struct Sliced<'a> {
    rest: &'a [u8],
    sizes: [usize; 4],
    turn: usize,
    delivered: usize,
}

impl<'a> Sliced<'a> {
    fn new(slicing: u8, stream: &'a [u8]) -> Self {
        let s = usize::from(slicing);
        Sliced {
            rest: stream,
            sizes: [1 + s % 7, s % 3, 1 + s * 37, 1 << (s % 17)],
            turn: 0,
            delivered: 0,
        }
    }
}

impl Read for Sliced<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        assert!(
            buf.len() <= memory_bound(self.delivered),
            "a read offered {} bytes of room after {} bytes arrived",
            buf.len(),
            self.delivered
        );
        self.turn += 1;
        let size = self.sizes[self.turn % self.sizes.len()];
        if size == 0 {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let n = size.min(buf.len()).min(self.rest.len());
        buf[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        self.delivered += n;
        Ok(n)
    }
}

fn by_frame_reader<M: Message + Default>(slicing: u8, stream: &[u8]) -> (Vec<M>, End) {
    let mut src = Sliced::new(slicing, stream);
    let mut reader = FrameReader::default();
    let mut got = Vec::new();
    loop {
        match reader.next_frame::<M>() {
            Ok(Some(m)) => {
                got.push(m);
                continue;
            }
            Ok(None) => {}
            Err(FrameError::TooLarge(n)) => return (got, End::TooLarge(n)),
            Err(FrameError::Decode(_)) => return (got, End::Undecodable),
            Err(FrameError::Io(e)) => panic!("next_frame reads nothing, yet failed: {e}"),
        }
        let filled = reader.fill(&mut src);
        assert!(
            reader.capacity() <= memory_bound(src.delivered),
            "the frame reader holds {} bytes after {} arrived",
            reader.capacity(),
            src.delivered
        );
        match filled {
            Ok(0) if reader.has_partial() => return (got, End::MidFrame),
            Ok(0) => return (got, End::Clean),
            Ok(_) => {}
            Err(FrameError::Io(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(FrameError::TooLarge(n)) => return (got, End::TooLarge(n)),
            Err(e) => panic!("fill failed on a plain reader: {e}"),
        }
    }
}

/// What the host makes of one message from a component: the version it negotiates from a
/// Hello, the error a failed Result becomes, and the payload an output decodes to.
fn component_answer(msg: ComponentMessage) {
    match msg.body {
        Some(component_message::Body::Hello(h)) => {
            let _ = negotiate(&h.protocol_versions);
        }
        Some(component_message::Body::Result(r)) => {
            if let Some(e) = r.error {
                let err = component_error(e);
                let _ = (err.render(), err.termination_json(), err.exit_code());
            }
            let mut ctx = NodeContext::new("flow", "run", "node", 0);
            if let Err(e) = take_output(&mut ctx, r.output) {
                let _ = e.render();
            }
            let _ = (
                ctx.take_output_partition_key(),
                ctx.take_output_event_timestamp(),
            );
        }
        None => {}
    }
}

// -- the VF_* configuration --------------------------------------------------------------------

/// `KEY=VALUE` entries separated by NUL bytes, as the operating system hands a process its
/// environment (an entry without `=` is a name with an empty value).
pub fn environ(data: &[u8]) -> Vec<(OsString, OsString)> {
    data.split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| match entry.iter().position(|b| *b == b'=') {
            Some(i) => (
                OsString::from_vec(entry[..i].to_vec()),
                OsString::from_vec(entry[i + 1..].to_vec()),
            ),
            None => (OsString::from_vec(entry.to_vec()), OsString::new()),
        })
        .collect()
}

/// The inverse of [`environ`], for the structure-aware target and the saved regressions.
pub fn to_environ(pairs: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// Every check on one process environment (the `config` and `config_model` targets): no
/// parser panics; every refusal is `VF_CONFIG`, and its texts (message, log line,
/// termination record) never show [`PLANTED_PASSWORD`] when the input only put it into a
/// URL's user information; what parses feeds what the runtime derives from it.
pub fn config(data: &[u8]) {
    let mut pairs = environ(data);
    pairs.retain(|(k, _)| k != "VF_FLOW_SPECS_PATH");
    pairs.push(("VF_FLOW_SPECS_PATH".into(), SPECS_PATH.into()));
    let planted = planted_only_in_urls(&pairs);
    let env = Environment::from_pairs(pairs);
    let vars = env.vars();
    let mut errors = Vec::new();

    match WorkerConfig::from_environment(&env) {
        Ok(cfg) => derived(&cfg),
        Err(e) => errors.push(e),
    }
    match JobConfig::from_env(vars) {
        Ok(job) => {
            assert!(!job.flow.flow_id.is_empty() && !job.nats_url.is_empty());
            let _ = job.timeout.as_secs_f64();
        }
        Err(e) => errors.push(e),
    }
    match TeardownConfig::from_env(vars) {
        Ok(t) => assert!(!t.nats_url.is_empty() && !t.flow_id.is_empty() && !t.run_id.is_empty()),
        Err(e) => errors.push(e),
    }
    let faults = FaultConfig::from_env(vars);
    if let Some(json) = &faults.schedule_json {
        // Parsed, never installed: installing is process-wide.
        let _ = FaultSchedule::parse(json, faults.marker_dir.clone());
    }
    let log = LogConfig::from_env(&env);
    let _ = tracing_subscriber::EnvFilter::try_new(&log.filter);
    let _ = termination_log_path(vars);
    if let Some(url) = vars.get("VF_NATS_URL") {
        let (stripped, _) = split_credentials(url);
        let _ = crate::broker::connect::server_list(&stripped);
    }
    if let Some(grant) = vars.get("VF_GPU_GRANT_JSON")
        && let Err(e) = DeliveredGrant::parse(grant)
    {
        errors.push(e);
    }
    for e in &errors {
        assert_eq!(
            e.code,
            ErrorCode::Config,
            "a configuration refusal is VF_CONFIG: {e}"
        );
        let texts = [e.render(), e.log_line(), e.termination_json()];
        if planted {
            for text in &texts {
                assert!(
                    !text.contains(PLANTED_PASSWORD),
                    "a URL's password shows in an error text: {text}"
                );
            }
        }
    }
}

/// Whether [`PLANTED_PASSWORD`] occurs in the input, and only as the password of URLs
/// (`scheme://user:PASSWORD@…`), where every error text must mask it.
fn planted_only_in_urls(pairs: &[(OsString, OsString)]) -> bool {
    let mut seen = false;
    for (k, v) in pairs {
        if k.to_string_lossy().contains(PLANTED_PASSWORD) {
            return false;
        }
        let v = v.to_string_lossy();
        for (at, _) in v.match_indices(PLANTED_PASSWORD) {
            let before = &v[..at];
            let after = &v[at + PLANTED_PASSWORD.len()..];
            let Some(scheme_end) = before.rfind("://") else {
                return false;
            };
            let user = &before[scheme_end + 3..];
            let Some(user) = user.strip_suffix(':') else {
                return false;
            };
            let plain = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            if user.is_empty() || !plain(user) || !plain(&before[..scheme_end]) {
                return false;
            }
            if !after.starts_with('@') {
                return false;
            }
            seen = true;
        }
    }
    seen
}

/// What the runtime derives from a parsed configuration (credit, shares, retry caps, slot
/// claims, the data durables and their keepalive), which must not panic on any value the
/// parser let through.
pub fn derived(cfg: &WorkerConfig) {
    let credit = cfg.credit();
    let _ = (credit.item_credit, credit.prefetch, credit.max_ack_pending);
    for effective in [i64::MIN, -1, 0, 1, 7, credit.max_ack_pending, i64::MAX] {
        assert!(
            cfg.replica_share(effective) >= 1,
            "a replica's share is at least 1"
        );
    }
    for ledger in [false, true] {
        let _ = (cfg.max_deliver(ledger), cfg.needs_slot_claim(ledger));
        for parent in &cfg.parent_names {
            let durable = DurableRequest::data_for(cfg, parent, ledger);
            let _ = keepalive_period(durable.ack_wait);
        }
    }
    let _ = (
        cfg.replica_slot_count(),
        cfg.replica_id(),
        cfg.is_partitioned(),
        cfg.preset_flow_type(),
        cfg.shape_flow_type(),
    );
}

// -- Flows -------------------------------------------------------------------------------------

/// Replicas up to which [`flow`] compares each node's durables replica by replica: beyond
/// it the derivation is the same code, and only costs time.
const DURABLE_REPLICAS_CHECKED: i64 = 16;

/// Every check on one Flow text (the `flow_text` and `flow_model` targets): core's
/// ([`videoflow_core::fuzz::flow`]), then, for a Flow that compiles, that each node's
/// environment starts its worker (a Secret's value stands in as a URL), that the provision
/// job reads the compiled records back, and that the workers' and the job's derivations of
/// every data durable agree (STREAM-7: otherwise a worker meets a durable it cannot bind).
pub fn flow(text: &str) {
    let Some(c) = videoflow_core::fuzz::flow(text) else {
        return;
    };
    for (node, env) in &c.envs {
        let vars: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    EnvValue::Literal(s) => s.clone(),
                    EnvValue::Secret { .. } => secret_stand_in(k).to_owned(),
                };
                (k.clone(), v)
            })
            .collect();
        match WorkerConfig::from_env(&vars) {
            Ok(cfg) => derived(&cfg),
            Err(e) => panic!("node {node:?} compiles, but its worker refuses its environment: {e}"),
        }
    }
    let nats_url = videoflow_core::fuzz::DEFAULT_NATS_URL;
    let specs = match serde_json::to_string(&c.flow.nodes) {
        Ok(specs) => specs,
        Err(e) => panic!("specs.json cannot be written: {e}"),
    };
    let job_vars = BTreeMap::from([
        ("VF_FLOW_SPECS_JSON".to_owned(), specs),
        ("VF_FLOW_SPECS_PATH".to_owned(), SPECS_PATH.to_owned()),
        ("VF_FLOW_ID".to_owned(), c.flow.flow_id.clone()),
        ("VF_RUN_ID".to_owned(), c.flow.run_id.clone()),
        (
            "VF_FLOW_TYPE".to_owned(),
            c.flow.flow_type.as_str().to_owned(),
        ),
        ("VF_NATS_URL".to_owned(), nats_url.to_owned()),
    ]);
    match JobConfig::from_env(&job_vars) {
        Ok(job) => assert_eq!(
            job.flow, c.flow,
            "the provision job reads the compiled flow back"
        ),
        Err(e) => panic!("the provision job refuses a compiled flow: {e}"),
    }
    let from_secret = c
        .envs
        .iter()
        .flat_map(|(_, env)| env.values())
        .any(|v| matches!(v, EnvValue::Secret { .. }));
    if from_secret {
        // Secret-sourced URLs are the Kubernetes case; the local derivation refuses them.
        return;
    }
    for spec in &c.flow.nodes {
        if spec.nb_tasks > DURABLE_REPLICAS_CHECKED {
            continue;
        }
        let worker = data_durables(spec, false, &|s, r| {
            let vars = node_vars(&c.doc, &c.flow, &s.name, r, nats_url)?;
            WorkerConfig::from_env(&vars)
        });
        let job = data_durables(spec, false, &|s, r| {
            WorkerConfig::from_env(&spec_vars(&c.flow, s, r, nats_url, None))
        });
        let (worker, job) = match (worker, job) {
            (Ok(w), Ok(j)) => (w, j),
            (w, j) => panic!(
                "node {:?}: durables not derived: worker {:?}, job {:?}",
                spec.name,
                w.err().map(|e: VfError| e.to_string()),
                j.err().map(|e: VfError| e.to_string())
            ),
        };
        assert_eq!(
            worker, job,
            "node {:?}: the workers and the provision job derive different durables",
            spec.name
        );
    }
}

/// What a Secret-sourced variable stands for in [`flow`]'s check: a URL of its kind.
fn secret_stand_in(var: &str) -> &'static str {
    match var {
        "VF_NATS_URL" => "nats://user:secret@127.0.0.1:4222",
        _ => "redis://:secret@127.0.0.1:6379/0",
    }
}
