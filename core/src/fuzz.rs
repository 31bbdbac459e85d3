//! What the fuzz targets in `fuzz/` check, shared with the stable replay of every saved input
//! (`core/tests/fuzz_regressions.rs`, `worker/tests/fuzz_regressions.rs`), so a target and
//! its regression test run the same code and cannot drift. Not an API: each function panics,
//! naming what disagreed, when a property does not hold — that panic is the fuzzer's "crash".
//!
//! - [`envelope`], [`envelope_model`], [`payload`] — the envelope decoder and payload codec
//!   (WIRE-3): see [`crate::envelope::fuzz`].
//! - [`flow`] — the Flow loader, validator, compiler and environment renderer on one text.

use std::collections::BTreeMap;

use crate::compile::{CompiledFlow, NodeSpec, compile};
use crate::env::{EnvContext, EnvValue, render_node_env};
use crate::load::{load_flow, parse_flow};
use crate::model::FlowDocument;
use crate::validate::{has_errors, validate_flow};

pub use crate::envelope::fuzz::{PAYLOAD_TYPES, envelope, envelope_model, payload};

/// The broker URL [`flow`] renders with when the Flow names none (the local runner's case).
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// A Flow that compiled, with every node's rendered environment, for the worker-side checks
/// (`videoflow_worker::fuzz::flow`).
#[derive(Debug)]
pub struct Compiled {
    /// The document as parsed.
    pub doc: FlowDocument,
    /// Its compiled records.
    pub flow: CompiledFlow,
    /// Each node's environment, in the compiled (topological) order.
    pub envs: Vec<(String, BTreeMap<String, EnvValue>)>,
}

/// Every check on one Flow text (the `flow_text` and `flow_model` targets):
///
/// - `parse_flow` and `load_flow` never panic; a refusal carries at least one error;
///   `load_flow` accepts exactly what parses and validates without an error;
/// - validation and compilation are deterministic, and compilation succeeds exactly when
///   validation finds no error;
/// - an accepted document written back as YAML parses to the same document and compiles to
///   the same records (what `videoflow-worker compile` and the operator hand on);
/// - the compiled records survive `specs.json` (the provision job reads them back);
/// - every node's environment renders, with names and values a process environment can
///   hold (no `=` in a name, no NUL anywhere).
///
/// Returns what compiled, for the checks the worker adds.
pub fn flow(text: &str) -> Option<Compiled> {
    let parsed = parse_flow(text);
    let loaded = load_flow(text);
    let doc = match parsed {
        Ok(doc) => doc,
        Err(diags) => {
            assert!(
                has_errors(&diags),
                "a refused Flow names no error: {diags:?}"
            );
            assert!(loaded.is_err(), "load_flow took what parse_flow refused");
            return None;
        }
    };
    let diags = validate_flow(&doc);
    assert_eq!(diags, validate_flow(&doc), "validation is deterministic");
    assert_eq!(
        loaded.is_ok(),
        !has_errors(&diags),
        "load_flow accepts exactly what validates: {diags:?}"
    );
    let compiled = compile(&doc);
    assert_eq!(
        compiled.is_ok(),
        !has_errors(&diags),
        "compile succeeds exactly when validation finds no error: {diags:?}"
    );
    let flow = compiled.ok()?;
    assert_eq!(
        compile(&doc).ok().as_ref(),
        Some(&flow),
        "compile is deterministic"
    );
    written_back(&doc, &flow);
    specs_json(&flow.nodes);
    let ctx = EnvContext {
        default_nats_url: Some(DEFAULT_NATS_URL.to_owned()),
        health_port: 8080,
    };
    let mut envs = Vec::new();
    for node in &flow.nodes {
        let env = match render_node_env(&doc, &flow, &node.name, &ctx) {
            Ok(env) => env,
            Err(e) => panic!(
                "node {:?} compiled but its environment does not render: {e}",
                node.name
            ),
        };
        for (name, value) in &env {
            let text = match value {
                EnvValue::Literal(s) => s.as_str(),
                EnvValue::Secret { name, key } => {
                    assert!(
                        !name.is_empty() && !key.is_empty(),
                        "{name:?}: an empty Secret reference"
                    );
                    ""
                }
            };
            assert!(
                !name.is_empty() && !name.contains(['=', '\0']) && !text.contains('\0'),
                "node {:?}: {name:?}={text:?} cannot be put into a process environment",
                node.name
            );
        }
        envs.push((node.name.clone(), env));
    }
    Some(Compiled { doc, flow, envs })
}

/// The document written back as YAML reads as itself and compiles to the same records.
fn written_back(doc: &FlowDocument, flow: &CompiledFlow) {
    let yaml = match serde_yaml::to_string(doc) {
        Ok(yaml) => yaml,
        Err(e) => panic!("an accepted Flow cannot be written back: {e}"),
    };
    let again = match parse_flow(&yaml) {
        Ok(again) => again,
        Err(diags) => panic!("an accepted Flow written back is refused: {diags:?}\n{yaml}"),
    };
    assert_eq!(
        format!("{again:?}"),
        format!("{doc:?}"),
        "an accepted Flow written back reads differently:\n{yaml}"
    );
    assert_eq!(
        compile(&again).ok().as_ref(),
        Some(flow),
        "an accepted Flow written back compiles differently:\n{yaml}"
    );
}

/// The compiled records as `specs.json` (what the provision job reads) read back equal.
fn specs_json(nodes: &[NodeSpec]) {
    let json = match serde_json::to_string(nodes) {
        Ok(json) => json,
        Err(e) => panic!("compiled records cannot be written as specs.json: {e}"),
    };
    match serde_json::from_str::<Vec<NodeSpec>>(&json) {
        Ok(back) => assert_eq!(back, nodes, "specs.json reads back differently: {json}"),
        Err(e) => panic!("specs.json does not read back: {e}\n{json}"),
    }
}
