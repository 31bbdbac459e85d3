//! Reading a Flow file for an offline render: the resource as `kubectl apply` would send it.
//!
//! Strict where the API server is strict: unknown or mistyped fields under `spec` are errors
//! with their paths (core `load`), as server-side field validation would report them. Lenient
//! where a cluster object differs from a hand-written file: `metadata` may carry a uid,
//! labels or resourceVersion and `status` may be present (`kubectl get flow -o yaml` output
//! renders too, owner references included).

use videoflow_core::validate::{Diagnostic, codes};

use crate::crd::Flow;

/// Parses YAML or JSON text into a [`Flow`]; `Err` carries every problem found.
pub fn flow_from_text(text: &str) -> Result<Flow, Vec<Diagnostic>> {
    if let Err(diags) = videoflow_core::load::parse_flow(text) {
        let relevant: Vec<Diagnostic> = diags
            .into_iter()
            .filter(|d| !(d.code == codes::VF_FLOW_UNKNOWN_FIELD && outside_spec(&d.path)))
            .collect();
        // Only a schema problem stops the load (with what validation found besides, so the
        // author sees everything at once); a file that merely fails validation loads, and
        // admission reports its problems.
        let schema = relevant.iter().any(|d| {
            [codes::VF_FLOW_SCHEMA, codes::VF_FLOW_UNKNOWN_FIELD].contains(&d.code.as_str())
        });
        if schema {
            return Err(relevant);
        }
    }
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        vec![Diagnostic::error(
            codes::VF_FLOW_SCHEMA,
            e.path().to_string(),
            e.inner().to_string(),
            "Fix the value to match the Flow schema (`videoflow-operator crd` prints it).",
        )]
    })
}

/// Fields a cluster object carries that a Flow file does not declare.
fn outside_spec(path: &str) -> bool {
    ["metadata.", "status"]
        .iter()
        .any(|prefix| path.starts_with(prefix))
}
