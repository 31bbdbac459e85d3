//! The structure-aware inputs of the fuzz targets: models `arbitrary` fills from the fuzzer's
//! bytes, rendered into the form the product reads (an envelope, a Flow's YAML, a process
//! environment). The checks themselves are in the product crates (`videoflow_core::fuzz`,
//! `videoflow_worker::fuzz`).
//!
//! Why models: the raw targets start from bytes, and a byte string almost never becomes a
//! Flow whose nodes name each other, or an environment that names five real variables. The
//! models draw names from the real schema, the catalog and the worker's variable list, so
//! the fuzzer spends its time in validation, compilation and the parsers' value rules.
//!
//! A model target's failing input is saved in its rendered form (set `VF_FUZZ_EMIT` to a
//! file, run the target on the input once): that form is what `fuzz/regressions/<raw
//! target>/` holds and the stable tests replay through the raw entry point.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use serde_json::{Map, Value as Json, json};
use videoflow_core::catalog;
use videoflow_core::envelope::tensor::NATIVE_DTYPES;
use videoflow_core::envelope::{Envelope, MsgType, Payload, WireError, proto};
use videoflow_core::value::{Tensor, Value};

/// The largest single allocation a target may make: inputs are at most 64 KiB, so anything
/// near this is memory a length prefix announced rather than bytes that arrived — the
/// "hostile length prefix" a decoder must not trust. libFuzzer's own `-malloc_limit_mb` needs
/// a sanitizer's allocator hooks; this guard works in every build.
pub const ALLOCATION_LIMIT: usize = 64 << 20;

/// The global allocator of every target: the system allocator, aborting (a crash libFuzzer
/// records with its input) on one allocation above [`ALLOCATION_LIMIT`].
pub struct Guarded;

fn guard(size: usize) {
    if size > ALLOCATION_LIMIT {
        // No formatting machinery that might allocate: a fixed message, then abort.
        eprintln!("fuzz allocation guard: one allocation above ALLOCATION_LIMIT (64 MiB)");
        std::process::abort();
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// `GlobalAlloc` contract; the guard only reads the requested size first.
unsafe impl GlobalAlloc for Guarded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        guard(layout.size());
        // SAFETY: the caller's `layout` contract is passed through to `System`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        guard(layout.size());
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        guard(new_size);
        // SAFETY: `ptr` and `layout` come from this allocator, i.e. from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` and `layout` come from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Guarded = Guarded;

/// Writes `rendered` to the file named by `VF_FUZZ_EMIT`, when set (read once).
pub fn emit(rendered: &[u8]) {
    static TARGET: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    if let Some(path) = TARGET.get_or_init(|| std::env::var_os("VF_FUZZ_EMIT").map(Into::into)) {
        if let Err(e) = std::fs::write(path, rendered) {
            eprintln!("VF_FUZZ_EMIT {}: {e}", path.display());
        }
    }
}

// -- small building blocks -----------------------------------------------------------------

/// A short text from a small alphabet (names, keys), or now and then any string at all.
#[derive(Arbitrary, Debug)]
pub enum Text {
    /// Letters, digits and the separators names use.
    Plain(Vec<PlainChar>),
    /// Anything `arbitrary` makes of the bytes (control characters, any Unicode).
    Any(String),
}

/// One character of [`Text::Plain`].
#[derive(Arbitrary, Debug)]
pub struct PlainChar(u8);

impl Text {
    fn render(&self) -> String {
        const ALPHABET: &[u8] = b"abcxyz019-_.:/ AZ";
        match self {
            Text::Plain(cs) => cs
                .iter()
                .take(24)
                .map(|c| char::from(ALPHABET[usize::from(c.0) % ALPHABET.len()]))
                .collect(),
            Text::Any(s) => s.chars().take(48).collect(),
        }
    }
}

/// Picks one of `options` by `n`.
fn pick<'a>(options: &[&'a str], n: u8) -> &'a str {
    options[usize::from(n) % options.len()]
}

// -- envelopes ------------------------------------------------------------------------------

/// A tensor: a native dtype with data of the right length, or an inconsistent one.
#[derive(Arbitrary, Debug)]
pub struct TensorModel {
    dtype: u8,
    opaque_dtype: Option<Text>,
    shape: Vec<i8>,
    consistent: bool,
    data: Vec<u8>,
}

impl TensorModel {
    fn render(&self) -> Tensor {
        let shape: Vec<i64> = self.shape.iter().take(4).map(|&d| i64::from(d)).collect();
        if let Some(t) = &self.opaque_dtype {
            return Tensor::new(shape, t.render(), self.data.clone());
        }
        let (dtype, itemsize) = NATIVE_DTYPES[usize::from(self.dtype) % NATIVE_DTYPES.len()];
        if !self.consistent {
            return Tensor::new(shape, dtype, self.data.clone());
        }
        let shape: Vec<i64> = shape.iter().map(|d| d.rem_euclid(5)).collect();
        let elements: i64 = shape.iter().product();
        let len = usize::try_from(elements).unwrap_or(0) * itemsize;
        let mut data = self.data.clone();
        data.resize(len, 0x5a);
        Tensor::new(shape, dtype, data)
    }
}

/// A value tree (depth bounded by the input's length).
#[derive(Arbitrary, Debug)]
pub enum ValueModel {
    /// `None`.
    Null,
    /// A bool.
    Bool(bool),
    /// An int.
    Int(i64),
    /// A double (NaN, infinities and `-0.0` included).
    Double(f64),
    /// A string.
    String(Text),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<ValueModel>),
    /// A map.
    Map(Vec<(Text, ValueModel)>),
    /// A nested tensor.
    Tensor(TensorModel),
}

impl ValueModel {
    fn render(&self) -> Value {
        match self {
            ValueModel::Null => Value::Null,
            ValueModel::Bool(b) => Value::Bool(*b),
            ValueModel::Int(i) => Value::Int(*i),
            ValueModel::Double(d) => Value::Double(*d),
            ValueModel::String(t) => Value::String(t.render()),
            ValueModel::Bytes(b) => Value::Bytes(b.clone()),
            ValueModel::List(items) => Value::List(items.iter().map(Self::render).collect()),
            ValueModel::Map(entries) => Value::Map(
                entries
                    .iter()
                    .map(|(k, v)| (k.render(), v.render()))
                    .collect(),
            ),
            ValueModel::Tensor(t) => Value::Tensor(t.render()),
        }
    }
}

/// Every payload kind of §4.3.
#[derive(Arbitrary, Debug)]
pub enum PayloadModel {
    /// No payload (a terminator's; on DATA an encode error).
    None,
    /// `videoflow.v1.Value`.
    Value(ValueModel),
    /// `videoflow.v1.Tensor`.
    Tensor(TensorModel),
    /// `videoflow.v1.Frame`.
    Frame(Option<TensorModel>, Text, Option<f64>),
    /// `videoflow.v1.Detections`.
    Detections(Option<TensorModel>, Vec<Text>),
    /// `videoflow.v1.Tracks`.
    Tracks(Option<TensorModel>),
    /// `videoflow.v1.BlobRef`.
    BlobRef(Text, Text, u64),
    /// Any other FQN (WIRE-9).
    Opaque(Text, Vec<u8>),
}

impl PayloadModel {
    fn render(&self) -> Payload {
        let t = |m: &Option<TensorModel>| m.as_ref().map(|m| proto::Tensor::from(m.render()));
        match self {
            PayloadModel::None => Payload::None,
            PayloadModel::Value(v) => Payload::Value(v.render()),
            PayloadModel::Tensor(m) => Payload::Tensor(m.render()),
            PayloadModel::Frame(pixels, format, ts) => Payload::Frame(proto::Frame {
                pixels: t(pixels),
                pixel_format: format.render(),
                capture_ts: *ts,
            }),
            PayloadModel::Detections(boxes, names) => Payload::Detections(proto::Detections {
                boxes: t(boxes),
                class_names: names.iter().map(Text::render).collect(),
            }),
            PayloadModel::Tracks(tracks) => Payload::Tracks(proto::Tracks { tracks: t(tracks) }),
            PayloadModel::BlobRef(r, inner, size) => Payload::BlobRef(proto::BlobRef {
                r#ref: r.render(),
                inner_payload_type: inner.render(),
                size: *size,
            }),
            PayloadModel::Opaque(ty, data) => Payload::Opaque {
                payload_type: ty.render(),
                data: data.clone(),
            },
        }
    }
}

/// An envelope: any message type with any payload and error record, so the encoder's
/// refusals are exercised as well as its output.
#[derive(Arbitrary, Debug)]
pub struct EnvelopeModel {
    msg_type: u8,
    names: [Text; 4],
    seq: u64,
    event_ts: Option<f64>,
    spans: [Text; 2],
    replica_id: u32,
    metadata: Vec<(Text, ValueModel)>,
    payload: PayloadModel,
    error: Option<(Text, Text, Option<Text>, Option<u32>, Vec<(Text, Text)>)>,
}

impl EnvelopeModel {
    /// The envelope the model describes.
    pub fn to_envelope(&self) -> Envelope {
        let [producer, flow, run, trace] = &self.names;
        Envelope {
            producer_name: producer.render(),
            flow_id: flow.render(),
            run_id: run.render(),
            trace_id: trace.render(),
            seq: self.seq,
            event_ts: self.event_ts,
            msg_type: match self.msg_type % 3 {
                0 => MsgType::Data,
                1 => MsgType::Eos,
                _ => MsgType::Abort,
            },
            span_id: self.spans[0].render(),
            parent_span_id: self.spans[1].render(),
            replica_id: self.replica_id,
            metadata: self
                .metadata
                .iter()
                .map(|(k, v)| (k.render(), v.render()))
                .collect(),
            payload: self.payload.render(),
            error: self
                .error
                .as_ref()
                .map(|(code, message, remedy, n, context)| WireError {
                    code: code.render(),
                    message: message.render(),
                    remedy: remedy.as_ref().map(Text::render),
                    num_delivered: *n,
                    context: context
                        .iter()
                        .map(|(k, v)| (k.render(), v.render()))
                        .collect(),
                    ..WireError::default()
                }),
        }
    }
}

// -- Flows ----------------------------------------------------------------------------------

/// A JSON value for a field: mostly the shape the schema wants, now and then another.
#[derive(Arbitrary, Debug)]
pub enum Leaf {
    /// A small non-negative integer (the common case for counts).
    Small(u8),
    /// Any integer.
    Int(i64),
    /// Any float; YAML writes NaN and the infinities as `.nan`, `.inf`.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// A string.
    Str(Text),
    /// `null`.
    Null,
    /// A list of small integers.
    List(Vec<u8>),
    /// An object.
    Object(Vec<(Text, u8)>),
}

impl Leaf {
    fn render(&self) -> Json {
        match self {
            Leaf::Small(n) => json!(n),
            Leaf::Int(i) => json!(i),
            Leaf::Float(f) => float(*f),
            Leaf::Bool(b) => json!(b),
            Leaf::Str(t) => json!(t.render()),
            Leaf::Null => Json::Null,
            Leaf::List(items) => json!(items),
            Leaf::Object(entries) => Json::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.render(), json!(v)))
                    .collect(),
            ),
        }
    }
}

/// A float as JSON; serde_json has no NaN or infinity, so those become a YAML word later.
fn float(f: f64) -> Json {
    serde_json::Number::from_f64(f).map_or_else(
        || {
            json!(if f.is_nan() {
                NAN
            } else if f > 0.0 {
                INF
            } else {
                NEG_INF
            })
        },
        Json::Number,
    )
}

/// Placeholders [`FlowModel::to_yaml`] replaces by the YAML words for NaN and the infinities.
const NAN: &str = "@@nan@@";
const INF: &str = "@@inf@@";
const NEG_INF: &str = "@@-inf@@";

/// A field's value: the expected shape (`Some`), or a [`Leaf`] of any shape.
#[derive(Arbitrary, Debug)]
pub enum Field<T> {
    /// Left out.
    Absent,
    /// The expected shape.
    Typed(T),
    /// Something else.
    Other(Leaf),
}

impl<T> Field<T> {
    fn put(&self, obj: &mut Map<String, Json>, key: &str, typed: impl FnOnce(&T) -> Json) {
        match self {
            Field::Absent => {}
            Field::Typed(t) => {
                obj.insert(key.to_owned(), typed(t));
            }
            Field::Other(leaf) => {
                obj.insert(key.to_owned(), leaf.render());
            }
        }
    }
}

/// A node name: mostly one of a few names the nodes share (so parents resolve), else any.
#[derive(Arbitrary, Debug)]
pub enum NodeName {
    /// One of [`NODE_NAMES`].
    Shared(u8),
    /// Any text.
    Other(Text),
}

const NODE_NAMES: [&str; 10] = [
    "cam", "left", "right", "pair", "sink", "a", "b", "Node_1", "x-y", "a.b",
];

impl NodeName {
    fn render(&self) -> String {
        match self {
            NodeName::Shared(n) => pick(&NODE_NAMES, *n).to_owned(),
            NodeName::Other(t) => t.render(),
        }
    }
}

/// A node's component.
#[derive(Arbitrary, Debug)]
pub enum ComponentModel {
    /// A builtin class of the catalog (a canonical name or an alias), by index.
    Builtin(u16),
    /// Any builtin name.
    BuiltinNamed(Text),
    /// An exec component.
    Exec(Vec<Text>, Option<Text>),
    /// A Python component.
    Python(Text),
    /// Two kinds at once, or none.
    Both(u16, Vec<Text>),
    /// No component.
    Missing,
}

/// A join declaration.
#[derive(Arbitrary, Debug)]
pub struct JoinModel {
    mode: Field<u8>,
    timeout_seconds: Field<f64>,
    missing: Field<u8>,
    max_pending: Field<i64>,
    tolerance_ms: Field<f64>,
    quorum: Field<i64>,
    collect: Vec<(NodeName, f64)>,
}

/// One node.
#[derive(Arbitrary, Debug)]
pub struct NodeModel {
    name: NodeName,
    kind: u8,
    parents: Vec<NodeName>,
    component: ComponentModel,
    params: Vec<(u8, Leaf)>,
    replicas: Field<i8>,
    finite: Field<bool>,
    partition_by: Field<u8>,
    join: Field<JoinModel>,
    delivery: Field<u8>,
    on_error: Field<u8>,
    credit: Field<(Option<i64>, Option<i64>)>,
    idempotent: Field<bool>,
    gpu: Field<(Option<i8>, Option<u8>, Option<bool>)>,
    autoscaling: Field<(Option<bool>, Option<i8>, Option<i8>, Option<i64>)>,
    assets: Vec<(Text, Option<Text>, bool)>,
    unknown: Option<(Text, Leaf)>,
}

impl NodeModel {
    fn render(&self) -> Json {
        let mut n = Map::new();
        n.insert("name".into(), json!(self.name.render()));
        n.insert(
            "kind".into(),
            json!(pick(
                &["producer", "processor", "consumer", "sink"],
                self.kind
            )),
        );
        if !self.parents.is_empty() {
            let parents: Vec<String> = self.parents.iter().take(4).map(NodeName::render).collect();
            n.insert("parents".into(), json!(parents));
        }
        let names: Vec<&str> = catalog::all_names().collect();
        let class = |i: u16| names[usize::from(i) % names.len()];
        let component = match &self.component {
            ComponentModel::Builtin(i) => json!({"builtin": class(*i)}),
            ComponentModel::BuiltinNamed(t) => json!({"builtin": t.render()}),
            ComponentModel::Exec(cmd, image) => {
                let mut e = Map::new();
                let cmd: Vec<String> = cmd.iter().take(4).map(Text::render).collect();
                e.insert("command".into(), json!(cmd));
                if let Some(image) = image {
                    e.insert("image".into(), json!(image.render()));
                }
                json!({"exec": e})
            }
            ComponentModel::Python(c) => json!({"python": {"class": c.render()}}),
            ComponentModel::Both(i, cmd) => {
                let cmd: Vec<String> = cmd.iter().take(2).map(Text::render).collect();
                json!({"builtin": class(*i), "exec": {"command": cmd}})
            }
            ComponentModel::Missing => json!({}),
        };
        // Parameter names from the chosen class (and its family's base parameters).
        let param_names: Vec<&str> = match &self.component {
            ComponentModel::Builtin(i) | ComponentModel::Both(i, _) => catalog::lookup(class(*i))
                .map_or_else(Vec::new, |spec| {
                    spec.params
                        .iter()
                        .chain(catalog::base_params(spec.kind))
                        .map(|p| p.name)
                        .collect()
                }),
            _ => Vec::new(),
        };
        n.insert("component".into(), component);
        if !self.params.is_empty() {
            let params: Map<String, Json> = self
                .params
                .iter()
                .take(6)
                .map(|(i, v)| {
                    let name = if param_names.is_empty() || *i >= 200 {
                        format!("p{}", i % 4)
                    } else {
                        pick(&param_names, *i).to_owned()
                    };
                    (name, v.render())
                })
                .collect();
            n.insert("params".into(), Json::Object(params));
        }
        self.replicas.put(&mut n, "replicas", |r| json!(r));
        self.finite.put(&mut n, "finite", |b| json!(b));
        self.partition_by.put(&mut n, "partitionBy", |p| {
            json!(pick(&["trace_id", "key", "", "value"], *p))
        });
        self.join.put(&mut n, "join", JoinModel::render);
        self.delivery.put(&mut n, "delivery", |d| {
            json!(pick(&["at-least-once", "best-effort", "exactly-once"], *d))
        });
        self.on_error.put(&mut n, "onError", |d| {
            json!(pick(&["poison", "transient", "worker_fatal", "retry"], *d))
        });
        self.credit.put(
            &mut n,
            "credit",
            |(messages, bytes)| json!({"messages": messages, "bytes": bytes}),
        );
        self.idempotent.put(&mut n, "idempotent", |b| json!(b));
        self.gpu.put(&mut n, "gpu", |(count, profile, fallback)| {
            let mut g = Map::new();
            if let Some(c) = count {
                g.insert("count".into(), json!(c));
            }
            if let Some(p) = profile {
                g.insert(
                    "migProfile".into(),
                    json!(pick(&["1g.5gb", "3g.20gb+me", "x"], *p)),
                );
            }
            if let Some(f) = fallback {
                g.insert("fallback".into(), json!(if *f { "cpu" } else { "none" }));
            }
            Json::Object(g)
        });
        self.autoscaling
            .put(&mut n, "autoscaling", |(enabled, min, max, lag)| {
                json!({"enabled": enabled, "minReplicas": min, "maxReplicas": max,
                       "targetLagPerReplica": lag})
            });
        if !self.assets.is_empty() {
            let assets: Vec<Json> = self
                .assets
                .iter()
                .take(2)
                .map(|(path, sha, portable)| {
                    json!({"path": path.render(), "sha256": sha.as_ref().map(Text::render),
                           "portable": portable})
                })
                .collect();
            n.insert("assets".into(), json!(assets));
        }
        if let Some((k, v)) = &self.unknown {
            n.insert(k.render(), v.render());
        }
        Json::Object(n)
    }
}

impl JoinModel {
    fn render(&self) -> Json {
        let mut j = Map::new();
        self.mode.put(&mut j, "mode", |m| {
            json!(pick(&["trace", "time", "key"], *m))
        });
        self.timeout_seconds
            .put(&mut j, "timeoutSeconds", |t| float(*t));
        self.missing.put(&mut j, "missing", |m| {
            json!(pick(&["drop", "wait", "error", "skip"], *m))
        });
        self.max_pending.put(&mut j, "maxPending", |m| json!(m));
        self.tolerance_ms.put(&mut j, "toleranceMs", |t| float(*t));
        self.quorum.put(&mut j, "quorum", |q| json!(q));
        if !self.collect.is_empty() {
            let collect: Map<String, Json> = self
                .collect
                .iter()
                .take(3)
                .map(|(name, w)| (name.render(), float(*w)))
                .collect();
            j.insert("collect".into(), Json::Object(collect));
        }
        Json::Object(j)
    }
}

/// A store or broker section: a URL, a Secret reference, or both.
#[derive(Arbitrary, Debug)]
pub struct StoreModel {
    url: Option<u8>,
    url_from: Option<(Text, Text)>,
    extra: Option<(u8, Leaf)>,
}

const STORE_URLS: [&str; 8] = [
    "redis://127.0.0.1:6379",
    "rediss://user:pw@host:6380/0",
    "file:///tmp/ledger",
    "memory://",
    "nats://127.0.0.1:4222",
    "nats://a:4222,nats://b:4222",
    "http://x",
    "",
];

impl StoreModel {
    fn render(&self, extra_keys: &[&str]) -> Json {
        let mut s = Map::new();
        if let Some(u) = self.url {
            s.insert("url".into(), json!(pick(&STORE_URLS, u)));
        }
        if let Some((name, key)) = &self.url_from {
            s.insert(
                "urlFrom".into(),
                json!({"secretKeyRef": {"name": name.render(), "key": key.render()}}),
            );
        }
        if let Some((k, v)) = &self.extra
            && !extra_keys.is_empty()
        {
            s.insert(pick(extra_keys, *k).to_owned(), v.render());
        }
        Json::Object(s)
    }
}

/// A whole Flow document.
#[derive(Arbitrary, Debug)]
pub struct FlowModel {
    name: NodeName,
    api_version: Option<Text>,
    flow_type: Field<bool>,
    run_id: Field<Text>,
    broker: Option<StoreModel>,
    payload_store: Option<StoreModel>,
    runtime_store: Option<StoreModel>,
    admission: Field<(Vec<(NodeName, u8)>, Option<f64>)>,
    autoscaling: Field<(bool, Option<i64>, Option<i32>)>,
    nodes: Vec<NodeModel>,
    unknown: Option<(Text, Leaf)>,
}

impl FlowModel {
    /// The document as JSON (YAML's data model).
    pub fn to_json(&self) -> Json {
        let mut spec = Map::new();
        self.flow_type.put(&mut spec, "type", |b| {
            json!(if *b { "batch" } else { "realtime" })
        });
        self.run_id.put(&mut spec, "runId", |t| json!(t.render()));
        if let Some(b) = &self.broker {
            spec.insert(
                "broker".into(),
                b.render(&["streamReplicas", "monitoringUrl"]),
            );
        }
        if let Some(p) = &self.payload_store {
            spec.insert(
                "payloadStore".into(),
                p.render(&["inlineLimitBytes", "ttlSeconds"]),
            );
        }
        if let Some(r) = &self.runtime_store {
            spec.insert("runtimeStore".into(), r.render(&[]));
        }
        self.admission
            .put(&mut spec, "admission", |(profiles, timeout)| {
                let profiles: Vec<Json> = profiles
                    .iter()
                    .take(3)
                    .map(|(channel, p)| {
                        json!({"channel": channel.render(),
                           "profile": pick(&["live_latest", "batch_durable", "bogus"], *p)})
                    })
                    .collect();
                json!({"profiles": profiles, "timeoutSeconds": timeout.map(float)})
            });
        self.autoscaling
            .put(&mut spec, "autoscaling", |(enabled, lag, max)| {
                json!({"enabled": enabled, "targetLagPerReplica": lag, "maxReplicas": max})
            });
        let nodes: Vec<Json> = self.nodes.iter().take(8).map(NodeModel::render).collect();
        spec.insert("nodes".into(), json!(nodes));
        if let Some((k, v)) = &self.unknown {
            spec.insert(k.render(), v.render());
        }
        json!({
            "apiVersion": self.api_version.as_ref().map_or_else(
                || videoflow_core::model::API_VERSION.to_owned(), Text::render),
            "kind": "Flow",
            "metadata": {"name": self.name.render()},
            "spec": spec,
        })
    }

    /// The document as the YAML a person would write.
    pub fn to_yaml(&self) -> String {
        let yaml = serde_yaml::to_string(&self.to_json()).unwrap_or_default();
        yaml.replace(&format!("'{NAN}'"), ".nan")
            .replace(&format!("'{NEG_INF}'"), "-.inf")
            .replace(&format!("'{INF}'"), ".inf")
    }
}

// -- process environments ---------------------------------------------------------------------

/// The variables the worker, the jobs and the fault, log and device settings read.
pub const VARIABLES: [&str; 67] = [
    "VF_NODE_NAME",
    "VF_NODE_KIND",
    "VF_NATS_URL",
    "VF_FLOW_ID",
    "VF_RUN_ID",
    "VF_PARENT_NAMES",
    "VF_HAS_CHILDREN",
    "VF_FLOW_TYPE",
    "VF_REPLICA_ID",
    "POD_NAME",
    "HOSTNAME",
    "VF_ACK_WAIT_SECONDS",
    "VF_MAX_RETRIES",
    "VF_EOS_QUIESCENCE_MS",
    "VF_NB_TASKS",
    "VF_PARTITION_BY",
    "VF_JOIN_POLICY_JSON",
    "VF_PARENT_REPLICAS",
    "VF_DELIVERY",
    "VF_ON_ERROR",
    "VF_BREAKER_THRESHOLD",
    "VF_PROGRESS_TIMEOUT_SECONDS",
    "VF_WATCHDOG_INTERVAL_SECONDS",
    "VF_ENVELOPE_VERSION",
    "VF_PROFILE_REQUESTS_JSON",
    "VF_ADMISSION_TIMEOUT_SECONDS",
    "VF_BLOB_REDIS_URL",
    "VF_STORE_ADMISSION",
    "VF_BLOB_READER_IDS",
    "VF_BLOB_READERS",
    "VF_BLOB_TTL_SECONDS",
    "VF_NODE_CLASS",
    "VF_NODE_PARAMS_JSON",
    "VF_RUNTIME_STORE_URL",
    "VF_PARTITION_LEASE_SECONDS",
    "VF_REPLICA_SLOTS",
    "VF_HEALTH_PORT",
    "VF_PREFETCH_BYTES",
    "VF_CREDIT_MESSAGES",
    "VF_STORE_BACKPRESSURE_SECONDS",
    "VF_DEVICE_TYPE",
    "VF_GPU_COUNT",
    "VF_GPU_FALLBACK",
    "VF_GPU_REQUIRES_PEER_ACCESS",
    "VF_GPU_RESOURCE_NAME",
    "VF_GPU_GRANT_JSON",
    "VF_ASSETS_JSON",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "VF_NVML_LIBRARY",
    "VF_STRUCTURED_LOGS",
    "VF_COMPONENT_COMMAND_JSON",
    "VF_COMPONENT_START_TIMEOUT_SECONDS",
    "VF_COMPONENT_CALL_TIMEOUT_SECONDS",
    "VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES",
    "VF_TERMINATION_LOG",
    "VF_FAULT_SCHEDULE_JSON",
    "VF_FAULT_MARKER_DIR",
    "VF_LOG",
    "NO_COLOR",
    "VF_FLOW_SPECS_JSON",
    "VF_STREAM_REPLICAS",
    "VF_MAX_STREAMS",
    "VF_MAX_CONSUMERS",
    "VF_PROTOCOL_VERSION",
    "VF_COMPONENT_REF",
    "VF_UNKNOWN_VARIABLE",
];

/// Values of the shapes the variables take.
#[derive(Arbitrary, Debug)]
pub enum EnvValueModel {
    /// An integer, as Python's `int()` reads it (signs, `_`, spaces).
    Int(i64, u8),
    /// A float, as Python's `float()` reads it.
    Float(f64, u8),
    /// One of the words the enumerated variables take.
    Word(u8),
    /// A URL; `true` puts [`videoflow_worker::fuzz::PLANTED_PASSWORD`] into its user
    /// information.
    Url(u8, bool),
    /// A comma list of names.
    List(Vec<NodeName>),
    /// JSON text of some value.
    Json(Leaf),
    /// A join policy, a profile request list, a fault schedule or a grant, as JSON.
    Document(u8, Vec<(u8, Leaf)>),
    /// Any text.
    Text(Text),
    /// Any bytes (not necessarily UTF-8).
    Bytes(Vec<u8>),
}

const WORDS: [&str; 24] = [
    "producer",
    "processor",
    "consumer",
    "batch",
    "realtime",
    "at-least-once",
    "best-effort",
    "poison",
    "transient",
    "worker_fatal",
    "gpu",
    "cpu",
    "none",
    "1",
    "0",
    "true",
    "4",
    "",
    " ",
    "all",
    "0,1",
    "GPU-1234",
    "trace_id",
    "info,videoflow=debug",
];

const DOCUMENT_KEYS: [&str; 16] = [
    "mode",
    "timeout_seconds",
    "missing",
    "max_pending",
    "quorum",
    "collect",
    "channel",
    "profile",
    "options",
    "workload_id",
    "devices",
    "exclusive",
    "publish.send.before",
    "sink.effect.after",
    "action",
    "nth",
];

impl EnvValueModel {
    fn render(&self) -> Vec<u8> {
        use videoflow_worker::fuzz::PLANTED_PASSWORD;
        let text = match self {
            EnvValueModel::Int(i, style) => match style % 5 {
                0 => i.to_string(),
                1 => format!(" {i} "),
                2 => format!("+{i}"),
                3 => i
                    .to_string()
                    .chars()
                    .flat_map(|c| [c, '_'])
                    .collect::<String>(),
                _ => format!("{i}0000000000000000000000"),
            },
            EnvValueModel::Float(f, style) => match style % 4 {
                0 => f.to_string(),
                1 => format!("{f:e}"),
                2 => pick(
                    &["inf", "-Infinity", "nan", "1e309", "1_0.5", "1e-400"],
                    *style,
                )
                .to_owned(),
                _ => format!("{}", f.fract()),
            },
            EnvValueModel::Word(w) => pick(&WORDS, *w).to_owned(),
            EnvValueModel::Url(u, planted) => {
                let base = pick(&STORE_URLS, *u);
                match (planted, base.split_once("://")) {
                    (true, Some((scheme, rest))) if !rest.is_empty() => {
                        format!("{scheme}://user:{PLANTED_PASSWORD}@{rest}")
                    }
                    _ => base.to_owned(),
                }
            }
            EnvValueModel::List(names) => names
                .iter()
                .take(4)
                .map(NodeName::render)
                .collect::<Vec<_>>()
                .join(","),
            EnvValueModel::Json(leaf) => leaf.render().to_string(),
            EnvValueModel::Document(kind, entries) => {
                let obj: Map<String, Json> = entries
                    .iter()
                    .take(5)
                    .map(|(k, v)| (pick(&DOCUMENT_KEYS, *k).to_owned(), v.render()))
                    .collect();
                match kind % 3 {
                    0 => Json::Object(obj).to_string(),
                    1 => json!([obj]).to_string(),
                    _ => json!({"workload_id": "w", "devices": [obj]}).to_string(),
                }
            }
            EnvValueModel::Text(t) => t.render(),
            EnvValueModel::Bytes(b) => return b.clone(),
        };
        text.into_bytes()
    }
}

/// A process environment: a complete node environment underneath (so the parsers past the
/// required variables are reached), then variables of the list set to modelled values.
#[derive(Arbitrary, Debug)]
pub struct EnvModel {
    base: bool,
    vars: Vec<(u8, EnvValueModel)>,
}

impl EnvModel {
    /// The environment in `/proc/<pid>/environ` form (what `videoflow_worker::fuzz::config`
    /// reads).
    pub fn to_environ(&self) -> Vec<u8> {
        let mut vars: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        if self.base {
            for (k, v) in [
                ("VF_NODE_NAME", "sink"),
                ("VF_NODE_KIND", "consumer"),
                ("VF_NATS_URL", "nats://127.0.0.1:4222"),
                ("VF_FLOW_ID", "flow"),
                ("VF_RUN_ID", "run"),
                ("VF_PARENT_NAMES", "left,right"),
                ("VF_FLOW_SPECS_JSON", "[]"),
            ] {
                vars.insert(k.into(), v.into());
            }
        }
        for (i, v) in self.vars.iter().take(12) {
            let name = VARIABLES[usize::from(*i) % VARIABLES.len()];
            vars.insert(name.into(), v.render());
        }
        let mut out = Vec::new();
        for (k, v) in vars {
            // A NUL ends an entry in the environment's form; a value cannot hold one.
            out.extend(k.into_iter().filter(|b| *b != 0 && *b != b'='));
            out.push(b'=');
            out.extend(v.into_iter().filter(|b| *b != 0));
            out.push(0);
        }
        out
    }
}
