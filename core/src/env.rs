//! The worker environment a control plane renders for one node (ENV-*, design §5).
//!
//! One function for both control planes: the operator puts these variables into pod specs,
//! the local runner into child processes. If they rendered separately, a flow could pass
//! locally and fail on a cluster. Values that come from Secrets stay references
//! ([`EnvValue::Secret`]) so credentials never appear in a rendered manifest or a log; the
//! local runner refuses them with a remedy instead of guessing.

use std::collections::BTreeMap;

use serde_json::json;

use crate::compile::{CompiledFlow, NodeSpec};
use crate::envelope::ENVELOPE_VERSION;
use crate::model::{
    DEFAULT_CREDIT_BYTES, DEFAULT_CREDIT_MESSAGES, FlowDocument, GpuFallback, NodeDecl, StoreRef,
    ValueFrom,
};

/// The health port control planes give workers on Kubernetes (each pod has its own IP).
pub const KUBERNETES_HEALTH_PORT: u16 = 8080;

/// One variable's value: a literal, or a key of a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvValue {
    /// A plain value.
    Literal(String),
    /// `valueFrom.secretKeyRef` on Kubernetes.
    Secret {
        /// Secret name.
        name: String,
        /// Key in the Secret.
        key: String,
    },
}

impl EnvValue {
    /// The literal, if it is one.
    pub fn literal(&self) -> Option<&str> {
        match self {
            EnvValue::Literal(s) => Some(s),
            EnvValue::Secret { .. } => None,
        }
    }
}

/// What differs between the control planes; everything else comes from the flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvContext {
    /// The broker URL when the flow names none (the local runner's own nats-server).
    pub default_nats_url: Option<String>,
    /// `VF_HEALTH_PORT`: 8080 on Kubernetes; 0 (off) or a free port locally.
    pub health_port: u16,
}

/// Why a node's environment cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// The node is not in the compiled flow.
    #[error("node '{0}' is not part of the compiled flow")]
    UnknownNode(String),
    /// Neither the flow nor the context names a broker.
    #[error(
        "the flow names no broker (spec.broker.url or spec.broker.urlFrom) and none was provided"
    )]
    NoBroker,
}

/// Renders every `VF_*` variable of `node`, sorted by name.
pub fn render_node_env(
    doc: &FlowDocument,
    flow: &CompiledFlow,
    node: &str,
    ctx: &EnvContext,
) -> Result<BTreeMap<String, EnvValue>, EnvError> {
    let spec = flow
        .node(node)
        .ok_or_else(|| EnvError::UnknownNode(node.to_owned()))?;
    let decl = doc.spec.nodes.iter().find(|n| n.name == node);
    let mut env = BTreeMap::new();
    let mut lit = |k: &str, v: String| {
        env.insert(k.to_owned(), EnvValue::Literal(v));
    };
    lit("VF_NODE_NAME", spec.name.clone());
    lit("VF_NODE_KIND", spec.kind.clone());
    lit("VF_PARENT_NAMES", spec.parents.join(","));
    lit(
        "VF_HAS_CHILDREN",
        if spec.has_children { "1" } else { "0" }.into(),
    );
    lit("VF_FLOW_ID", flow.flow_id.clone());
    lit("VF_RUN_ID", flow.run_id.clone());
    lit("VF_FLOW_TYPE", flow.flow_type.as_str().into());
    lit("VF_NB_TASKS", spec.nb_tasks.to_string());
    lit("VF_HEALTH_PORT", ctx.health_port.to_string());
    lit("VF_ENVELOPE_VERSION", ENVELOPE_VERSION.to_string());
    lit(
        "VF_NODE_PARAMS_JSON",
        serde_json::Value::Object(spec.params.clone()).to_string(),
    );
    if let Some(class) = &spec.node_class {
        lit("VF_NODE_CLASS", class.clone());
    }
    if let Some(r) = &spec.component_ref {
        lit("VF_COMPONENT_REF", r.clone());
        if let Some(v) = spec.protocol_version {
            lit("VF_PROTOCOL_VERSION", v.to_string());
        }
    }
    if let Some(argv) = spec.command.as_ref().filter(|c| !c.is_empty()) {
        // The exec component's program and arguments, so a worker started without
        // `exec -- <argv>` (the local runner) hosts the same program.
        lit("VF_COMPONENT_COMMAND_JSON", json!(argv).to_string());
    }
    if let Some(p) = &spec.partition_by {
        lit("VF_PARTITION_BY", p.clone());
    }
    if let Some(j) = &spec.join_policy {
        lit("VF_JOIN_POLICY_JSON", j.to_string());
    }
    if let Some(d) = &spec.delivery {
        for (key, var) in [("delivery", "VF_DELIVERY"), ("on_error", "VF_ON_ERROR")] {
            if let Some(v) = d.get(key).and_then(|v| v.as_str()) {
                lit(var, v.to_owned());
            }
        }
    }
    if let Some(r) = spec.blob_readers {
        lit("VF_BLOB_READERS", r.to_string());
    }
    if decl.and_then(|d| d.replayable) == Some(true) && spec.kind == "producer" {
        // MSGID-6, our extension: 1.0.4 reads it from the class, so its workers ignore it.
        lit("VF_REPLAYABLE", "1".into());
    }
    render_credit(spec, decl, &mut lit);
    render_device(spec, decl, &mut lit);
    let streams = doc.spec.broker.as_ref().and_then(|b| b.stream_replicas);
    if let Some(n) = streams.filter(|n| *n > 1) {
        lit("VF_STREAM_REPLICAS", n.to_string());
    }
    if let Some(age) = doc
        .spec
        .broker
        .as_ref()
        .and_then(|b| b.stream_max_age_seconds)
    {
        lit("VF_STREAM_MAX_AGE_SECONDS", age.to_string());
    }
    if let Some(store) = &doc.spec.payload_store {
        if let Some(limit) = store.inline_limit_bytes {
            lit("VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES", limit.to_string());
        }
        if let Some(ttl) = store.ttl_seconds {
            lit("VF_BLOB_TTL_SECONDS", ttl.to_string());
        }
    }
    if doc.spec.runtime_store.is_some() {
        // The EOS-7 barrier's expectation per parent (ENV-11): only meaningful with a ledger.
        let counts: Vec<String> = flow
            .parent_replicas(spec)
            .iter()
            .map(i64::to_string)
            .collect();
        if !counts.is_empty() {
            lit("VF_PARENT_REPLICAS", counts.join(","));
        }
    }

    // URLs: literal or Secret reference.
    let broker = doc.spec.broker.as_ref();
    match (
        broker.and_then(|b| b.url.clone()),
        broker.and_then(|b| b.url_from.clone()),
        &ctx.default_nats_url,
    ) {
        (Some(url), _, _) => {
            env.insert("VF_NATS_URL".into(), EnvValue::Literal(url));
        }
        (None, Some(from), _) => {
            env.insert("VF_NATS_URL".into(), secret(&from));
        }
        (None, None, Some(url)) => {
            env.insert("VF_NATS_URL".into(), EnvValue::Literal(url.clone()));
        }
        (None, None, None) => return Err(EnvError::NoBroker),
    }
    let payload = doc.spec.payload_store.as_ref().map(|p| StoreRef {
        url: p.url.clone(),
        url_from: p.url_from.clone(),
    });
    for (var, store) in [
        ("VF_BLOB_REDIS_URL", payload.as_ref()),
        ("VF_RUNTIME_STORE_URL", doc.spec.runtime_store.as_ref()),
    ] {
        if let Some(value) = store.and_then(store_value) {
            env.insert(var.into(), value);
        }
    }
    Ok(env)
}

/// `VF_CREDIT_MESSAGES` of a single-parent node (STREAM-15a): the Flow's `credit.messages`,
/// else [`DEFAULT_CREDIT_MESSAGES`]; `None` for producers and joins. The provision job
/// derives its durables from the same function.
pub fn credit_messages(spec: &NodeSpec) -> Option<i64> {
    (spec.parents.len() == 1).then(|| spec.credit_messages.unwrap_or(DEFAULT_CREDIT_MESSAGES))
}

/// STREAM-15a: a single-parent node's credit, the Flow's or [`DEFAULT_CREDIT_MESSAGES`] and
/// [`DEFAULT_CREDIT_BYTES`]. Joins size theirs from the join policy, with a byte bound only
/// when the Flow sets one.
fn render_credit(spec: &NodeSpec, decl: Option<&NodeDecl>, lit: &mut impl FnMut(&str, String)) {
    let bytes = decl.and_then(|d| d.credit.as_ref()).and_then(|c| c.bytes);
    let single_parent = credit_messages(spec);
    if let Some(messages) = single_parent {
        lit("VF_CREDIT_MESSAGES", messages.to_string());
    }
    let default_bytes = single_parent.map(|_| DEFAULT_CREDIT_BYTES);
    if let Some(bytes) = bytes.or(default_bytes) {
        lit("VF_PREFETCH_BYTES", bytes.to_string());
    }
}

/// Design §5 node declarations as environment, authoritative for builtin and exec nodes.
fn render_device(spec: &NodeSpec, decl: Option<&NodeDecl>, lit: &mut impl FnMut(&str, String)) {
    lit("VF_DEVICE_TYPE", spec.device_type.clone());
    if spec.device_type == "gpu" {
        lit("VF_GPU_COUNT", spec.gpu_count.to_string());
        if let Some(r) = &spec.gpu_resource_name {
            lit("VF_GPU_RESOURCE_NAME", r.clone());
        }
        let gpu = decl.and_then(|d| d.gpu.as_ref());
        let fallback = match gpu.and_then(|g| g.fallback) {
            Some(GpuFallback::Cpu) => "cpu",
            Some(GpuFallback::None) | None => "none",
        };
        lit("VF_GPU_FALLBACK", fallback.into());
        let peer = gpu.and_then(|g| g.requires_peer_access).unwrap_or(false);
        lit(
            "VF_GPU_REQUIRES_PEER_ACCESS",
            if peer { "1" } else { "0" }.into(),
        );
    }
    if let Some(d) = decl.filter(|d| !d.assets.is_empty()) {
        let assets: Vec<_> = d
            .assets
            .iter()
            .map(|a| json!({"path": a.path, "sha256": a.sha256, "portable": a.portable}))
            .collect();
        lit(
            "VF_ASSETS_JSON",
            serde_json::Value::Array(assets).to_string(),
        );
    }
}

fn secret(from: &ValueFrom) -> EnvValue {
    EnvValue::Secret {
        name: from.secret_key_ref.name.clone(),
        key: from.secret_key_ref.key.clone(),
    }
}

fn store_value(store: &StoreRef) -> Option<EnvValue> {
    match (&store.url, &store.url_from) {
        (Some(url), _) => Some(EnvValue::Literal(url.clone())),
        (None, Some(from)) => Some(secret(from)),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::compile;
    use crate::load::parse_flow;

    const FLOW: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: cams}
spec:
  type: realtime
  runId: r1
  broker: {urlFrom: {secretKeyRef: {name: nats, key: url}}, streamReplicas: 3}
  payloadStore: {url: "redis://r:6379/0", ttlSeconds: 60}
  nodes:
  - {name: cam, kind: producer, component: {builtin: videoflow.producers.basic.IntProducer}, params: {end_value: 3}}
  - name: det
    kind: processor
    parents: [cam]
    gpu: {count: 2, fallback: cpu, requiresPeerAccess: true}
    assets: [{path: /m/yolo.onnx, sha256: "0000000000000000000000000000000000000000000000000000000000000000", portable: true}]
    delivery: at-least-once
    onError: poison
    component: {exec: {command: [python3, det.py]}}
  - {name: sink, kind: consumer, parents: [det], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

    fn render(node: &str, ctx: &EnvContext) -> Result<BTreeMap<String, EnvValue>, EnvError> {
        let doc = parse_flow(FLOW).expect("parses");
        let flow = compile(&doc).expect("compiles");
        render_node_env(&doc, &flow, node, ctx)
    }

    fn ctx() -> EnvContext {
        EnvContext {
            default_nats_url: None,
            health_port: KUBERNETES_HEALTH_PORT,
        }
    }

    fn get<'a>(env: &'a BTreeMap<String, EnvValue>, k: &str) -> Option<&'a str> {
        env.get(k).and_then(EnvValue::literal)
    }

    #[test]
    fn core_contract_variables() {
        let env = render("det", &ctx()).expect("renders");
        assert_eq!(get(&env, "VF_NODE_NAME"), Some("det"));
        assert_eq!(get(&env, "VF_NODE_KIND"), Some("processor"));
        assert_eq!(get(&env, "VF_PARENT_NAMES"), Some("cam"));
        assert_eq!(get(&env, "VF_HAS_CHILDREN"), Some("1"));
        assert_eq!(get(&env, "VF_FLOW_ID"), Some("cams"));
        assert_eq!(get(&env, "VF_RUN_ID"), Some("r1"));
        assert_eq!(get(&env, "VF_FLOW_TYPE"), Some("realtime"));
        assert_eq!(get(&env, "VF_HEALTH_PORT"), Some("8080"));
        assert_eq!(get(&env, "VF_ENVELOPE_VERSION"), Some("4"));
        assert_eq!(get(&env, "VF_DELIVERY"), Some("at-least-once"));
        assert_eq!(get(&env, "VF_ON_ERROR"), Some("poison"));
        assert_eq!(get(&env, "VF_COMPONENT_REF"), Some("python3"));
        assert_eq!(get(&env, "VF_PROTOCOL_VERSION"), Some("1"));
        assert_eq!(
            get(&env, "VF_COMPONENT_COMMAND_JSON"),
            Some(r#"["python3","det.py"]"#)
        );
        assert_eq!(get(&env, "VF_BLOB_READERS"), Some("1"));
        assert_eq!(get(&env, "VF_STREAM_REPLICAS"), Some("3"));
        assert_eq!(get(&env, "VF_BLOB_TTL_SECONDS"), Some("60"));
        assert_eq!(get(&env, "VF_BLOB_REDIS_URL"), Some("redis://r:6379/0"));
        assert!(
            !env.contains_key("VF_NODE_CLASS"),
            "exec nodes have no class"
        );
        assert!(
            !env.contains_key("VF_PARENT_REPLICAS"),
            "no ledger, no barrier"
        );
    }

    #[test]
    fn design_5_device_and_assets() {
        let env = render("det", &ctx()).expect("renders");
        assert_eq!(get(&env, "VF_DEVICE_TYPE"), Some("gpu"));
        assert_eq!(get(&env, "VF_GPU_COUNT"), Some("2"));
        assert_eq!(get(&env, "VF_GPU_FALLBACK"), Some("cpu"));
        assert_eq!(get(&env, "VF_GPU_REQUIRES_PEER_ACCESS"), Some("1"));
        let assets: serde_json::Value =
            serde_json::from_str(get(&env, "VF_ASSETS_JSON").expect("assets")).expect("json");
        assert_eq!(assets[0]["path"], "/m/yolo.onnx");
        assert_eq!(assets[0]["portable"], true);
        let sink = render("sink", &ctx()).expect("renders");
        assert_eq!(get(&sink, "VF_DEVICE_TYPE"), Some("cpu"));
        assert!(!sink.contains_key("VF_GPU_COUNT"));
        assert_eq!(get(&sink, "VF_HAS_CHILDREN"), Some("0"));
        assert_eq!(get(&sink, "VF_BLOB_READERS"), Some("0"));
        assert_eq!(
            get(&sink, "VF_NODE_CLASS"),
            Some("videoflow.consumers.basic.VoidConsumer")
        );
    }

    #[test]
    fn credentials_stay_secret_references() {
        let env = render("cam", &ctx()).expect("renders");
        assert_eq!(
            env.get("VF_NATS_URL"),
            Some(&EnvValue::Secret {
                name: "nats".into(),
                key: "url".into()
            })
        );
        assert_eq!(get(&env, "VF_NODE_PARAMS_JSON"), Some(r#"{"end_value":3}"#));
    }

    #[test]
    fn unknown_node_and_missing_broker_are_errors() {
        assert_eq!(
            render("nope", &ctx()),
            Err(EnvError::UnknownNode("nope".into()))
        );
        let text = FLOW.replace(
            "  broker: {urlFrom: {secretKeyRef: {name: nats, key: url}}, streamReplicas: 3}\n",
            "",
        );
        let doc = parse_flow(&text).expect("parses");
        let flow = compile(&doc).expect("compiles");
        assert_eq!(
            render_node_env(&doc, &flow, "cam", &ctx()),
            Err(EnvError::NoBroker)
        );
        let local = EnvContext {
            default_nats_url: Some("nats://127.0.0.1:4222".into()),
            health_port: 0,
        };
        let env = render_node_env(&doc, &flow, "cam", &local).expect("renders");
        assert_eq!(get(&env, "VF_NATS_URL"), Some("nats://127.0.0.1:4222"));
        assert_eq!(get(&env, "VF_HEALTH_PORT"), Some("0"));
    }

    /// MSGID-6: `replayable: true` on a producer is `VF_REPLAYABLE=1`; absent, no variable.
    #[test]
    fn msgid_6_a_replayable_producer_gets_vf_replayable() {
        assert!(
            !render("cam", &ctx())
                .expect("renders")
                .contains_key("VF_REPLAYABLE")
        );
        let text = FLOW.replace("kind: producer,", "kind: producer, replayable: true,");
        let doc = parse_flow(&text).expect("parses");
        let flow = compile(&doc).expect("compiles");
        let env = render_node_env(&doc, &flow, "cam", &ctx()).expect("renders");
        assert_eq!(get(&env, "VF_REPLAYABLE"), Some("1"));
    }

    #[test]
    fn the_stream_age_bound_reaches_every_node_only_when_asked_for() {
        for node in ["cam", "det", "sink"] {
            let env = render(node, &ctx()).expect("renders");
            assert!(!env.contains_key("VF_STREAM_MAX_AGE_SECONDS"), "{node}");
        }
        let text = FLOW.replace(
            "streamReplicas: 3}",
            "streamReplicas: 3, streamMaxAgeSeconds: 3600}",
        );
        let doc = parse_flow(&text).expect("parses");
        let flow = compile(&doc).expect("compiles");
        for node in ["cam", "det", "sink"] {
            let env = render_node_env(&doc, &flow, node, &ctx()).expect("renders");
            assert_eq!(
                get(&env, "VF_STREAM_MAX_AGE_SECONDS"),
                Some("3600"),
                "{node}"
            );
        }
    }
}
