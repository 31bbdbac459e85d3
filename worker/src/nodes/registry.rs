//! `VF_NODE_CLASS` + `VF_NODE_PARAMS_JSON` → a built node (START-1 steps 5 and 11).
//!
//! Classes are named as the Python tooling names them, so a flow compiled by 1.0.4 runs on
//! Rust workers: the module path its compiler emits (`videoflow.producers.basic.IntProducer`)
//! and the package re-export users write (`videoflow.producers.IntProducer`). Our own nodes
//! live under `videoflow.rs.*`, a namespace the reference does not use.

use serde_json::{Map, Value as Json};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::NodeKind;
use videoflow_core::partition::py_repr_str;

use super::aggregators::{
    CountAggregator, MaxAggregator, MinAggregator, MultiplicationAggregator, SumAggregator,
};
use super::consumers::{CommandlineConsumer, FileAppenderConsumer, JsonlSink, VoidConsumer};
use super::params::{ConsumerFlags, Family, Params};
use super::processors::{IdentityProcessor, JoinerProcessor, ServiceTimeProcessor};
use super::producers::{IntProducer, SyntheticFrameProducer};
use super::selfcheck::{Map as MapProcessor, SelfCheck};
use super::testing::{FailOn, FailingProducer, Hang, TickProducer};
use super::video;
use super::{Consumer, Processor, Producer};

/// Declarations a consumer carries in its params (1.0.4 `ConsumerNode.__init__`) that the
/// runtime needs and no `VF_*` variable repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConsumerOptions {
    /// `metadata=True`: `consume` gets each parent's metadata map instead of its payload
    /// (LOOP-4).
    pub metadata: bool,
    /// `idempotent=True`: skip groups whose `input_key` was already consumed (§14).
    pub idempotent: bool,
}

/// A node ready to open, in its family.
pub enum BuiltNode {
    /// A `ProducerNode`.
    Producer(Box<dyn Producer>),
    /// A `ProcessorNode`.
    Processor(Box<dyn Processor>),
    /// A `ConsumerNode`, with its declarations.
    Consumer {
        /// The node.
        node: Box<dyn Consumer>,
        /// What it declared in its params.
        options: ConsumerOptions,
    },
}

impl BuiltNode {
    /// The node's family as `VF_NODE_KIND` names it.
    pub fn kind(&self) -> NodeKind {
        match self {
            BuiltNode::Producer(_) => NodeKind::Producer,
            BuiltNode::Processor(_) => NodeKind::Processor,
            BuiltNode::Consumer { .. } => NodeKind::Consumer,
        }
    }
}

impl std::fmt::Debug for BuiltNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuiltNode::Consumer { options, .. } => f
                .debug_struct("BuiltNode::Consumer")
                .field("options", options)
                .finish_non_exhaustive(),
            other => write!(f, "BuiltNode::{:?}", other.kind()),
        }
    }
}

type Build = fn(&mut Params<'_>, ConsumerFlags) -> Result<BuiltNode, VfError>;

/// One built-in class: its canonical (module) path, the other names 1.0.4 imports it under
/// (the short package form, old spellings), its family.
struct Class {
    canonical: &'static str,
    aliases: &'static [&'static str],
    family: Family,
    build: Build,
}

fn producer(p: impl Producer + 'static) -> BuiltNode {
    BuiltNode::Producer(Box::new(p))
}

fn processor(p: impl Processor + 'static) -> BuiltNode {
    BuiltNode::Processor(Box::new(p))
}

fn consumer(c: impl Consumer + 'static, flags: ConsumerFlags) -> BuiltNode {
    BuiltNode::Consumer {
        node: Box::new(c),
        options: ConsumerOptions {
            metadata: flags.metadata,
            idempotent: flags.idempotent,
        },
    }
}

/// A boxed consumer (the video writers) with its declarations.
fn video_consumer(node: Box<dyn Consumer>, flags: ConsumerFlags) -> BuiltNode {
    BuiltNode::Consumer {
        node,
        options: ConsumerOptions {
            metadata: flags.metadata,
            idempotent: flags.idempotent,
        },
    }
}

const CLASSES: &[Class] = &[
    Class {
        canonical: "videoflow.producers.basic.IntProducer",
        aliases: &["videoflow.producers.IntProducer"],
        family: Family::Producer,
        build: |p, _| IntProducer::from_params(p).map(producer),
    },
    Class {
        // 1.0.4 keeps `VideofileReader = VideoFileReader` for old code, and its package
        // re-exports only that old name; the compiler emits the class's own name.
        canonical: "videoflow.producers.video.VideoFileReader",
        aliases: &[
            "videoflow.producers.video.VideofileReader",
            "videoflow.producers.VideofileReader",
        ],
        family: Family::Producer,
        build: |p, _| {
            video::file_reader(p, "videoflow.producers.video.VideoFileReader")
                .map(BuiltNode::Producer)
        },
    },
    Class {
        canonical: "videoflow.rs.producers.SyntheticFrameProducer",
        aliases: &[],
        family: Family::Producer,
        build: |p, _| SyntheticFrameProducer::from_params(p).map(producer),
    },
    Class {
        canonical: "videoflow.rs.producers.TickProducer",
        aliases: &[],
        family: Family::Producer,
        build: |p, _| TickProducer::from_params(p).map(producer),
    },
    Class {
        canonical: "videoflow.rs.producers.FailingProducer",
        aliases: &[],
        family: Family::Producer,
        build: |p, _| FailingProducer::from_params(p).map(producer),
    },
    Class {
        canonical: "videoflow.processors.basic.IdentityProcessor",
        aliases: &["videoflow.processors.IdentityProcessor"],
        family: Family::Processor,
        build: |p, _| IdentityProcessor::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.processors.basic.JoinerProcessor",
        aliases: &["videoflow.processors.JoinerProcessor"],
        family: Family::Processor,
        build: |p, _| JoinerProcessor::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.processors.aggregators.SumAggregator",
        aliases: &["videoflow.processors.SumAggregator"],
        family: Family::Processor,
        build: |_, _| Ok(processor(SumAggregator::default())),
    },
    Class {
        canonical: "videoflow.processors.aggregators.MultiplicationAggregator",
        aliases: &["videoflow.processors.MultiplicationAggregator"],
        family: Family::Processor,
        build: |_, _| Ok(processor(MultiplicationAggregator::default())),
    },
    Class {
        canonical: "videoflow.processors.aggregators.CountAggregator",
        aliases: &["videoflow.processors.CountAggregator"],
        family: Family::Processor,
        build: |_, _| Ok(processor(CountAggregator::default())),
    },
    Class {
        canonical: "videoflow.processors.aggregators.MaxAggregator",
        aliases: &["videoflow.processors.MaxAggregator"],
        family: Family::Processor,
        build: |_, _| Ok(processor(MaxAggregator::default())),
    },
    Class {
        canonical: "videoflow.processors.aggregators.MinAggregator",
        aliases: &["videoflow.processors.MinAggregator"],
        family: Family::Processor,
        build: |_, _| Ok(processor(MinAggregator::default())),
    },
    Class {
        canonical: "videoflow.rs.processors.ServiceTimeProcessor",
        aliases: &[],
        family: Family::Processor,
        build: |p, _| ServiceTimeProcessor::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.rs.processors.FailOn",
        aliases: &[],
        family: Family::Processor,
        build: |p, _| FailOn::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.rs.processors.Hang",
        aliases: &[],
        family: Family::Processor,
        build: |p, _| Hang::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.rs.processors.Map",
        aliases: &[],
        family: Family::Processor,
        build: |p, _| MapProcessor::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.consumers.basic.CommandlineConsumer",
        aliases: &["videoflow.consumers.CommandlineConsumer"],
        family: Family::Consumer,
        build: |p, f| CommandlineConsumer::from_params(p).map(|c| consumer(c, f)),
    },
    Class {
        canonical: "videoflow.consumers.basic.VoidConsumer",
        aliases: &["videoflow.consumers.VoidConsumer"],
        family: Family::Consumer,
        build: |_, f| Ok(consumer(VoidConsumer, f)),
    },
    Class {
        canonical: "videoflow.consumers.basic.FileAppenderConsumer",
        aliases: &["videoflow.consumers.FileAppenderConsumer"],
        family: Family::Consumer,
        build: |p, f| FileAppenderConsumer::from_params(p).map(|c| consumer(c, f)),
    },
    Class {
        canonical: "videoflow.producers.video.VideoUrlReader",
        aliases: &[],
        family: Family::Producer,
        build: |p, _| {
            video::url_reader(p, "videoflow.producers.video.VideoUrlReader")
                .map(BuiltNode::Producer)
        },
    },
    Class {
        canonical: "videoflow.producers.video.VideoDeviceReader",
        aliases: &[],
        family: Family::Producer,
        build: |p, _| {
            video::device_reader(p, "videoflow.producers.video.VideoDeviceReader")
                .map(BuiltNode::Producer)
        },
    },
    Class {
        canonical: "videoflow.consumers.video.VideofileWriter",
        aliases: &["videoflow.consumers.VideofileWriter"],
        family: Family::Consumer,
        build: |p, f| {
            video::reference_writer(p, "videoflow.consumers.video.VideofileWriter")
                .map(|node| video_consumer(node, f))
        },
    },
    Class {
        canonical: "videoflow.rs.consumers.VideoFileWriter",
        aliases: &[],
        family: Family::Consumer,
        build: |p, f| {
            video::h264_writer(p, "videoflow.rs.consumers.VideoFileWriter")
                .map(|node| video_consumer(node, f))
        },
    },
    Class {
        canonical: "videoflow.rs.consumers.JsonlSink",
        aliases: &[],
        family: Family::Consumer,
        build: |p, f| JsonlSink::from_params(p).map(|c| consumer(c, f)),
    },
    Class {
        canonical: "videoflow.rs.consumers.SelfCheck",
        aliases: &[],
        family: Family::Consumer,
        build: |p, f| SelfCheck::from_params(p).map(|c| consumer(c, f)),
    },
];

fn lookup(class: &str) -> Option<&'static Class> {
    CLASSES
        .iter()
        .find(|c| c.canonical == class || c.aliases.contains(&class))
}

/// Every built-in class by its canonical path (the short package forms are accepted too).
pub fn known_classes() -> Vec<&'static str> {
    CLASSES.iter().map(|c| c.canonical).collect()
}

/// The canonical path of `class` (itself or its short package form); `None` if unknown.
pub fn canonical_class(class: &str) -> Option<&'static str> {
    lookup(class).map(|c| c.canonical)
}

fn family_kind(family: Family) -> NodeKind {
    match family {
        Family::Producer => NodeKind::Producer,
        Family::Processor => NodeKind::Processor,
        Family::Consumer => NodeKind::Consumer,
    }
}

/// Builds the node `class` with `params`, checked against `VF_NODE_KIND` = `kind`.
///
/// In 1.0.4's order (START-1): an unknown class or bad params (`VF_CONFIG`, naming the class
/// or the parameter) before the kind check; a class of another family is `VF_NODE_CONTRACT`
/// (exit 2) with 1.0.4's text, naming the class by its canonical module path as Python's
/// `type(node).__module__` does.
pub fn build_node(
    class: &str,
    kind: NodeKind,
    params: &Map<String, Json>,
) -> Result<BuiltNode, VfError> {
    let Some(entry) = lookup(class) else {
        return Err(unknown_class(class));
    };
    let mut reader = Params::new(entry.canonical, params);
    let flags = reader.base(entry.family)?;
    let node = (entry.build)(&mut reader, flags)?;
    reader.finish()?;
    if family_kind(entry.family) != kind {
        return Err(VfError::new(
            ErrorCode::NodeContract,
            format!(
                "VF_NODE_KIND={} requires a {}, but VF_NODE_CLASS ({}) is not one.",
                py_repr_str(kind.as_str()),
                family_kind_name(kind),
                entry.canonical
            ),
        )
        .with_remedy(
            "These two are set together by the compiler — redeploy the flow rather than \
             editing the ConfigMap by hand.",
        )
        .with_context("expected", family_kind_name(kind))
        .with_context("actual", entry.canonical));
    }
    Ok(node)
}

fn family_kind_name(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Producer => "ProducerNode",
        NodeKind::Processor => "ProcessorNode",
        NodeKind::Consumer => "ConsumerNode",
    }
}

fn unknown_class(class: &str) -> VfError {
    let known = known_classes();
    VfError::new(
        ErrorCode::Config,
        format!(
            "VF_NODE_CLASS ({}) is not a built-in node class of this worker.",
            py_repr_str(class)
        ),
    )
    .with_remedy(format!(
        "Use one of: {} (or its short package form, e.g. videoflow.producers.IntProducer), or \
         run the class as an exec or python component.",
        known.join(", ")
    ))
    .with_context("variable", "VF_NODE_CLASS")
    .with_context("class", class)
    .with_context("known_classes", known)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_to_canonical_paths() {
        for c in CLASSES {
            assert_eq!(canonical_class(c.canonical), Some(c.canonical));
            for alias in c.aliases {
                assert_eq!(canonical_class(alias), Some(c.canonical));
            }
        }
    }

    #[test]
    fn every_class_builds_from_defaults_or_fails_only_on_required_params() {
        for c in CLASSES {
            let kind = family_kind(c.family);
            match build_node(c.canonical, kind, &Map::new()) {
                Ok(node) => assert_eq!(node.kind(), kind),
                Err(e) => {
                    assert_eq!(e.code, ErrorCode::Config, "{}: {e}", c.canonical);
                    let without_video =
                        cfg!(not(feature = "video")) && e.message.contains("without video");
                    assert!(
                        e.message.contains("requires parameter") || without_video,
                        "{e}"
                    );
                }
            }
        }
    }
}
