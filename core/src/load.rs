//! Parsing a Flow file's text (YAML or JSON) into a [`FlowDocument`], with diagnostics.
//!
//! Plain serde stops at the first type error and silently ignores unknown fields; for a file
//! a person wrote, both are wrong. Here a type error becomes a diagnostic carrying its path,
//! and every unknown field (usually a typo such as `replica:` for `replicas:`) becomes one
//! too, so the author sees them all at once — as the API server's strict field validation
//! reports them on `kubectl apply`. Takes text, not a path: the core crate does no I/O.

use serde_json::Value as Json;

use crate::model::FlowDocument;
use crate::validate::{Diagnostic, codes, validate_flow};

/// How many mistyped values one pass over a file reports before giving up (each costs a
/// re-parse of the document).
const MAX_SCHEMA_PASSES: usize = 64;

/// One step of a path into the document.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Parses text into a document. `Err` holds at least one error diagnostic: every mistyped
/// value and unknown field, each with its path, and then what validation finds in the rest.
///
/// How every schema problem is found in one call: serde stops at the first mistyped value,
/// so each one is reported, removed from the document and the document read again, until it
/// reads. A value inside a list is removed with its slot, and later paths into that list are
/// mapped back to the file's own positions. Validation then runs on what is left — unless a
/// whole list element had to go (a node missing `name`, say), where its absence would only
/// produce confusing follow-on problems.
pub fn parse_flow(text: &str) -> Result<FlowDocument, Vec<Diagnostic>> {
    let mut tree: Json = match serde_yaml::from_str(text) {
        Ok(tree) => tree,
        Err(e) => {
            return Err(vec![Diagnostic::error(
                codes::VF_FLOW_SCHEMA,
                "(document)",
                e.to_string(),
                "Fix the YAML or JSON syntax at the line shown.",
            )]);
        }
    };
    let mut removed = Removed::default();
    let mut schema: Vec<Diagnostic> = Vec::new();
    let mut unknown: Vec<Vec<Step>> = Vec::new();
    let mut element_removed = false;
    let mut last_removed: Option<(Vec<Step>, String)> = None;
    let mut passes = 0;
    let doc = loop {
        passes += 1;
        let mut seen: Vec<Vec<Step>> = Vec::new();
        let parsed = {
            let mut record = |path: serde_ignored::Path<'_>| seen.push(ignored_steps(&path));
            let ignored = serde_ignored::Deserializer::new(tree.clone(), &mut record);
            serde_path_to_error::deserialize::<_, FlowDocument>(ignored)
        };
        for steps in seen {
            let original = removed.original(&steps);
            if !unknown.contains(&original) {
                unknown.push(original);
            }
        }
        match parsed {
            Ok(doc) => break Some(doc),
            Err(e) => {
                let steps = error_steps(e.path());
                let original = removed.original(&steps);
                let message = e.inner().to_string();
                // Removing a mistyped required field makes its parent "miss" it: that is
                // the same problem, already reported.
                let echo = last_removed.as_ref().is_some_and(|(parent, key)| {
                    *parent == original && message.contains(&format!("missing field `{key}`"))
                });
                if !echo {
                    schema.push(Diagnostic::error(
                        codes::VF_FLOW_SCHEMA,
                        render(&original),
                        message,
                        "Fix the value to match the Flow schema (`videoflow-operator crd` prints it).",
                    ));
                }
                if passes >= MAX_SCHEMA_PASSES || !remove(&mut tree, &steps) {
                    break None;
                }
                last_removed = None;
                match original.split_last() {
                    Some((Step::Index(_), _)) => {
                        element_removed = true;
                        removed.record(&original);
                    }
                    Some((Step::Key(k), parent)) => {
                        last_removed = Some((parent.to_vec(), k.clone()));
                    }
                    None => {}
                }
            }
        }
    };
    let mut diags = schema;
    let known = (!unknown.is_empty()).then(KnownFields::new);
    diags.extend(unknown.iter().map(|steps| {
        let path = render(steps);
        let hint = "Check the spelling against the Flow schema (`videoflow-operator crd` prints it); unknown fields are refused rather than ignored.";
        let remedy = match known.as_ref().and_then(|k| k.suggest(steps)) {
            Some(near) => format!("Did you mean '{near}'? {hint}"),
            None => hint.to_owned(),
        };
        Diagnostic::error(
            codes::VF_FLOW_UNKNOWN_FIELD,
            path.clone(),
            format!("Unknown field '{path}'."),
            remedy,
        )
    }));
    match doc {
        Some(doc) if diags.is_empty() => Ok(doc),
        Some(doc) if !element_removed => {
            diags.extend(validate_flow(&doc));
            Err(diags)
        }
        _ => Err(diags),
    }
}

/// The Flow schema's field names, for "did you mean" on an unknown field.
struct KnownFields {
    schema: Json,
}

impl KnownFields {
    fn new() -> Self {
        KnownFields {
            schema: serde_json::to_value(schemars::schema_for!(FlowDocument)).unwrap_or_default(),
        }
    }

    /// Follows `$ref` and the non-null branch of an optional (`anyOf`/`oneOf`).
    fn resolve<'a>(&'a self, mut node: &'a Json) -> &'a Json {
        for _ in 0..8 {
            if let Some(name) = node
                .get("$ref")
                .and_then(Json::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
            {
                match self.schema.get("$defs").and_then(|d| d.get(name)) {
                    Some(n) => node = n,
                    None => return node,
                }
                continue;
            }
            let branch = ["anyOf", "oneOf", "allOf"].iter().find_map(|k| {
                node.get(*k).and_then(Json::as_array).and_then(|alts| {
                    alts.iter()
                        .find(|a| a.get("type").and_then(Json::as_str) != Some("null"))
                })
            });
            match branch {
                Some(b) => node = b,
                None => return node,
            }
        }
        node
    }

    /// The known field closest to the last step of `steps`, among its parent's fields.
    fn suggest(&self, steps: &[Step]) -> Option<String> {
        let (Step::Key(word), parent) = steps.split_last()? else {
            return None;
        };
        let mut node = self.resolve(&self.schema);
        for step in parent {
            let next = match step {
                Step::Key(k) => node.get("properties").and_then(|p| p.get(k)),
                Step::Index(_) => node.get("items"),
            }?;
            node = self.resolve(next);
        }
        let props = node.get("properties").and_then(Json::as_object)?;
        crate::suggest::closest(word, props.keys().map(String::as_str)).map(str::to_owned)
    }
}

/// List slots removed so far, by the file's own path of the list, as the file's indexes.
#[derive(Debug, Default)]
struct Removed {
    slots: Vec<(Vec<Step>, usize)>,
}

impl Removed {
    /// Records that the element at `original` (a path in the file's coordinates ending in
    /// an index) was removed.
    fn record(&mut self, original: &[Step]) {
        if let Some((Step::Index(i), list)) = original.split_last() {
            self.slots.push((list.to_vec(), *i));
        }
    }

    /// Maps a path in the current (trimmed) document back to the file's positions.
    fn original(&self, steps: &[Step]) -> Vec<Step> {
        let mut out: Vec<Step> = Vec::with_capacity(steps.len());
        for step in steps {
            match step {
                Step::Index(i) => {
                    let mut gone: Vec<usize> = self
                        .slots
                        .iter()
                        .filter(|(list, _)| *list == out)
                        .map(|(_, r)| *r)
                        .collect();
                    gone.sort_unstable();
                    let mut idx = *i;
                    for r in gone {
                        if r <= idx {
                            idx += 1;
                        }
                    }
                    out.push(Step::Index(idx));
                }
                key => out.push(key.clone()),
            }
        }
        out
    }
}

/// Removes the value at `steps` (a field of an object or a list slot); `false` when there is
/// nothing removable there (the document itself).
fn remove(tree: &mut Json, steps: &[Step]) -> bool {
    let Some((last, parent)) = steps.split_last() else {
        return false;
    };
    let mut at = tree;
    for step in parent {
        let next = match (step, at) {
            (Step::Key(k), Json::Object(m)) => m.get_mut(k),
            (Step::Index(i), Json::Array(a)) => a.get_mut(*i),
            _ => None,
        };
        match next {
            Some(n) => at = n,
            None => return false,
        }
    }
    match (last, at) {
        (Step::Key(k), Json::Object(m)) => m.remove(k).is_some(),
        (Step::Index(i), Json::Array(a)) if *i < a.len() => {
            a.remove(*i);
            true
        }
        _ => false,
    }
}

fn error_steps(path: &serde_path_to_error::Path) -> Vec<Step> {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|s| match s {
            Segment::Seq { index } => Some(Step::Index(*index)),
            Segment::Map { key } => Some(Step::Key(key.clone())),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect()
}

/// An ignored field's path as steps.
fn ignored_steps(path: &serde_ignored::Path<'_>) -> Vec<Step> {
    use serde_ignored::Path;
    match path {
        Path::Root => Vec::new(),
        Path::Seq { parent, index } => {
            let mut v = ignored_steps(parent);
            v.push(Step::Index(*index));
            v
        }
        Path::Map { parent, key } => {
            let mut v = ignored_steps(parent);
            v.push(Step::Key(key.clone()));
            v
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => ignored_steps(parent),
    }
}

/// A path in the resource's spelling: `spec.nodes[0].replica`; `(document)` for the root.
fn render(steps: &[Step]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    if out.is_empty() {
        "(document)".to_owned()
    } else {
        out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_error_has_a_path() {
        let text = "apiVersion: videoflow.io/v1alpha1\nkind: Flow\nmetadata: {name: f}\nspec:\n  nodes:\n  - name: a\n    kind: producer\n    component: {builtin: videoflow.producers.IntProducer}\n    replicas: many\n";
        let diags = parse_flow(text).expect_err("must fail");
        assert_eq!(diags[0].code, codes::VF_FLOW_SCHEMA);
        assert_eq!(diags[0].path, "spec.nodes[0].replicas");
    }

    #[test]
    fn unknown_fields_are_reported_with_paths() {
        let text = "apiVersion: videoflow.io/v1alpha1\nkind: Flow\nmetadata: {name: f}\nspec:\n  nodes:\n  - name: a\n    kind: producer\n    replica: 2\n    component: {builtin: videoflow.producers.IntProducer}\n";
        let diags = parse_flow(text).expect_err("must fail");
        assert_eq!(diags[0].code, codes::VF_FLOW_UNKNOWN_FIELD);
        assert_eq!(diags[0].path, "spec.nodes[0].replica");
        assert!(
            diags[0].remedy.starts_with("Did you mean 'replicas'?"),
            "{}",
            diags[0].remedy
        );
        // The rest of the flow is validated too (it has no consumer).
        assert!(
            diags[1..]
                .iter()
                .all(|d| d.code != codes::VF_FLOW_UNKNOWN_FIELD)
        );
    }

    #[test]
    fn bad_enum_value_names_the_field() {
        let text = "apiVersion: videoflow.io/v1alpha1\nkind: Flow\nmetadata: {name: f}\nspec:\n  nodes:\n  - name: a\n    kind: procesor\n    component: {builtin: videoflow.processors.IdentityProcessor}\n";
        let diags = parse_flow(text).expect_err("must fail");
        assert_eq!(diags[0].path, "spec.nodes[0].kind");
        assert!(
            diags[0].message.contains("procesor"),
            "{}",
            diags[0].message
        );
    }

    /// The user's report: a wrong `spec.type` hid the unknown field `replica` below it, which
    /// hid the unknown parent below that. All three (and a second mistyped value inside a
    /// list) come out of one call, each with its path.
    #[test]
    fn every_schema_problem_and_the_graph_problems_come_at_once() {
        let text = "apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: f}
spec:
  type: stream
  nodes:
  - name: src
    kind: producer
    component: {builtin: videoflow.producers.IntProducer}
  - name: p
    kind: processor
    replica: 2
    parents: [src]
    component: {builtin: videoflow.processors.IdentityProcessor}
  - name: sink
    kind: consumer
    parents: [p, nope]
    replicas: many
    component: {builtin: videoflow.consumers.VoidConsumer}
";
        let diags = parse_flow(text).expect_err("must fail");
        let got: Vec<(&str, &str)> = diags
            .iter()
            .map(|d| (d.code.as_str(), d.path.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (codes::VF_FLOW_SCHEMA, "spec.nodes[2].replicas"),
                (codes::VF_FLOW_SCHEMA, "spec.type"),
                (codes::VF_FLOW_UNKNOWN_FIELD, "spec.nodes[1].replica"),
                (codes::VF_GRAPH_UNKNOWN_PARENT, "spec.nodes[2].parents[1]"),
            ],
            "{diags:#?}"
        );
        assert!(diags[1].message.contains("stream"), "{}", diags[1].message);
        assert!(
            diags[2].remedy.starts_with("Did you mean 'replicas'?"),
            "{}",
            diags[2].remedy
        );
    }

    /// A list element that cannot be read at all is dropped, and paths after it still name
    /// the file's own positions.
    #[test]
    fn paths_after_a_dropped_list_element_keep_their_file_positions() {
        let text = "apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: f}
spec:
  nodes:
  - {kind: producer, component: {builtin: videoflow.producers.IntProducer}}
  - {name: b, kind: consumr, component: {builtin: videoflow.consumers.VoidConsumer}}
  - {name: c, kind: consumer, colour: red, component: {builtin: videoflow.consumers.VoidConsumer}}
";
        let diags = parse_flow(text).expect_err("must fail");
        let got: Vec<(&str, &str)> = diags
            .iter()
            .map(|d| (d.code.as_str(), d.path.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (codes::VF_FLOW_SCHEMA, "spec.nodes[0]"),
                (codes::VF_FLOW_SCHEMA, "spec.nodes[1].kind"),
                (codes::VF_FLOW_UNKNOWN_FIELD, "spec.nodes[2].colour"),
            ],
            "{diags:#?}"
        );
    }
}
