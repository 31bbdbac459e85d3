//! Parsing a Flow file's text (YAML or JSON) into a [`FlowDocument`], with diagnostics.
//!
//! Plain serde stops at the first type error and silently ignores unknown fields; for a file
//! a person wrote, both are wrong. Here a type error becomes a diagnostic carrying its path,
//! and every unknown field (usually a typo such as `replica:` for `replicas:`) becomes one
//! too, so the author sees them all at once — as the API server's strict field validation
//! reports them on `kubectl apply`. Takes text, not a path: the core crate does no I/O.

use crate::model::FlowDocument;
use crate::validate::{Diagnostic, codes, validate_flow};

/// Parses text into a document. `Err` holds at least one error diagnostic.
pub fn parse_flow(text: &str) -> Result<FlowDocument, Vec<Diagnostic>> {
    let mut unknown: Vec<String> = Vec::new();
    let de = serde_yaml::Deserializer::from_str(text);
    let mut record = |path: serde_ignored::Path<'_>| unknown.push(ignored_path(&path));
    let ignored = serde_ignored::Deserializer::new(de, &mut record);
    let parsed: Result<FlowDocument, _> = serde_path_to_error::deserialize(ignored);
    let mut diags: Vec<Diagnostic> = unknown
        .iter()
        .map(|path| {
            Diagnostic::error(
                codes::VF_FLOW_UNKNOWN_FIELD,
                path.clone(),
                format!("Unknown field '{path}'."),
                "Check the spelling against the Flow schema (`videoflow-operator crd` prints it); unknown fields are refused rather than ignored.",
            )
        })
        .collect();
    match parsed {
        Ok(doc) if diags.is_empty() => Ok(doc),
        Ok(_) => Err(diags),
        Err(e) => {
            let path = render_path(&e.path().to_string());
            let path = if path.is_empty() || path == "." {
                "(document)".to_owned()
            } else {
                path
            };
            diags.insert(
                0,
                Diagnostic::error(
                    codes::VF_FLOW_SCHEMA,
                    path,
                    e.inner().to_string(),
                    "Fix the value to match the Flow schema (`videoflow-operator crd` prints it).",
                ),
            );
            Err(diags)
        }
    }
}

/// Parses and validates: the one call the local runner and `validate` commands need. `Ok`
/// carries the document and its warnings; `Err` every diagnostic, errors and warnings.
pub fn load_flow(text: &str) -> Result<(FlowDocument, Vec<Diagnostic>), Vec<Diagnostic>> {
    let doc = parse_flow(text)?;
    let diags = validate_flow(&doc);
    if crate::validate::has_errors(&diags) {
        Err(diags)
    } else {
        Ok((doc, diags))
    }
}

/// Renders an ignored field's path in the resource's spelling: `spec.nodes[0].replica`.
fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        Path::Map { parent, key } => {
            let p = ignored_path(parent);
            if p.is_empty() {
                key.clone()
            } else {
                format!("{p}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => ignored_path(parent),
    }
}

/// serde's paths read `spec.nodes[2].join` already; only strip the `?` marks some
/// deserializers add for optional levels.
fn render_path(raw: &str) -> String {
    raw.replace('?', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_error_has_a_path() {
        let text = "apiVersion: videoflow.io/v1alpha1\nkind: Flow\nmetadata: {name: f}\nspec:\n  nodes:\n  - name: a\n    kind: producer\n    component: {builtin: x}\n    replicas: many\n";
        let diags = parse_flow(text).expect_err("must fail");
        assert_eq!(diags[0].code, codes::VF_FLOW_SCHEMA);
        assert_eq!(diags[0].path, "spec.nodes[0].replicas");
    }

    #[test]
    fn unknown_fields_are_reported_with_paths() {
        let text = "apiVersion: videoflow.io/v1alpha1\nkind: Flow\nmetadata: {name: f}\nspec:\n  nodes:\n  - name: a\n    kind: producer\n    replica: 2\n    component: {builtin: x}\n";
        let diags = parse_flow(text).expect_err("must fail");
        assert_eq!(diags.len(), 1);
        assert_eq!(diags[0].code, codes::VF_FLOW_UNKNOWN_FIELD);
        assert_eq!(diags[0].path, "spec.nodes[0].replica");
    }

    #[test]
    fn bad_enum_value_names_the_field() {
        let text = "apiVersion: videoflow.io/v1alpha1\nkind: Flow\nmetadata: {name: f}\nspec:\n  nodes:\n  - name: a\n    kind: procesor\n    component: {builtin: x}\n";
        let diags = parse_flow(text).expect_err("must fail");
        assert_eq!(diags[0].path, "spec.nodes[0].kind");
        assert!(
            diags[0].message.contains("procesor"),
            "{}",
            diags[0].message
        );
    }
}
