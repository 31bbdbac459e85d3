//! Which nodes may be autoscaled at all (SCALE-6).
//!
//! Eligibility is separate from demand: a node can have a backlog and still have to run at its
//! declared scale, because a scaler would break an invariant the runtime relies on (key
//! ownership, join assembly, a Job's fixed parallelism, whole-GPU claims). Every applicable
//! reason is reported so an operator sees all of them at once; none means a scaler may be
//! rendered. One case is an error rather than a skip: autoscaling requested for a processor
//! that renders as a Kubernetes Job ([`admit_autoscaling`]).

use std::fmt;

use crate::compile::NodeSpec;
use crate::model::{FlowType, NodeKind};

use super::error::ScalingError;

/// The facts about one node that decide whether it may be autoscaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeScaleFacts<'a> {
    /// `producer`, `processor` or `consumer` (`NodeSpec::kind`).
    pub kind: &'a str,
    /// How many parents the node reads.
    pub parents: usize,
    /// The declared replica count.
    pub nb_tasks: i64,
    /// The declared partition field; an empty one counts as none.
    pub partition_by: Option<&'a str>,
    /// Whether the workload renders as a Kubernetes Job (see [`renders_as_job`]).
    pub renders_as_job: bool,
    /// Whether the node runs on GPU.
    pub uses_gpu: bool,
    /// The deploy's `--gpu-autoscaling` opt-in.
    pub gpu_autoscaling: bool,
}

impl<'a> NodeScaleFacts<'a> {
    /// The facts of a compiled node in a flow of `flow_type`, with the flow's GPU opt-in.
    pub fn of(spec: &'a NodeSpec, flow_type: FlowType, gpu_autoscaling: bool) -> Self {
        NodeScaleFacts {
            kind: &spec.kind,
            parents: spec.parents.len(),
            nb_tasks: spec.nb_tasks,
            partition_by: spec.partition_by.as_deref(),
            renders_as_job: renders_as_job(&spec.kind, spec.is_finite, flow_type),
            uses_gpu: spec.device_type == "gpu",
            gpu_autoscaling,
        }
    }

    fn declares_partition(&self) -> bool {
        self.partition_by.is_some_and(|field| !field.is_empty())
    }
}

/// Whether a node renders as a Kubernetes Job: every node of a BATCH flow, and a finite
/// producer of a REALTIME one (the workload renderer's predicate).
pub fn renders_as_job(kind: &str, is_finite: bool, flow_type: FlowType) -> bool {
    flow_type == FlowType::Batch || (kind == NodeKind::Producer.as_str() && is_finite)
}

/// One reason a node stays at its declared scale; `Display` writes 1.0.4's sentence.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FixedScaleReason {
    /// Only processors are autoscaled: a producer owns its source, a consumer runs at its
    /// declared `nb_tasks`.
    NotAProcessor {
        /// The node's kind.
        kind: String,
    },
    /// A processor without parents has no stream whose lag could drive a scaler.
    NoParents,
    /// `partition_by` at `nb_tasks > 1`: rehashing key ownership would double- or
    /// zero-process messages.
    Partitioned,
    /// `partition_by` at `nb_tasks = 1`: scaling would bind new replicas to one competing
    /// durable and split one key's history among unfenced states.
    PartitionIntent,
    /// More than one parent: a singleton join would become competing joins that cannot
    /// assemble groups.
    Join,
    /// Rendered as a Kubernetes Job, whose parallelism is not scalable.
    Job,
    /// GPU without the opt-in: each replica claims whole GPUs, so scale-out can strand pods.
    GpuWithoutOptIn,
}

impl fmt::Display for FixedScaleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FixedScaleReason::NotAProcessor { kind } => write!(
                f,
                "{kind} nodes are not autoscaled: only processors are (a producer owns its \
                 source and a consumer runs at its declared nb_tasks)."
            ),
            FixedScaleReason::NoParents => {
                f.write_str("the node has no parent stream whose lag could drive a scaler.")
            }
            FixedScaleReason::Partitioned => f.write_str(
                "the node is partitioned (partition_by with nb_tasks > 1): rehashing key \
                 ownership on a replica-count change would double- or zero-process messages, \
                 so it runs at a fixed scale.",
            ),
            FixedScaleReason::PartitionIntent => f.write_str(
                "the node declares partition_by: a replica count of 1 does not erase that \
                 intent, and scaling it from 1 would bind every new replica to the same \
                 competing durable, splitting one key's history among independent, unfenced \
                 states — a partitioned node scales only by redeploying with the nb_tasks it \
                 should own its keys at.",
            ),
            FixedScaleReason::Join => f.write_str(
                "the node joins several parents at a single replica: a scaler would turn that \
                 singleton join into competing multi-worker joins, delivering the halves of \
                 one group to different replicas where neither can assemble it, and no runtime \
                 store advertises the elastic join state that would let group ownership follow \
                 the replica count.",
            ),
            FixedScaleReason::Job => f.write_str(
                "the node renders as a Kubernetes Job, whose parallelism is fixed when it is \
                 created and is not what a scaler scales: KEDA's ScaledObject and the HPA drive \
                 the /scale subresource of a Deployment or StatefulSet, and a Job has none.",
            ),
            FixedScaleReason::GpuWithoutOptIn => f.write_str(
                "the node runs on GPU and --gpu-autoscaling was not given: each extra replica \
                 claims whole GPUs, so lag-driven scale-out can strand pods Pending.",
            ),
        }
    }
}

/// SCALE-6: every reason this node stays at a fixed scale, in 1.0.4's order; empty means a
/// scaler may be rendered. One function for the renderer and any admission check, so the two
/// cannot drift.
pub fn fixed_scale_reasons(facts: &NodeScaleFacts<'_>) -> Vec<FixedScaleReason> {
    let mut reasons = Vec::new();
    if facts.kind != NodeKind::Processor.as_str() {
        reasons.push(FixedScaleReason::NotAProcessor {
            kind: facts.kind.to_owned(),
        });
    } else if facts.parents == 0 {
        reasons.push(FixedScaleReason::NoParents);
    }
    if facts.declares_partition() {
        reasons.push(if facts.nb_tasks > 1 {
            FixedScaleReason::Partitioned
        } else {
            FixedScaleReason::PartitionIntent
        });
    }
    if facts.parents > 1 {
        reasons.push(FixedScaleReason::Join);
    }
    if facts.renders_as_job {
        reasons.push(FixedScaleReason::Job);
    }
    if facts.uses_gpu && !facts.gpu_autoscaling {
        reasons.push(FixedScaleReason::GpuWithoutOptIn);
    }
    reasons
}

/// SCALE-6 admission when autoscaling is requested: the fixed-scale reasons to report (render
/// no scaler, keep the declared scale), or the refusal for a processor that renders as a Job.
///
/// Why that one is an error: a Job has no `/scale` subresource, so a `ScaledObject` for it
/// names a Deployment that never exists — the API server accepts it, the HPA cannot resolve it,
/// and the flow runs at `nb_tasks` forever while the operator believes it scales. Refused
/// before anything is applied (`VF_CAPABILITY`, exit 2).
pub fn admit_autoscaling(
    node: &str,
    flow_type: FlowType,
    facts: &NodeScaleFacts<'_>,
) -> Result<Vec<FixedScaleReason>, ScalingError> {
    if facts.renders_as_job && facts.kind == NodeKind::Processor.as_str() {
        return Err(ScalingError::JobAutoscaling {
            node: node.to_owned(),
            flow_type,
        });
    }
    Ok(fixed_scale_reasons(facts))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROCESSOR: NodeScaleFacts<'static> = NodeScaleFacts {
        kind: "processor",
        parents: 1,
        nb_tasks: 1,
        partition_by: None,
        renders_as_job: false,
        uses_gpu: false,
        gpu_autoscaling: false,
    };

    #[test]
    fn a_plain_processor_may_autoscale() {
        assert!(fixed_scale_reasons(&PROCESSOR).is_empty());
        assert_eq!(
            admit_autoscaling("p", FlowType::Realtime, &PROCESSOR),
            Ok(Vec::new())
        );
    }

    #[test]
    fn every_applicable_reason_is_reported() {
        let facts = NodeScaleFacts {
            parents: 2,
            nb_tasks: 3,
            partition_by: Some("cam"),
            uses_gpu: true,
            ..PROCESSOR
        };
        assert_eq!(
            fixed_scale_reasons(&facts),
            vec![
                FixedScaleReason::Partitioned,
                FixedScaleReason::Join,
                FixedScaleReason::GpuWithoutOptIn
            ]
        );
        let intent = NodeScaleFacts {
            partition_by: Some("trace_id"),
            ..PROCESSOR
        };
        assert_eq!(
            fixed_scale_reasons(&intent),
            vec![FixedScaleReason::PartitionIntent]
        );
        let empty_field = NodeScaleFacts {
            partition_by: Some(""),
            nb_tasks: 4,
            ..PROCESSOR
        };
        assert!(fixed_scale_reasons(&empty_field).is_empty());
        let opted_in = NodeScaleFacts {
            uses_gpu: true,
            gpu_autoscaling: true,
            ..PROCESSOR
        };
        assert!(fixed_scale_reasons(&opted_in).is_empty());
    }

    #[test]
    fn non_processors_and_parentless_processors() {
        let producer = NodeScaleFacts {
            kind: "producer",
            parents: 0,
            renders_as_job: true,
            ..PROCESSOR
        };
        let reasons = fixed_scale_reasons(&producer);
        assert_eq!(
            reasons.len(),
            2,
            "not a processor, and a Job; not 'no parents'"
        );
        assert!(
            reasons[0]
                .to_string()
                .starts_with("producer nodes are not autoscaled")
        );
        assert_eq!(reasons[1], FixedScaleReason::Job);
        assert_eq!(
            admit_autoscaling("src", FlowType::Realtime, &producer).map(|r| r.len()),
            Ok(2),
            "a Job-rendered producer is skipped, not refused"
        );
        let orphan = NodeScaleFacts {
            parents: 0,
            ..PROCESSOR
        };
        assert_eq!(
            fixed_scale_reasons(&orphan),
            vec![FixedScaleReason::NoParents]
        );
    }

    #[test]
    fn job_rendering() {
        assert!(renders_as_job("processor", false, FlowType::Batch));
        assert!(renders_as_job("producer", true, FlowType::Realtime));
        assert!(!renders_as_job("producer", false, FlowType::Realtime));
        assert!(!renders_as_job("processor", true, FlowType::Realtime));
        let batch = NodeScaleFacts {
            renders_as_job: true,
            ..PROCESSOR
        };
        let refusal = admit_autoscaling("det", FlowType::Batch, &batch).expect_err("a Job");
        assert_eq!(refusal.code(), "VF_CAPABILITY");
    }
}
