//! Flow validation: every problem at once, each with a path and a remedy.
//!
//! A flow is written on one machine and run on many, so a mistake is cheapest to find here.
//! Making the author fix one problem, re-run and discover the next is the slowest way to
//! spend that cheapness, so [`validate_flow`] never stops at the first problem. The operator
//! turns the result into `Admitted=False`; the local runner prints it and exits 2.
//!
//! Codes: the graph codes of the protocol (§15.1: `VF_GRAPH_CYCLE`, …) where the reference
//! has one, and `VF_FLOW_*` codes of ours for field rules the reference enforces in its
//! Python constructors instead (it builds graphs from objects, so it cannot have, e.g., an
//! unknown parent name).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::join::policy::JoinPolicy;
use crate::model::{
    API_VERSION, FlowDocument, FlowSpec, FlowType, JoinMode, KIND, MAX_CREDIT_MESSAGES,
    MAX_STREAM_MAX_AGE_SECONDS, MIN_STREAM_MAX_AGE_SECONDS, NodeDecl, NodeKind,
};
use crate::naming::Encoding;

/// Stable codes of the field rules this crate adds to the protocol's graph codes.
pub mod codes {
    /// The protocol's graph codes (§15.1), defined with the rest of the taxonomy.
    pub use crate::errors::{
        VF_GRAPH_CYCLE, VF_GRAPH_DUPLICATE_NAME, VF_GRAPH_NAME_COLLISION, VF_GRAPH_NOT_A_PRODUCER,
        VF_GRAPH_OUTPUT_UNREAD, VF_GRAPH_UNPARTITIONED_JOIN,
    };
    /// The document is not a `videoflow.io/v1alpha1` `Flow`, or a field has the wrong type.
    pub const VF_FLOW_SCHEMA: &str = "VF_FLOW_SCHEMA";
    /// A field the schema does not know (usually a typo).
    pub const VF_FLOW_UNKNOWN_FIELD: &str = "VF_FLOW_UNKNOWN_FIELD";
    /// A required name is empty or unusable.
    pub const VF_FLOW_NAME: &str = "VF_FLOW_NAME";
    /// A parent that is not a node of the flow.
    pub const VF_GRAPH_UNKNOWN_PARENT: &str = "VF_GRAPH_UNKNOWN_PARENT";
    /// A producer declared with parents.
    pub const VF_GRAPH_PRODUCER_WITH_PARENTS: &str = "VF_GRAPH_PRODUCER_WITH_PARENTS";
    /// A consumer that other nodes name as their parent.
    pub const VF_GRAPH_CONSUMER_WITH_CHILDREN: &str = "VF_GRAPH_CONSUMER_WITH_CHILDREN";
    /// The flow has no producer at all.
    pub const VF_GRAPH_NO_PRODUCER: &str = "VF_GRAPH_NO_PRODUCER";
    /// A join policy rule (JOIN-1, JOIN-4, JOIN-10).
    pub const VF_FLOW_JOIN_POLICY: &str = "VF_FLOW_JOIN_POLICY";
    /// A knob set where it means nothing, or out of range.
    pub const VF_FLOW_KNOB: &str = "VF_FLOW_KNOB";
    /// `component` must name exactly one of builtin, exec, python.
    pub const VF_FLOW_COMPONENT: &str = "VF_FLOW_COMPONENT";
    /// A built-in class that does not exist, is of another family than the node's kind, or
    /// gets a parameter it does not take or of the wrong shape (the catalog, `catalog`).
    pub const VF_FLOW_BUILTIN: &str = "VF_FLOW_BUILTIN";
}

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The flow must not run.
    Error,
    /// Legal but almost certainly a mistake.
    Warning,
}

/// One problem in a Flow, addressed by path (e.g. `spec.nodes[2].join.quorum`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Stable code; never derived from the message (ERR-3).
    pub code: String,
    /// Where in the document, in the resource's camelCase spelling.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub remedy: String,
}

impl Diagnostic {
    /// An error diagnostic.
    pub fn error(
        code: &str,
        path: impl Into<String>,
        message: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code: code.to_owned(),
            path: path.into(),
            message: message.into(),
            remedy: remedy.into(),
        }
    }

    /// A warning diagnostic.
    pub fn warning(
        code: &str,
        path: impl Into<String>,
        message: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, path, message, remedy)
        }
    }

    /// Whether it stops the flow.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    /// `error[CODE] at path: message` and the remedy on the next line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{sev}[{}] at {}: {}", self.code, self.path, self.message)?;
        if !self.remedy.is_empty() {
            write!(f, "\n  remedy: {}", self.remedy)?;
        }
        Ok(())
    }
}

/// Whether any diagnostic is an error.
pub fn has_errors(diagnostics: &[Diagnostic]) -> bool {
    diagnostics.iter().any(Diagnostic::is_error)
}

/// Validates a whole document: header, name and spec.
pub fn validate_flow(doc: &FlowDocument) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if doc.api_version != API_VERSION {
        out.push(Diagnostic::error(
            codes::VF_FLOW_SCHEMA,
            "apiVersion",
            format!(
                "apiVersion is '{}', expected '{API_VERSION}'.",
                doc.api_version
            ),
            format!("Set apiVersion: {API_VERSION}."),
        ));
    }
    if doc.kind != KIND {
        out.push(Diagnostic::error(
            codes::VF_FLOW_SCHEMA,
            "kind",
            format!("kind is '{}', expected '{KIND}'.", doc.kind),
            format!("Set kind: {KIND}."),
        ));
    }
    if doc.metadata.name.trim().is_empty() {
        out.push(Diagnostic::error(
            codes::VF_FLOW_NAME,
            "metadata.name",
            "The flow has no name; it is the flow id in every broker name and message id.",
            "Set metadata.name to a short DNS-style name, e.g. toy-calculator.",
        ));
    }
    out.extend(validate_spec(&doc.spec));
    check_secret_refs(&doc.spec, &mut out);
    check_nul(doc, &mut out);
    out
}

/// Every `urlFrom.secretKeyRef` names a Secret and a key Kubernetes accepts (a DNS-1123
/// subdomain; a config key of letters, digits, `-`, `_`, `.`): the workloads carry the
/// reference as it is, and the API server refuses a pod whose reference it cannot resolve —
/// the flow would be admitted and never start.
fn check_secret_refs(spec: &crate::model::FlowSpec, out: &mut Vec<Diagnostic>) {
    let refs = [
        (
            "spec.broker",
            spec.broker.as_ref().and_then(|b| b.url_from.as_ref()),
        ),
        (
            "spec.payloadStore",
            spec.payload_store
                .as_ref()
                .and_then(|p| p.url_from.as_ref()),
        ),
        (
            "spec.runtimeStore",
            spec.runtime_store
                .as_ref()
                .and_then(|r| r.url_from.as_ref()),
        ),
    ];
    for (section, from) in refs {
        let Some(from) = from else { continue };
        let r = &from.secret_key_ref;
        let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let name_ok = r.name.len() <= 253
            && r.name.bytes().next().is_some_and(alnum)
            && r.name.bytes().last().is_some_and(alnum)
            && r.name.bytes().all(|b| alnum(b) || b == b'-' || b == b'.');
        if !name_ok {
            out.push(Diagnostic::error(
                codes::VF_FLOW_SCHEMA,
                format!("{section}.urlFrom.secretKeyRef.name"),
                format!(
                    "'{}' is not a Secret name Kubernetes accepts (lowercase letters, digits, '-' \
                     and '.', starting and ending with a letter or digit, at most 253).",
                    r.name
                ),
                "Name the Secret that holds the URL.",
            ));
        }
        let key_ok = !r.key.is_empty()
            && r.key.len() <= 253
            && r.key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !key_ok {
            out.push(Diagnostic::error(
                codes::VF_FLOW_SCHEMA,
                format!("{section}.urlFrom.secretKeyRef.key"),
                format!(
                    "'{}' is not a Secret key Kubernetes accepts (letters, digits, '-', '_' and \
                     '.', at most 253).",
                    r.key
                ),
                "Name the key of the Secret whose value is the URL, e.g. url.",
            ));
        }
    }
}

/// No text of the document holds a NUL character: names, ids, URLs, classes, partition keys
/// and component commands become environment values, program arguments, broker names and
/// Kubernetes fields, none of which can carry one — a worker given it could never start.
/// Node `params` are exempt: they travel as JSON (`VF_NODE_PARAMS_JSON`), where a NUL is an
/// escape like any other, and a node may take one as data.
fn check_nul(doc: &FlowDocument, out: &mut Vec<Diagnostic>) {
    fn walk(v: &serde_json::Value, path: &str, out: &mut Vec<Diagnostic>) {
        let at = |key: &str| {
            if path.is_empty() {
                key.to_owned()
            } else {
                format!("{path}.{key}")
            }
        };
        match v {
            serde_json::Value::String(s) if s.contains('\0') => out.push(Diagnostic::error(
                codes::VF_FLOW_SCHEMA,
                if path.is_empty() { "(document)" } else { path },
                "The text holds a NUL character, which no environment variable, program \
                 argument or Kubernetes field can carry.",
                "Remove the NUL character (\\u0000).",
            )),
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}[{i}]"), out);
                }
            }
            serde_json::Value::Object(map) => {
                for (key, item) in map {
                    if key.contains('\0') {
                        out.push(Diagnostic::error(
                            codes::VF_FLOW_SCHEMA,
                            at(&key.replace('\0', "\\u0000")),
                            "The key holds a NUL character, which no Kubernetes field can carry.",
                            "Remove the NUL character (\\u0000).",
                        ));
                    }
                    let in_node = path.strip_prefix("spec.nodes[").is_some_and(|rest| {
                        rest.strip_suffix(']')
                            .is_some_and(|i| i.bytes().all(|b| b.is_ascii_digit()))
                    });
                    if in_node && key == "params" {
                        continue;
                    }
                    walk(item, &at(key), out);
                }
            }
            _ => {}
        }
    }
    if let Ok(tree) = serde_json::to_value(doc) {
        walk(&tree, "", out);
    }
}

/// Validates a spec: structure first, then each node, then warnings.
pub fn validate_spec(spec: &FlowSpec) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let nodes = &spec.nodes;
    // A duplicated name resolves to its first declaration (the duplicate is reported).
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        index.entry(n.name.as_str()).or_insert(i);
    }

    check_broker(spec, &mut out);
    check_names(nodes, &mut out);
    check_edges(nodes, &index, &mut out);
    check_cycles(nodes, &index, &mut out);
    let children = children_of(nodes);
    for (i, node) in nodes.iter().enumerate() {
        check_node(spec.flow_type, i, node, children[i], &mut out);
    }
    out
}

/// Flow-level broker settings: the stream age bound's range.
fn check_broker(spec: &FlowSpec, out: &mut Vec<Diagnostic>) {
    let age = spec.broker.as_ref().and_then(|b| b.stream_max_age_seconds);
    if let Some(age) =
        age.filter(|a| !(MIN_STREAM_MAX_AGE_SECONDS..=MAX_STREAM_MAX_AGE_SECONDS).contains(a))
    {
        out.push(Diagnostic::error(
            codes::VF_FLOW_KNOB,
            "spec.broker.streamMaxAgeSeconds",
            format!(
                "streamMaxAgeSeconds={age} is outside {MIN_STREAM_MAX_AGE_SECONDS}..={MAX_STREAM_MAX_AGE_SECONDS}: \
                 JetStream refuses an age bound below a stream's duplicate window (120 s)."
            ),
            "Set at least 120 seconds, or remove streamMaxAgeSeconds for no age bound.",
        ));
    }
}

/// Number of children of each node (by index), counting only edges to known nodes.
fn children_of(nodes: &[NodeDecl]) -> Vec<usize> {
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for n in nodes {
        for p in &n.parents {
            *count.entry(p.as_str()).or_default() += 1;
        }
    }
    nodes
        .iter()
        .map(|n| count.get(n.name.as_str()).copied().unwrap_or(0))
        .collect()
}

fn node_path(i: usize) -> String {
    format!("spec.nodes[{i}]")
}

/// Unique, non-empty names that stay distinct after both encodings (NAME-1).
fn check_names(nodes: &[NodeDecl], out: &mut Vec<Diagnostic>) {
    if !nodes.iter().any(|n| n.kind == NodeKind::Producer) {
        out.push(Diagnostic::error(
            codes::VF_GRAPH_NO_PRODUCER,
            "spec.nodes",
            "The flow has no producer, so nothing would ever enter it.",
            "Add a node with kind: producer and make the others descend from it.",
        ));
    }
    let mut first_at: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if n.name.is_empty() {
            out.push(Diagnostic::error(
                codes::VF_FLOW_NAME,
                format!("{}.name", node_path(i)),
                "A node has an empty name.",
                "Give every node a unique, non-empty name.",
            ));
            continue;
        }
        if let Some(&first) = first_at.get(n.name.as_str()) {
            out.push(Diagnostic::error(
                codes::VF_GRAPH_DUPLICATE_NAME,
                format!("{}.name", node_path(i)),
                format!(
                    "Two or more nodes are named '{}' (first at {}).",
                    n.name,
                    node_path(first)
                ),
                "Node names must be unique within a flow: rename one of them.",
            ));
        } else {
            first_at.insert(&n.name, i);
        }
    }
    for enc in [Encoding::Broker, Encoding::Kubernetes] {
        let mut groups: BTreeMap<String, Vec<(usize, &str)>> = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if first_at.get(n.name.as_str()) == Some(&i) {
                groups
                    .entry(enc.encode(&n.name))
                    .or_default()
                    .push((i, &n.name));
            }
        }
        for (physical, members) in groups {
            if members.len() < 2 {
                continue;
            }
            let mut names: Vec<&str> = members.iter().map(|(_, n)| *n).collect();
            names.sort_unstable();
            let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
            out.push(Diagnostic::error(
                codes::VF_GRAPH_NAME_COLLISION,
                format!("{}.name", node_path(members[1].0)),
                format!(
                    "Node names [{}] all encode to the {} name '{physical}'.",
                    quoted.join(", "),
                    enc.as_str()
                ),
                "Rename one of them so the encoded names differ (avoid names that differ only by punctuation, case, or beyond 63 characters).",
            ));
        }
    }
}

/// Parents must exist; producers have none; consumers are nobody's parent; every other node
/// has at least one.
fn check_edges(nodes: &[NodeDecl], index: &HashMap<&str, usize>, out: &mut Vec<Diagnostic>) {
    for (i, n) in nodes.iter().enumerate() {
        match n.kind {
            NodeKind::Producer if !n.parents.is_empty() => out.push(Diagnostic::error(
                codes::VF_GRAPH_PRODUCER_WITH_PARENTS,
                format!("{}.parents", node_path(i)),
                format!(
                    "Producer '{}' has parents; producers are the sources of the flow.",
                    n.name
                ),
                "Remove its parents, or make it a processor.",
            )),
            NodeKind::Processor | NodeKind::Consumer if n.parents.is_empty() => {
                out.push(Diagnostic::error(
                    codes::VF_GRAPH_NOT_A_PRODUCER,
                    format!("{}.parents", node_path(i)),
                    format!("'{}' is a root of the graph but is not a producer.", n.name),
                    "Every parentless node must be a producer; give it a parent, or make it one.",
                ))
            }
            _ => {}
        }
        let mut seen: Vec<&str> = Vec::new();
        for (j, p) in n.parents.iter().enumerate() {
            let path = format!("{}.parents[{j}]", node_path(i));
            match index.get(p.as_str()) {
                None => out.push(Diagnostic::error(
                    codes::VF_GRAPH_UNKNOWN_PARENT,
                    path,
                    format!(
                        "'{}' names parent '{p}', which is not a node of this flow.",
                        n.name
                    ),
                    suggest(p, nodes),
                )),
                Some(&pi) if nodes[pi].kind == NodeKind::Consumer => out.push(Diagnostic::error(
                    codes::VF_GRAPH_CONSUMER_WITH_CHILDREN,
                    path,
                    format!(
                        "'{}' names consumer '{p}' as its parent; consumers have no output.",
                        n.name
                    ),
                    format!("Make '{p}' a processor, or take the data from one of its parents."),
                )),
                Some(_) if seen.contains(&p.as_str()) => out.push(Diagnostic::error(
                    codes::VF_GRAPH_UNKNOWN_PARENT,
                    path,
                    format!("'{}' lists parent '{p}' twice.", n.name),
                    "List each parent once; the order of parents is the order of inputs.",
                )),
                Some(_) => {}
            }
            seen.push(p);
        }
    }
}

/// "Did you mean" for an unknown parent.
fn suggest(name: &str, nodes: &[NodeDecl]) -> String {
    let lower = name.to_lowercase();
    let close = nodes.iter().map(|n| n.name.as_str()).find(|n| {
        let l = n.to_lowercase();
        l == lower || l.contains(&lower) || lower.contains(&l)
    });
    match close {
        Some(c) => format!("Did you mean '{c}'? Parents must name nodes of the same flow."),
        None => "Parents must name nodes of the same flow; fix the name or add the node.".into(),
    }
}

/// Reports each cycle once, naming its nodes in order.
fn check_cycles(nodes: &[NodeDecl], index: &HashMap<&str, usize>, out: &mut Vec<Diagnostic>) {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let mut mark = vec![Mark::New; nodes.len()];
    for start in 0..nodes.len() {
        if mark[start] != Mark::New {
            continue;
        }
        // Iterative DFS over parent edges: (node, next parent to visit).
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = Mark::Active;
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            let parents = &nodes[v].parents;
            if *next >= parents.len() {
                mark[v] = Mark::Done;
                stack.pop();
                continue;
            }
            let p = &parents[*next];
            *next += 1;
            let Some(&u) = index.get(p.as_str()) else {
                continue;
            };
            match mark[u] {
                Mark::New => {
                    mark[u] = Mark::Active;
                    stack.push((u, 0));
                }
                Mark::Active => {
                    let from = stack.iter().position(|&(w, _)| w == u).unwrap_or(0);
                    let mut names: Vec<&str> = stack[from..]
                        .iter()
                        .map(|&(w, _)| nodes[w].name.as_str())
                        .collect();
                    names.reverse();
                    names.push(nodes[u].name.as_str());
                    out.push(Diagnostic::error(
                        codes::VF_GRAPH_CYCLE,
                        format!("{}.parents", node_path(u)),
                        format!("The computation graph has a cycle: {}.", names.join(" -> ")),
                        "A flow must be a DAG: find the node that is (indirectly) its own parent and break the loop.",
                    ));
                }
                Mark::Done => {}
            }
        }
    }
}

/// Per-node knobs: each only where it means something, each in range.
fn check_node(
    flow_type: FlowType,
    i: usize,
    n: &NodeDecl,
    children: usize,
    out: &mut Vec<Diagnostic>,
) {
    let at = |field: &str| format!("{}.{field}", node_path(i));
    let knob = |out: &mut Vec<Diagnostic>, field: &str, message: String, remedy: &str| {
        out.push(Diagnostic::error(
            codes::VF_FLOW_KNOB,
            at(field),
            message,
            remedy,
        ));
    };

    // component: exactly one of builtin / exec / python.
    let c = &n.component;
    let set = [c.builtin.is_some(), c.exec.is_some(), c.python.is_some()]
        .iter()
        .filter(|b| **b)
        .count();
    if set != 1 {
        out.push(Diagnostic::error(
            codes::VF_FLOW_COMPONENT,
            at("component"),
            format!(
                "'{}' names {set} components; exactly one of builtin, exec or python is required.",
                n.name
            ),
            "Keep exactly one of component.builtin, component.exec, component.python.",
        ));
    }
    match c.builtin.as_deref() {
        Some("") => knob(
            out,
            "component.builtin",
            format!("'{}' has an empty builtin class.", n.name),
            "Name a built-in node, e.g. videoflow.processors.IdentityProcessor.",
        ),
        Some(class) => {
            let params = n.params.as_ref().filter(|p| p.is_object());
            for p in crate::catalog::check_builtin(class, n.kind, params) {
                out.push(Diagnostic::error(
                    codes::VF_FLOW_BUILTIN,
                    at(&p.field),
                    format!("'{}': {}", n.name, p.message),
                    p.remedy,
                ));
            }
        }
        None => {}
    }
    // The first word is the program the worker starts (VF_COMPONENT_COMMAND_JSON): an empty
    // one is no program, and the worker would refuse it at every start.
    if let Some(exec) = &c.exec
        && exec.command.first().is_none_or(String::is_empty)
    {
        knob(
            out,
            "component.exec.command",
            format!(
                "'{}' has an exec component without a command (or whose first word, the \
                 program, is empty).",
                n.name
            ),
            "Set component.exec.command to the program to run, then its arguments.",
        );
    }
    if let Some(py) = &c.python
        && py.class.trim().is_empty()
    {
        knob(
            out,
            "component.python.class",
            format!("'{}' has a python component without a class.", n.name),
            "Set component.python.class to the node's import path.",
        );
    }

    if let Some(params) = &n.params
        && !params.is_object()
    {
        knob(
            out,
            "params",
            format!("'{}' has params that are not an object.", n.name),
            "Write params as a mapping of parameter names to values.",
        );
    }
    if let Some(r) = n.replicas {
        if r < 1 {
            knob(
                out,
                "replicas",
                format!(
                    "'{}' has replicas={r}; at least one replica is needed.",
                    n.name
                ),
                "Set replicas to 1 or more.",
            );
        } else if r > 1 && n.kind != NodeKind::Processor {
            knob(
                out,
                "replicas",
                format!(
                    "'{}' is a {} with replicas={r}; only processors are replicated.",
                    n.name,
                    n.kind.as_str()
                ),
                "Remove replicas, or move the work into a replicated processor.",
            );
        }
    }
    if n.finite.is_some() && n.kind != NodeKind::Producer {
        knob(
            out,
            "finite",
            format!("'{}' sets finite, which only describes producers.", n.name),
            "Remove finite from this node.",
        );
    }
    if n.replayable == Some(true)
        && let Some((message, fix)) = replayable_refusal(n)
    {
        knob(out, "replayable", message, &fix);
    }
    if n.idempotent.is_some() && n.kind != NodeKind::Consumer {
        knob(
            out,
            "idempotent",
            format!(
                "'{}' sets idempotent, which only applies to consumers.",
                n.name
            ),
            "Remove idempotent from this node.",
        );
    }
    if n.delivery.is_some() && n.kind == NodeKind::Producer {
        knob(
            out,
            "delivery",
            format!(
                "Producer '{}' sets delivery; a producer has no inputs to retry or dead-letter.",
                n.name
            ),
            "Set delivery on the nodes that consume it.",
        );
    }
    if let Some(credit) = &n.credit {
        if n.parents.len() != 1 {
            knob(
                out,
                "credit",
                format!(
                    "'{}' has {} parents and sets credit; only a single-parent node's credit is asked for (a join's comes from its join policy).",
                    n.name,
                    n.parents.len()
                ),
                "Remove credit; for a join, size join.maxPending instead.",
            );
        }
        if let Some(m) = credit.messages
            && !(1..=MAX_CREDIT_MESSAGES).contains(&m)
        {
            knob(
                out,
                "credit.messages",
                format!(
                    "'{}' asks for credit.messages={m}; it must lie in 1..={MAX_CREDIT_MESSAGES}.",
                    n.name
                ),
                "Ask for between 1 and 4096 un-acked messages per replica, or remove credit.messages.",
            );
        }
        if let Some(b) = credit.bytes
            && b < 1
        {
            knob(
                out,
                "credit.bytes",
                format!("'{}' asks for credit.bytes={b}.", n.name),
                "Ask for at least one byte, or remove credit.bytes for no byte bound.",
            );
        }
    }
    if let Some(gpu) = &n.gpu {
        if !crate::catalog::takes_gpu(n.kind, n.component.builtin.as_deref()) {
            knob(
                out,
                "gpu",
                format!(
                    "'{}' is a {} with gpu settings; only processors and the video readers \
                     (which decode on the GPU) run on GPUs.",
                    n.name,
                    n.kind.as_str()
                ),
                "Remove gpu, or move the GPU work into a processor.",
            );
        }
        if let Some(count) = gpu.count
            && count < 1
        {
            knob(
                out,
                "gpu.count",
                format!("'{}' asks for gpu.count={count}.", n.name),
                "Ask for at least one device, or remove gpu.",
            );
        }
        if let Some(profile) = &gpu.mig_profile {
            if gpu.resource_name.is_some() {
                knob(
                    out,
                    "gpu.migProfile",
                    format!(
                        "'{}' sets both gpu.resourceName and gpu.migProfile.",
                        n.name
                    ),
                    "Keep one: migProfile claims nvidia.com/mig-<profile>; resourceName names any other resource.",
                );
            } else if !crate::model::is_mig_profile(profile) {
                knob(
                    out,
                    "gpu.migProfile",
                    format!(
                        "'{}' asks for gpu.migProfile={}, which is not a MIG profile.",
                        n.name,
                        crate::partition::py_repr_str(profile)
                    ),
                    "Use the profile nvidia-smi mig -lgip prints, e.g. 1g.18gb or 3g.40gb+me.",
                );
            }
        }
    }
    for (a, asset) in n.assets.iter().enumerate() {
        if asset.path.is_empty() {
            knob(
                out,
                &format!("assets[{a}].path"),
                format!("'{}' declares an asset with an empty path.", n.name),
                "Give the absolute path of the file inside the worker.",
            );
        }
        if let Some(sha) = &asset.sha256
            && (sha.len() != 64
                || !sha
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()))
        {
            knob(
                out,
                &format!("assets[{a}].sha256"),
                format!(
                    "'{}' declares asset '{}' with sha256 '{sha}', which is not 64 lowercase hex digits.",
                    n.name, asset.path
                ),
                "Use the output of `sha256sum <file>`.",
            );
        }
    }

    // Partitioning and joins.
    let parents = n.parents.len();
    if let Some(by) = &n.partition_by {
        if n.kind == NodeKind::Producer {
            knob(
                out,
                "partitionBy",
                format!(
                    "Producer '{}' sets partitionBy; partitioning routes inputs, and a producer has none.",
                    n.name
                ),
                "Set partitionBy on the consuming node.",
            );
        } else if by.is_empty() {
            knob(
                out,
                "partitionBy",
                format!("'{}' has an empty partitionBy.", n.name),
                "Use trace_id (recommended for joins) or a metadata field name, or remove it.",
            );
        }
    }
    if parents > 1 && n.nb_tasks() > 1 && n.partition_by.as_deref().is_none_or(str::is_empty) {
        out.push(Diagnostic::error(
            codes::VF_GRAPH_UNPARTITIONED_JOIN,
            at("partitionBy"),
            format!(
                "{} joins {parents} parents with nb_tasks={} but no partition_by, so replicas would receive the two halves of a join on different workers.",
                n.name,
                n.nb_tasks()
            ),
            "Set partitionBy: trace_id (recommended for joins), or replicas: 1.",
        ));
    }
    if let Some(decl) = &n.join {
        if n.kind == NodeKind::Producer {
            out.push(Diagnostic::error(
                codes::VF_FLOW_JOIN_POLICY,
                at("join"),
                format!(
                    "Producer '{}' sets a join policy; it has no inputs to join.",
                    n.name
                ),
                "Remove join from this node.",
            ));
        } else {
            let policy = JoinPolicy::from_decl(decl);
            for p in policy.problems(&n.name, &n.parents) {
                out.push(Diagnostic::error(
                    codes::VF_FLOW_JOIN_POLICY,
                    at(&format!("join.{}", p.field)),
                    p.message,
                    p.remedy,
                ));
            }
            if policy.mode == JoinMode::Time && parents > 1 && n.nb_tasks() > 1 {
                out.push(Diagnostic::error(
                    codes::VF_FLOW_JOIN_POLICY,
                    at("replicas"),
                    format!(
                        "{}: a time-aligned join (join_policy mode='time') requires nb_tasks == 1, got {}",
                        n.name,
                        n.nb_tasks()
                    ),
                    "Run time joins on one replica; scale the stages around it instead.",
                ));
            }
            if parents < 2 {
                out.push(Diagnostic::warning(codes::VF_FLOW_JOIN_POLICY, at("join"), format!("'{}' has {parents} parent(s), so its join policy is never used (JOIN-3 passthrough).", n.name), "Remove join, or add the parents it should join."));
            }
            if flow_type == FlowType::Batch
                && decl.missing == Some(crate::model::MissingPolicy::Drop)
                && decl.timeout_seconds.is_some()
            {
                out.push(Diagnostic::warning(codes::VF_FLOW_JOIN_POLICY, at("join.missing"), format!("'{}' drops incomplete groups after a timeout in a batch flow, so slow inputs are lost silently.", n.name), "Use missing: wait (the batch default) unless losing late members is intended."));
            }
        }
    }

    // Output nobody reads (warning, as in the reference).
    if n.kind != NodeKind::Consumer && children == 0 && !n.name.is_empty() {
        out.push(Diagnostic::warning(
            codes::VF_GRAPH_OUTPUT_UNREAD,
            format!("{}.name", node_path(i)),
            format!(
                "Nothing consumes the output of {}, so its results are computed and discarded.",
                n.name
            ),
            "Wire a child to it, or drop it from the graph.",
        ));
    }
}

/// MSGID-6: only a producer whose source has a position can resume from one; anything else
/// declaring `replayable: true` would be a live source minting offset-shaped ids. The
/// message and the fix, or `None` when the node may declare it.
fn replayable_refusal(n: &NodeDecl) -> Option<(String, String)> {
    Some(if n.kind != NodeKind::Producer {
        (
            format!(
                "'{}' sets replayable, which only describes producers.",
                n.name
            ),
            "Remove replayable from this node.".to_owned(),
        )
    } else if n.component.python.is_some() {
        (
            format!(
                "'{}' sets replayable on a python component; the Python worker takes it from \
                 the class.",
                n.name
            ),
            "Declare `replayable = True` (and `seek(offset)`) on the producer class, and remove \
             replayable from the node."
                .to_owned(),
        )
    } else if let Some(class) = n.component.builtin.as_deref() {
        if crate::catalog::replayable(class) {
            return None;
        }
        (
            format!(
                "'{}' sets replayable, but {class} is a live source with no position to resume \
                 from.",
                n.name
            ),
            "Remove replayable: a restarted live source publishes under a new epoch (MSGID-5). \
             The replayable built-ins are IntProducer, VideoFileReader, ImageProducer, \
             ImageFolderReader and SyntheticFrameProducer."
                .to_owned(),
        )
    } else {
        (
            format!(
                "'{}' sets replayable on an exec component, which has no seek in the component \
                 protocol.",
                n.name
            ),
            "Remove replayable: exec producers are live sources (MSGID-5).".to_owned(),
        )
    })
}
