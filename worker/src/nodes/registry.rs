//! `VF_NODE_CLASS` + `VF_NODE_PARAMS_JSON` → a built node (START-1 steps 5 and 11).
//!
//! Classes are named as the Python tooling names them, so a flow compiled by 1.0.4 runs on
//! Rust workers: the module path its compiler emits (`videoflow.producers.basic.IntProducer`)
//! and the package re-export users write (`videoflow.producers.IntProducer`). Our own nodes
//! live under `videoflow.rs.*`, a namespace the reference does not use.

use serde_json::{Map, Value as Json};
use videoflow_core::catalog::{self, ClassSpec};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::NodeKind;
use videoflow_core::partition::py_repr_str;

use super::aggregators::{
    CountAggregator, MaxAggregator, MinAggregator, MultiplicationAggregator, SumAggregator,
};
use super::consumers::{
    CommandlineConsumer, FileAppenderConsumer, JsonlSink, KeyedJsonSink, VoidConsumer,
};
use super::params::{ConsumerFlags, Params};
use super::processors::{IdentityProcessor, JoinerProcessor, ServiceTimeProcessor};
use super::producers::{IntProducer, SyntheticFrameProducer};
use super::selfcheck::{Map as MapProcessor, SelfCheck};
use super::testing::{Constant, FailOn, FailingProducer, Hang, TickProducer};
use super::video;
use super::vision::annotators::BoundingBoxAnnotator;
use super::vision::transformers::{
    CropImageTransformer, MaskImageTransformer, ResizeImageTransformer,
};
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

/// The builder of one built-in class, by its canonical path. Its aliases, family and
/// parameters are in `videoflow_core::catalog`, which admission reads too; the tests below
/// fail when the two tables disagree.
struct Class {
    canonical: &'static str,
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
        build: |p, _| IntProducer::from_params(p).map(producer),
    },
    Class {
        // 1.0.4 keeps `VideofileReader = VideoFileReader` for old code, and its package
        // re-exports only that old name; the compiler emits the class's own name.
        canonical: "videoflow.producers.video.VideoFileReader",
        build: |p, _| {
            video::file_reader(p, "videoflow.producers.video.VideoFileReader")
                .map(BuiltNode::Producer)
        },
    },
    Class {
        canonical: "videoflow.producers.video.ImageProducer",
        build: |p, _| {
            video::image_producer(p, "videoflow.producers.video.ImageProducer")
                .map(BuiltNode::Producer)
        },
    },
    Class {
        canonical: "videoflow.producers.video.ImageFolderReader",
        build: |p, _| {
            video::image_folder_reader(p, "videoflow.producers.video.ImageFolderReader")
                .map(BuiltNode::Producer)
        },
    },
    Class {
        canonical: "videoflow.rs.producers.SyntheticFrameProducer",
        build: |p, _| SyntheticFrameProducer::from_params(p).map(producer),
    },
    Class {
        canonical: "videoflow.rs.producers.TickProducer",
        build: |p, _| TickProducer::from_params(p).map(producer),
    },
    Class {
        canonical: "videoflow.rs.producers.FailingProducer",
        build: |p, _| FailingProducer::from_params(p).map(producer),
    },
    Class {
        canonical: "videoflow.processors.basic.IdentityProcessor",
        build: |p, _| IdentityProcessor::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.processors.basic.JoinerProcessor",
        build: |p, _| JoinerProcessor::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.processors.aggregators.SumAggregator",
        build: |_, _| Ok(processor(SumAggregator::default())),
    },
    Class {
        canonical: "videoflow.processors.aggregators.MultiplicationAggregator",
        build: |_, _| Ok(processor(MultiplicationAggregator::default())),
    },
    Class {
        canonical: "videoflow.processors.aggregators.CountAggregator",
        build: |_, _| Ok(processor(CountAggregator::default())),
    },
    Class {
        canonical: "videoflow.processors.aggregators.MaxAggregator",
        build: |_, _| Ok(processor(MaxAggregator::default())),
    },
    Class {
        canonical: "videoflow.processors.aggregators.MinAggregator",
        build: |_, _| Ok(processor(MinAggregator::default())),
    },
    Class {
        canonical: "videoflow.processors.vision.transformers.ResizeImageTransformer",
        build: |p, _| ResizeImageTransformer::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.processors.vision.transformers.CropImageTransformer",
        build: |p, _| CropImageTransformer::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.processors.vision.transformers.MaskImageTransformer",
        build: |_, _| Ok(processor(MaskImageTransformer)),
    },
    Class {
        canonical: "videoflow.processors.vision.annotators.BoundingBoxAnnotator",
        build: |p, _| BoundingBoxAnnotator::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.rs.processors.ServiceTimeProcessor",
        build: |p, _| ServiceTimeProcessor::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.rs.processors.Constant",
        build: |p, _| Constant::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.rs.processors.FailOn",
        build: |p, _| FailOn::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.rs.processors.Hang",
        build: |p, _| Hang::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.rs.processors.Map",
        build: |p, _| MapProcessor::from_params(p).map(processor),
    },
    Class {
        canonical: "videoflow.consumers.basic.CommandlineConsumer",
        build: |p, f| CommandlineConsumer::from_params(p).map(|c| consumer(c, f)),
    },
    Class {
        canonical: "videoflow.consumers.basic.VoidConsumer",
        build: |_, f| Ok(consumer(VoidConsumer, f)),
    },
    Class {
        canonical: "videoflow.consumers.basic.FileAppenderConsumer",
        build: |p, f| FileAppenderConsumer::from_params(p).map(|c| consumer(c, f)),
    },
    Class {
        canonical: "videoflow.producers.video.VideoUrlReader",
        build: |p, _| {
            video::url_reader(p, "videoflow.producers.video.VideoUrlReader")
                .map(BuiltNode::Producer)
        },
    },
    Class {
        canonical: "videoflow.producers.video.VideoDeviceReader",
        build: |p, _| {
            video::device_reader(p, "videoflow.producers.video.VideoDeviceReader")
                .map(BuiltNode::Producer)
        },
    },
    Class {
        canonical: "videoflow.consumers.video.VideofileWriter",
        build: |p, f| {
            video::reference_writer(p, "videoflow.consumers.video.VideofileWriter")
                .map(|node| video_consumer(node, f))
        },
    },
    Class {
        canonical: "videoflow.rs.consumers.VideoFileWriter",
        build: |p, f| {
            video::h264_writer(p, "videoflow.rs.consumers.VideoFileWriter")
                .map(|node| video_consumer(node, f))
        },
    },
    Class {
        canonical: "videoflow.rs.consumers.JsonlSink",
        build: |p, f| JsonlSink::from_params(p).map(|c| consumer(c, f)),
    },
    Class {
        canonical: "videoflow.rs.consumers.KeyedJsonSink",
        build: |p, f| KeyedJsonSink::from_params(p).map(|c| consumer(c, f)),
    },
    Class {
        canonical: "videoflow.rs.consumers.SelfCheck",
        build: |p, f| SelfCheck::from_params(p).map(|c| consumer(c, f)),
    },
];

/// The catalog entry of `class` and its builder.
fn lookup(class: &str) -> Option<(&'static ClassSpec, &'static Class)> {
    let spec = catalog::lookup(class)?;
    let builder = CLASSES.iter().find(|c| c.canonical == spec.canonical)?;
    Some((spec, builder))
}

/// Every built-in class by its canonical path (the short package forms are accepted too).
pub fn known_classes() -> Vec<&'static str> {
    catalog::canonical_names()
}

/// The canonical path of `class` (itself or its short package form); `None` if unknown.
pub fn canonical_class(class: &str) -> Option<&'static str> {
    lookup(class).map(|(spec, _)| spec.canonical)
}

/// Whether the node needs FFmpeg, so `videoflow-worker` hands it to `videoflow-worker-video`:
/// a video class ([`video::CLASSES`]), or a SelfCheck that reads a written video back
/// (`video_file`). Unknown classes and unparsable params are not video work (the node's own
/// startup reports them).
pub fn needs_video(class: Option<&str>, params_json: Option<&str>) -> bool {
    let Some(class) = class.and_then(canonical_class) else {
        return false;
    };
    if video::CLASSES.contains(&class) {
        return true;
    }
    class == "videoflow.rs.consumers.SelfCheck"
        && params_json
            .and_then(|raw| serde_json::from_str::<Json>(raw).ok())
            .is_some_and(|p| !p["video_file"].is_null())
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
    let Some((spec, entry)) = lookup(class) else {
        return Err(unknown_class(class));
    };
    let mut reader = Params::new(spec.canonical, params);
    let node = build_with(spec, entry, &mut reader)?;
    reader.finish()?;
    if spec.kind != kind {
        return Err(VfError::new(
            ErrorCode::NodeContract,
            format!(
                "VF_NODE_KIND={} requires a {}, but VF_NODE_CLASS ({}) is not one.",
                py_repr_str(kind.as_str()),
                family_kind_name(kind),
                spec.canonical
            ),
        )
        .with_remedy(
            "These two are set together by the compiler — redeploy the flow rather than \
             editing the ConfigMap by hand.",
        )
        .with_context("expected", family_kind_name(kind))
        .with_context("actual", spec.canonical));
    }
    Ok(node)
}

/// Reads the family's and the class's parameters and builds the node.
fn build_with(
    spec: &ClassSpec,
    entry: &Class,
    reader: &mut Params<'_>,
) -> Result<BuiltNode, VfError> {
    let flags = reader.base(spec.kind)?;
    (entry.build)(reader, flags)
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
    let near = videoflow_core::suggest::closest(class, catalog::all_names())
        .map(|n| format!("Did you mean {}? ", py_repr_str(n)))
        .unwrap_or_default();
    VfError::new(
        ErrorCode::Config,
        format!(
            "VF_NODE_CLASS ({}) is not a built-in node class of this worker.",
            py_repr_str(class)
        ),
    )
    .with_remedy(format!(
        "{near}Use one of: {} (or its short package form, e.g. videoflow.producers.IntProducer), or \
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
    use videoflow_core::catalog::ParamType;

    #[test]
    fn aliases_resolve_to_canonical_paths() {
        for c in catalog::CLASSES {
            assert_eq!(canonical_class(c.canonical), Some(c.canonical));
            for alias in c.aliases {
                assert_eq!(canonical_class(alias), Some(c.canonical));
            }
        }
    }

    /// The worker builds exactly the catalog's classes: none the catalog lacks (admission
    /// would refuse a class the worker runs), none the catalog has that the worker cannot
    /// build (admission would pass a Flow whose pod then fails).
    #[test]
    fn the_worker_builds_exactly_the_catalog_classes() {
        let mut ours: Vec<&str> = CLASSES.iter().map(|c| c.canonical).collect();
        let mut listed: Vec<&str> = catalog::canonical_names();
        ours.sort_unstable();
        listed.sort_unstable();
        assert_eq!(ours, listed, "worker registry vs videoflow_core::catalog");
        ours.dedup();
        assert_eq!(ours.len(), CLASSES.len(), "a builder is listed twice");
    }

    /// The classes `videoflow-worker` hands to its video sibling are catalog classes, and
    /// every class of 1.0.4's video modules is among them (a missing one would be refused
    /// by the binary without FFmpeg instead of handed over).
    #[test]
    fn the_video_classes_are_the_catalog_video_modules_and_ours() {
        for class in video::CLASSES {
            assert_eq!(canonical_class(class), Some(*class), "{class}");
            assert!(needs_video(Some(class), None), "{class}");
        }
        for name in catalog::canonical_names() {
            let video_module = name.starts_with("videoflow.producers.video.")
                || name.starts_with("videoflow.consumers.video.");
            if video_module {
                assert!(video::CLASSES.contains(&name), "{name} is not handed over");
            }
        }
        let check = "videoflow.rs.consumers.SelfCheck";
        assert!(!needs_video(Some(check), Some(r#"{"expect": {}}"#)));
        assert!(needs_video(Some(check), Some(r#"{"video_file": "a.mp4"}"#)));
        assert!(
            needs_video(Some("videoflow.producers.VideofileReader"), None),
            "an alias"
        );
        assert!(!needs_video(Some("videoflow.producers.IntProducer"), None));
        assert!(!needs_video(Some("no.such.Class"), None));
        assert!(!needs_video(None, None));
    }

    /// A value of `ty` the builders accept, for a parameter they require.
    fn sample(class: &str, name: &str, ty: ParamType) -> Json {
        match (name, ty) {
            ("video_file", _) if class.ends_with("VideofileWriter") => "/tmp/x.avi".into(),
            ("video_file", _) => "/tmp/x.mp4".into(),
            ("expect", _) => serde_json::json!({"count": 1}),
            (_, ParamType::Int | ParamType::Number) => 1.into(),
            (_, ParamType::Bool) => false.into(),
            (_, ParamType::IntList) => serde_json::json!([]),
            (_, ParamType::Object) => serde_json::json!({}),
            _ => "/tmp/x".into(),
        }
    }

    /// The parameters each class's builder reads, and their shapes, are the catalog's.
    /// Required ones are found the way a user finds them: build, read the error's `param`,
    /// supply it, build again.
    /// A class built by [`build_supplied`]: the node (`None` in a build without video), the
    /// params it took and what it read.
    struct Supplied {
        node: Option<BuiltNode>,
        params: Map<String, Json>,
        reads: Vec<(&'static str, ParamType)>,
    }

    /// Builds `spec` as a user would: build, read the error's `param`, supply a sample of
    /// it, build again.
    fn build_supplied(spec: &ClassSpec) -> Supplied {
        #[cfg(feature = "video")]
        video::install();
        let Some((_, entry)) = lookup(spec.canonical) else {
            panic!("{}: no builder", spec.canonical);
        };
        let mut params = Map::new();
        loop {
            let mut reader = Params::new(spec.canonical, &params);
            let built = build_with(spec, entry, &mut reader);
            let reads = reader.reads().to_vec();
            match built {
                Ok(node) => {
                    return Supplied {
                        node: Some(node),
                        params,
                        reads,
                    };
                }
                Err(e) if e.message.contains("is a video node") => {
                    return Supplied {
                        node: None,
                        params,
                        reads: Vec::new(),
                    };
                }
                Err(e) => {
                    let missing = e
                        .context
                        .get("param")
                        .and_then(Json::as_str)
                        .filter(|p| !params.contains_key(*p))
                        .map(str::to_owned);
                    let Some(name) = missing else {
                        panic!("{}: {e}", spec.canonical);
                    };
                    let Some(ty) = spec.param(&name).map(|p| p.ty) else {
                        panic!("{}: requires '{name}', not in the catalog", spec.canonical);
                    };
                    let value = sample(spec.canonical, &name, ty);
                    params.insert(name, value);
                }
            }
        }
    }

    #[test]
    fn every_class_reads_exactly_the_catalog_params() {
        for spec in catalog::CLASSES {
            let Supplied { params, reads, .. } = build_supplied(spec);
            if reads.is_empty() && cfg!(not(feature = "video")) {
                continue;
            }
            let mut listed: Vec<(&str, ParamType)> = spec
                .params
                .iter()
                .chain(catalog::base_params(spec.kind))
                .map(|p| (p.name, p.ty))
                .collect();
            listed.sort_unstable_by_key(|(n, _)| *n);
            // A builder that reads raw JSON (`Any`) checks the shape itself; the catalog may
            // say which shape.
            let mut read: Vec<(&str, ParamType)> = reads
                .into_iter()
                .map(|(n, ty)| match (ty, listed.iter().find(|(l, _)| *l == n)) {
                    (ParamType::Any, Some((_, want))) => (n, *want),
                    _ => (n, ty),
                })
                .collect();
            read.sort_unstable_by_key(|(n, _)| *n);
            read.dedup();
            assert_eq!(read, listed, "{}: worker reads vs catalog", spec.canonical);
            for p in spec.params.iter().filter(|p| p.required) {
                assert!(
                    params.contains_key(p.name),
                    "{}: the catalog requires '{}', the worker does not",
                    spec.canonical,
                    p.name
                );
            }
        }
    }

    /// MSGID-6: the producers admission lets declare `replayable` are exactly those that
    /// can seek, so a Flow admitted never meets the worker's refusal.
    #[test]
    fn msgid_6_the_catalog_replayable_producers_are_the_ones_that_seek() {
        for spec in catalog::CLASSES
            .iter()
            .filter(|c| c.kind == NodeKind::Producer)
        {
            let Some(node) = build_supplied(spec).node else {
                continue;
            };
            let BuiltNode::Producer(p) = node else {
                panic!("{}: not built as a producer", spec.canonical);
            };
            assert_eq!(
                p.replayable(),
                catalog::replayable(spec.canonical),
                "{}: seeks vs the catalog's replayable list",
                spec.canonical
            );
        }
    }

    #[test]
    fn every_class_builds_from_defaults_or_fails_only_on_required_params() {
        #[cfg(feature = "video")]
        video::install();
        for c in catalog::CLASSES {
            match build_node(c.canonical, c.kind, &Map::new()) {
                Ok(node) => assert_eq!(node.kind(), c.kind),
                Err(e) => {
                    assert_eq!(e.code, ErrorCode::Config, "{}: {e}", c.canonical);
                    let without_video =
                        cfg!(not(feature = "video")) && e.message.contains("is a video node");
                    assert!(
                        e.message.contains("requires parameter") || without_video,
                        "{e}"
                    );
                }
            }
        }
    }
}
