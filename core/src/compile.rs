//! Compiling a Flow into per-node records (`specs.json`, the provisioning input).
//!
//! The records keep the reference's snake_case `NodeSpec` shape field for field, so the
//! Python tooling (its provision job, its worker) reads our `specs.json` unchanged and ours
//! reads theirs. Everything a control plane derives from the graph — `has_children`,
//! `blob_readers`, `nb_tasks`, the resolved join policy — is derived here once, and both the
//! operator and the local runner call this.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};
use sha2::{Digest, Sha256};

use crate::join::policy::JoinPolicy;
use crate::model::{FlowDocument, FlowSpec, FlowType, NodeDecl, NodeGpu, NodeKind};
use crate::validate::{Diagnostic, has_errors, validate_flow};

/// Version of the component protocol exec nodes speak.
pub const COMPONENT_PROTOCOL_VERSION: i64 = 1;

/// One node's compiled record: the reference's `NodeSpec`, snake_case, every field present
/// (`null` when unset), in the reference's field order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Unique node name.
    pub name: String,
    /// Class to run: a builtin name or the Python import path; `None` for exec components.
    pub node_class: Option<String>,
    /// Constructor parameters (`VF_NODE_PARAMS_JSON`).
    pub params: Map<String, Json>,
    /// Parents in positional input order.
    pub parents: Vec<String>,
    /// `producer`, `processor` or `consumer`.
    pub kind: String,
    /// Whether any node reads this one's output (`VF_HAS_CHILDREN`).
    pub has_children: bool,
    /// Replica count (processors; 1 otherwise).
    pub nb_tasks: i64,
    /// `cpu` or `gpu`.
    pub device_type: String,
    /// Producers: whether `next()` ends by itself.
    pub is_finite: bool,
    /// Image declared on the node (exec/python), else the flow's worker image applies.
    #[serde(default)]
    pub image: Option<String>,
    /// `trace_id` or a metadata field.
    #[serde(default)]
    pub partition_by: Option<String>,
    /// The reference's `JoinPolicy.to_dict()`, or `None` for the flow-type default.
    #[serde(default)]
    pub join_policy: Option<Json>,
    /// Exec components: what to run (image, else program).
    #[serde(default)]
    pub component_ref: Option<String>,
    /// Component descriptor (reference only; always `None` here).
    #[serde(default)]
    pub descriptor: Option<Json>,
    /// Exec components: command and arguments.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Exec components: component protocol version.
    #[serde(default)]
    pub protocol_version: Option<i64>,
    /// Devices per replica (GPU processors).
    #[serde(default = "one")]
    pub gpu_count: i64,
    /// Extended resource name override.
    #[serde(default)]
    pub gpu_resource_name: Option<String>,
    /// Downstream reads per published message (BLOB-5): Σ over children of the child's
    /// `nb_tasks` when partitioned, else 1. 0 for leaves.
    #[serde(default)]
    pub blob_readers: Option<i64>,
    /// Declared GPU memory (reference only).
    #[serde(default)]
    pub gpu_memory_gib: Option<f64>,
    /// `{delivery, on_error}` overrides, or `None` for the flow-type preset.
    #[serde(default)]
    pub delivery: Option<Json>,
    /// The Flow's `credit.messages` (STREAM-15a), so the provision job creates the durables
    /// it asks for. Absent from `specs.json` unless set: a 1.0.4 job reads the same records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credit_messages: Option<i64>,
}

fn one() -> i64 {
    1
}

impl NodeSpec {
    /// Whether the node routes each message to one replica (PART-1).
    pub fn is_partitioned(&self) -> bool {
        self.partition_by.as_deref().is_some_and(|p| !p.is_empty()) && self.nb_tasks > 1
    }
}

/// A compiled flow: identity plus records in topological order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompiledFlow {
    /// Raw flow id (`metadata.name`).
    pub flow_id: String,
    /// Raw run id (explicit, or [`default_run_id`]).
    pub run_id: String,
    /// Flow type.
    pub flow_type: FlowType,
    /// One record per node, parents before children.
    pub nodes: Vec<NodeSpec>,
}

impl CompiledFlow {
    /// The record of `name`.
    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// `specs.json`: the list of records, exactly what the provision job reads.
    pub fn specs_json(&self) -> String {
        serde_json::to_string_pretty(&self.nodes).unwrap_or_else(|_| "[]".to_owned())
    }

    /// `VF_PARENT_REPLICAS` (ENV-11): each parent's `nb_tasks`, in parent order.
    pub fn parent_replicas(&self, spec: &NodeSpec) -> Vec<i64> {
        spec.parents
            .iter()
            .map(|p| self.node(p).map_or(1, |n| n.nb_tasks))
            .collect()
    }

    /// `VF_BLOB_READER_IDS`: `<child>` per competing child, `<child>/p<i>` per replica of a
    /// partitioned child.
    pub fn blob_reader_ids(&self, spec: &NodeSpec) -> Vec<String> {
        let mut ids = Vec::new();
        for child in self.nodes.iter().filter(|c| c.parents.contains(&spec.name)) {
            if child.is_partitioned() {
                ids.extend((0..child.nb_tasks).map(|i| format!("{}/p{i}", child.name)));
            } else {
                ids.push(child.name.clone());
            }
        }
        ids
    }
}

/// Validates and compiles a document. `Err` carries every diagnostic when any is an error.
pub fn compile(doc: &FlowDocument) -> Result<CompiledFlow, Vec<Diagnostic>> {
    let diags = validate_flow(doc);
    if has_errors(&diags) {
        return Err(diags);
    }
    let spec = &doc.spec;
    let run_id = match spec.run_id.as_deref() {
        Some(r) if !r.is_empty() => r.to_owned(),
        _ => default_run_id(spec),
    };
    let order = topological_order(&spec.nodes);
    let mut nodes: Vec<NodeSpec> = order
        .iter()
        .map(|&i| node_spec(&spec.nodes[i], spec))
        .collect();
    let readers: Vec<i64> = nodes
        .iter()
        .map(|n| {
            nodes
                .iter()
                .filter(|c| c.parents.contains(&n.name))
                .map(|c| if c.is_partitioned() { c.nb_tasks } else { 1 })
                .sum()
        })
        .collect();
    for (n, r) in nodes.iter_mut().zip(readers) {
        n.blob_readers = Some(r);
    }
    Ok(CompiledFlow {
        flow_id: doc.metadata.name.clone(),
        run_id,
        flow_type: spec.flow_type,
        nodes,
    })
}

/// The default run id: 10 hex characters of a hash over the topology — node names, kinds,
/// parents (in order), partitioning and replica routing, and the flow type. An image or
/// replica change keeps the run (rolls in place); a topology change starts a new one.
pub fn default_run_id(spec: &FlowSpec) -> String {
    let mut nodes: Vec<Json> = spec
        .nodes
        .iter()
        .map(|n| {
            serde_json::json!({
                "name": n.name,
                "kind": n.kind.as_str(),
                "parents": n.parents,
                "partition_by": n.partition_by,
            })
        })
        .collect();
    nodes.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let canonical = serde_json::json!({"type": spec.flow_type.as_str(), "nodes": nodes});
    let digest = hex::encode(Sha256::digest(canonical.to_string().as_bytes()));
    digest[..10].to_owned()
}

/// Kahn's algorithm, stable in declaration order. Validation has already refused cycles and
/// unknown parents, so every node is placed; any left over (defensive) keep their order.
fn topological_order(nodes: &[NodeDecl]) -> Vec<usize> {
    let mut placed = vec![false; nodes.len()];
    let mut order = Vec::with_capacity(nodes.len());
    loop {
        let before = order.len();
        for (i, n) in nodes.iter().enumerate() {
            if placed[i] {
                continue;
            }
            let ready = n.parents.iter().all(|p| {
                nodes
                    .iter()
                    .enumerate()
                    .all(|(j, m)| m.name != *p || placed[j])
            });
            if ready {
                placed[i] = true;
                order.push(i);
            }
        }
        if order.len() == nodes.len() || order.len() == before {
            break;
        }
    }
    order.extend((0..nodes.len()).filter(|&i| !placed[i]));
    order
}

/// The constructor parameters: the declared `params`, plus the node-level declarations the
/// reference keeps among a node's params (`idempotent` for consumers, IDEM-1), so the worker
/// of either runtime reads them from `VF_NODE_PARAMS_JSON`.
fn node_params(n: &NodeDecl) -> Map<String, Json> {
    let mut params = match &n.params {
        Some(Json::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    if let Some(idempotent) = n.idempotent {
        params.entry("idempotent").or_insert(Json::Bool(idempotent));
    }
    params
}

fn node_spec(n: &NodeDecl, spec: &FlowSpec) -> NodeSpec {
    let has_children = spec.nodes.iter().any(|c| c.parents.contains(&n.name));
    let is_processor = n.kind == NodeKind::Processor;
    let c = &n.component;
    let (node_class, image, component_ref, command, protocol_version) = if let Some(b) = &c.builtin
    {
        (Some(b.clone()), None, None, None, None)
    } else if let Some(py) = &c.python {
        (Some(py.class.clone()), py.image.clone(), None, None, None)
    } else if let Some(exec) = &c.exec {
        let mut cmd = exec.command.clone();
        cmd.extend(exec.args.iter().cloned());
        let reference = exec.image.clone().or_else(|| exec.command.first().cloned());
        (
            None,
            exec.image.clone(),
            reference,
            Some(cmd),
            Some(COMPONENT_PROTOCOL_VERSION),
        )
    } else {
        (None, None, None, None, None)
    };
    let delivery = if n.delivery.is_some() || n.on_error.is_some() {
        let mut d = Map::new();
        if let Some(mode) = n.delivery {
            d.insert("delivery".into(), Json::from(mode.as_str()));
        }
        if let Some(on_error) = n.on_error {
            d.insert("on_error".into(), Json::from(on_error.as_str()));
        }
        Some(Json::Object(d))
    } else {
        None
    };
    NodeSpec {
        name: n.name.clone(),
        node_class,
        params: node_params(n),
        parents: n.parents.clone(),
        kind: n.kind.as_str().to_owned(),
        has_children,
        nb_tasks: if is_processor {
            i64::from(n.nb_tasks())
        } else {
            1
        },
        device_type:
            if n.gpu.is_some() && crate::catalog::takes_gpu(n.kind, c.builtin.as_deref()) {
                "gpu"
            } else {
                "cpu"
            }
            .to_owned(),
        is_finite: if n.kind == NodeKind::Producer {
            n.finite.unwrap_or(true)
        } else {
            true
        },
        image,
        partition_by: n.partition_by.clone().filter(|p| !p.is_empty()),
        join_policy: n
            .join
            .as_ref()
            .map(|j| JoinPolicy::from_decl(j).to_reference_json()),
        component_ref,
        descriptor: None,
        command,
        protocol_version,
        gpu_count: n.gpu.as_ref().and_then(|g| g.count).map_or(1, i64::from),
        gpu_resource_name: n.gpu.as_ref().and_then(NodeGpu::claimed_resource),
        blob_readers: None,
        gpu_memory_gib: None,
        delivery,
        credit_messages: n.credit.as_ref().and_then(|c| c.messages),
    }
}
