//! Why a scaling decision was refused: an invalid rule (`VF_CONFIG`) or an autoscaling request
//! a node cannot honour (`VF_CAPABILITY`).
//!
//! The messages are 1.0.4's texts, character for character (SCALE-1, -3, -5, -6), so an
//! operator log reads the same whichever runtime refused; floats are written as Python's
//! `repr` writes them (`0.0`, `-1.0`).

use thiserror::Error;

use crate::errors::{ErrorCode, VfError};
use crate::model::FlowType;
use crate::partition::{py_float, py_repr_str};

use super::DEFAULT_TARGET_LAG_PER_REPLICA;

/// Every refusal of §19.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ScalingError {
    /// SCALE-1: a replica must absorb some lag.
    #[error("target_lag_per_replica must be >= 1, got {0}.")]
    TargetLagBelowOne(i64),
    /// SCALE-1: a processor at zero replicas never observes its parents' end-of-stream.
    #[error("min_replicas must be >= 1, got {0}.")]
    MinReplicasBelowOne(i64),
    /// SCALE-1: an empty range.
    #[error("max_replicas ({max}) is below min_replicas ({min}).")]
    MaxBelowMin {
        /// `max_replicas`.
        max: i64,
        /// `min_replicas`.
        min: i64,
    },
    /// SCALE-2: nothing to size demand from.
    #[error("observe_demand was given no parents to evaluate.")]
    NoParents,
    /// SCALE-3: the objective's fraction is outside `(0, 1]`.
    #[error("min_delivered_fraction must be in (0, 1], got {}.", py_float(*.0))]
    DeliveredFraction(f64),
    /// SCALE-3: a control window that is not positive.
    #[error("control_window_seconds must be positive, got {}.", py_float(*.0))]
    ControlWindow(f64),
    /// SCALE-3: a negative stabilization window.
    #[error("stabilization_seconds must not be negative, got {}.", py_float(*.0))]
    Stabilization(f64),
    /// SCALE-3: the replica count that produced the sample must be a real fleet.
    #[error("current_replicas must be >= 1, got {0}.")]
    CurrentReplicasBelowOne(i64),
    /// SCALE-5: a demand decision never asks for fewer than zero replicas.
    #[error("desired replicas must be >= 0, got {0}.")]
    NegativeDesired(i64),
    /// SCALE-6: autoscaling requested for a processor that renders as a Kubernetes Job.
    #[error(
        "Node {} cannot be autoscaled: in a {} flow it renders as a Kubernetes Job, and a Job's \
         parallelism is fixed at creation — it is not what a scaler scales (a ScaledObject drives \
         the /scale subresource of a Deployment or StatefulSet; a Job has none).",
        py_repr_str(node),
        flow_type.as_str()
    )]
    JobAutoscaling {
        /// The node's name.
        node: String,
        /// The flow's type (every BATCH node renders as a Job).
        flow_type: FlowType,
    },
}

impl ScalingError {
    /// The class: `VF_CONFIG` for an invalid rule, `VF_CAPABILITY` for the Job refusal.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ScalingError::JobAutoscaling { .. } => ErrorCode::Capability,
            _ => ErrorCode::Config,
        }
    }

    /// The protocol code, `"VF_CONFIG"` or `"VF_CAPABILITY"`.
    pub fn code(&self) -> &'static str {
        self.error_code().code()
    }

    /// What to do about it: 1.0.4's remedy text.
    pub fn remedy(&self) -> String {
        match self {
            ScalingError::TargetLagBelowOne(_) => format!(
                "Set the messages of lag one replica should absorb before another is added \
                 (the rendered scaler uses {DEFAULT_TARGET_LAG_PER_REPLICA})."
            ),
            ScalingError::MinReplicasBelowOne(_) => "Keep at least one replica: a processor \
                 scaled to zero cannot observe its parents' end-of-stream, so the flow never \
                 completes."
                .to_owned(),
            ScalingError::MaxBelowMin { .. } => {
                "Raise --max-replicas to at least the node's nb_tasks, or lower nb_tasks."
                    .to_owned()
            }
            ScalingError::NoParents => "Pass one observation per parent of the node (its \
                 NodeSpec.parents); a processor always has at least one."
                .to_owned(),
            ScalingError::DeliveredFraction(_) => "Declare the fraction of offered frames one \
                 control window must deliver, e.g. 0.9."
                .to_owned(),
            ScalingError::ControlWindow(_) => "Declare the window the counters are read over \
                 (the scaler polling interval)."
                .to_owned(),
            ScalingError::Stabilization(_) => "Use 0 for no stabilization, or the seconds a \
                 replica takes to become ready."
                .to_owned(),
            ScalingError::CurrentReplicasBelowOne(_) => {
                "Pass the replica count that produced the sample.".to_owned()
            }
            ScalingError::NegativeDesired(_) => {
                "Pass the replica count a demand decision produced.".to_owned()
            }
            ScalingError::JobAutoscaling { node, .. } => format!(
                "Drop --autoscaling and set nb_tasks on {} to the parallelism you want, or run \
                 the flow as REALTIME, where processors render as Deployments that KEDA can scale.",
                py_repr_str(node)
            ),
        }
    }

    /// The typed error a CLI or operator reports: message, remedy and, for the Job refusal,
    /// the `node` and `flow_type` context 1.0.4 attaches.
    pub fn to_vf_error(&self) -> VfError {
        let error = VfError::new(self.error_code(), self.to_string()).with_remedy(self.remedy());
        match self {
            ScalingError::JobAutoscaling { node, flow_type } => error
                .with_context("node", node.as_str())
                .with_context("flow_type", flow_type.as_str()),
            _ => error,
        }
    }
}

impl From<ScalingError> for VfError {
    fn from(error: ScalingError) -> Self {
        error.to_vf_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_texts_are_the_references() {
        assert_eq!(
            ScalingError::TargetLagBelowOne(0).to_string(),
            "target_lag_per_replica must be >= 1, got 0."
        );
        assert_eq!(
            ScalingError::MaxBelowMin { max: 2, min: 5 }.to_string(),
            "max_replicas (2) is below min_replicas (5)."
        );
        assert_eq!(
            ScalingError::DeliveredFraction(0.0).to_string(),
            "min_delivered_fraction must be in (0, 1], got 0.0."
        );
        assert_eq!(
            ScalingError::Stabilization(-1.0).to_string(),
            "stabilization_seconds must not be negative, got -1.0."
        );
        assert_eq!(ScalingError::NoParents.code(), "VF_CONFIG");
    }

    #[test]
    fn job_refusal_is_a_capability_error_with_context() {
        let e = ScalingError::JobAutoscaling {
            node: "det".into(),
            flow_type: FlowType::Batch,
        };
        assert_eq!(e.code(), "VF_CAPABILITY");
        assert!(
            e.to_string()
                .starts_with("Node 'det' cannot be autoscaled: in a batch flow it renders")
        );
        let vf = e.to_vf_error();
        assert_eq!(vf.exit_code(), 2);
        assert_eq!(vf.context["node"], "det");
        assert_eq!(vf.context["flow_type"], "batch");
        assert!(
            vf.remedy_text()
                .is_some_and(|r| r.contains("nb_tasks on 'det'"))
        );
    }
}
