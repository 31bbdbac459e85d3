//! Admission: everything that must hold before anything is created (design §7).
//!
//! Pure. Validation (core), the autoscaling refusal (core `admit_autoscaling`, SCALE-6) and
//! rendering all run, and their problems are collected together, so a Flow with two unrelated
//! mistakes gets one `Admitted=False` naming both instead of a fix-one-find-the-next loop.
//! Any problem means nothing is applied: the rendered objects are only handed out when the
//! list is empty.

use std::fmt;

use videoflow_core::model::{FlowSpec, FlowType};
use videoflow_core::scaling::{NodeScaleFacts, admit_autoscaling, renders_as_job};
use videoflow_core::validate::Diagnostic;

use crate::crd::Flow;
use crate::render::{RenderConfig, RenderError, Rendered, render};

/// One reason a Flow is not admitted: a line of the `Admitted=False` message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Stable code (`VF_GRAPH_UNPARTITIONED_JOIN`, `VF_CAPABILITY`, ...).
    pub code: String,
    /// Where in the resource, in its camelCase spelling (`spec.nodes[2].partitionBy`).
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub remedy: String,
}

impl fmt::Display for Problem {
    /// `[CODE] path: message Remedy: remedy` — one line per problem in the condition.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}: {}", self.code, self.path, self.message)?;
        if !self.remedy.is_empty() {
            write!(f, " Remedy: {}", self.remedy)?;
        }
        Ok(())
    }
}

impl From<Diagnostic> for Problem {
    fn from(d: Diagnostic) -> Self {
        Problem {
            code: d.code,
            path: d.path,
            message: d.message,
            remedy: d.remedy,
        }
    }
}

impl From<&RenderError> for Problem {
    fn from(e: &RenderError) -> Self {
        let (path, message) = match e {
            RenderError::MissingName => ("metadata.name".to_owned(), e.to_string()),
            RenderError::NoBroker => ("spec.broker".to_owned(), e.to_string()),
            RenderError::NoStoreUrl { path } => ((*path).to_owned(), e.to_string()),
            RenderError::MissingComponentImage { path, .. } => (path.clone(), e.to_string()),
            RenderError::InvalidField { path, message } => (path.clone(), message.clone()),
            RenderError::NameCollision { .. } | RenderError::NameTooLong { .. } => {
                ("spec.nodes".to_owned(), e.to_string())
            }
            RenderError::Invalid(_) | RenderError::Serialize(_) => {
                ("spec".to_owned(), e.to_string())
            }
        };
        Problem {
            code: e.code().code().to_owned(),
            path,
            message,
            remedy: e.remedy(),
        }
    }
}

/// Admits `flow`: its rendered objects when every check passes, else every problem found.
///
/// Validation errors come first (in the validator's order), then the autoscaling refusals;
/// warnings never block admission.
pub fn admit(flow: &Flow, config: &RenderConfig) -> Result<Rendered, Vec<Problem>> {
    let scaling = autoscaling_problems(&flow.spec);
    match render(flow, config) {
        Ok(rendered) if scaling.is_empty() => Ok(rendered),
        Ok(_) => Err(scaling),
        Err(RenderError::Invalid(diags)) => Err(diags
            .into_iter()
            .filter(Diagnostic::is_error)
            .map(Problem::from)
            .chain(scaling)
            .collect()),
        Err(e) => Err(std::iter::once(Problem::from(&e)).chain(scaling).collect()),
    }
}

/// SCALE-6 on the declarations: autoscaling asked for a processor that renders as a Job.
///
/// Read from the declarations rather than the compiled records so it is reported even when
/// validation fails too (compilation stops at the first invalid graph).
pub fn autoscaling_problems(spec: &FlowSpec) -> Vec<Problem> {
    let flow_wide = spec.autoscaling.as_ref();
    let flow_enabled = flow_wide.is_some_and(|a| a.enabled);
    let gpu_autoscaling = flow_wide.is_some_and(|a| a.gpu);
    spec.nodes
        .iter()
        .enumerate()
        .filter_map(|(i, node)| {
            let own = node.autoscaling.as_ref().and_then(|a| a.enabled);
            if !own.unwrap_or(flow_enabled) {
                return None;
            }
            let kind = node.kind.as_str();
            let finite = node.finite.unwrap_or(true);
            let facts = NodeScaleFacts {
                kind,
                parents: node.parents.len(),
                nb_tasks: i64::from(node.nb_tasks()),
                partition_by: node.partition_by.as_deref(),
                renders_as_job: renders_as_job(kind, finite, spec.flow_type),
                uses_gpu: node.gpu.is_some(),
                gpu_autoscaling,
            };
            let flow_type: FlowType = spec.flow_type;
            admit_autoscaling(&node.name, flow_type, &facts)
                .err()
                .map(|e| Problem {
                    code: e.code().to_owned(),
                    path: if own.is_some() {
                        format!("spec.nodes[{i}].autoscaling.enabled")
                    } else {
                        "spec.autoscaling.enabled".to_owned()
                    },
                    message: e.to_string(),
                    remedy: e.remedy(),
                })
        })
        .collect()
}

/// The `Admitted=False` message: how many problems, then one line each.
pub fn problems_message(problems: &[Problem]) -> String {
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    format!(
        "{} problem(s), nothing was created:\n{}",
        problems.len(),
        lines.join("\n")
    )
}
