//! The catalog of built-in node classes: names, family and parameters.
//!
//! Why here and not in the worker: a Flow naming a class the worker does not have, or giving
//! it a parameter it does not take, should be refused where the Flow is written
//! (`videoflow-worker validate`), where it is admitted (the operator) and where it is rendered
//! (`videoflow-operator render`), not when its pod starts. All three read this table; the
//! worker's registry builds exactly these classes and a test in it fails when the two differ
//! in a class, an alias, a family, a parameter or a parameter's type.
//!
//! Adding a class is one entry in [`CLASSES`] (next to its builder in the worker's
//! `nodes/registry.rs`).

use serde_json::Value as Json;

use crate::model::NodeKind;

/// The JSON shape a parameter accepts (what the worker's typed reader checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// A JSON integer (not a bool, not a fraction).
    Int,
    /// Any finite JSON number (integers too, as Python accepts them for a float).
    Number,
    /// A JSON string.
    String,
    /// `true` or `false`.
    Bool,
    /// A list of JSON integers.
    IntList,
    /// A JSON object.
    Object,
    /// Any JSON value; the node checks it itself.
    Any,
}

impl ParamType {
    /// Whether `value` has this shape. `null` always passes: it means "the default", as
    /// Python's `None` does.
    pub fn accepts(self, value: &Json) -> bool {
        match self {
            _ if value.is_null() => true,
            ParamType::Int => value.as_i64().is_some(),
            ParamType::Number => value.as_f64().is_some_and(f64::is_finite),
            ParamType::String => value.is_string(),
            ParamType::Bool => value.is_boolean(),
            ParamType::IntList => value
                .as_array()
                .is_some_and(|items| items.iter().all(|v| v.as_i64().is_some())),
            ParamType::Object => value.is_object(),
            ParamType::Any => true,
        }
    }

    /// The shape in words, for an error text ("an integer").
    pub fn describe(self) -> &'static str {
        match self {
            ParamType::Int => "an integer",
            ParamType::Number => "a finite number",
            ParamType::String => "a string",
            ParamType::Bool => "a boolean",
            ParamType::IntList => "a list of integers",
            ParamType::Object => "an object",
            ParamType::Any => "any value",
        }
    }
}

/// One constructor parameter of a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// The keyword as Python spells it (`wait_time_in_seconds`).
    pub name: &'static str,
    /// Its shape.
    pub ty: ParamType,
    /// Whether the constructor has no default for it.
    pub required: bool,
}

/// An optional parameter of shape `ty`.
pub const fn opt(name: &'static str, ty: ParamType) -> Param {
    Param {
        name,
        ty,
        required: false,
    }
}

/// A parameter the class cannot do without.
pub const fn req(name: &'static str, ty: ParamType) -> Param {
    Param {
        name,
        ty,
        required: true,
    }
}

/// One built-in class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassSpec {
    /// The module path 1.0.4's compiler emits (`videoflow.producers.basic.IntProducer`), or
    /// ours under `videoflow.rs.*`.
    pub canonical: &'static str,
    /// Other names 1.0.4 imports it under: the package re-export, old spellings.
    pub aliases: &'static [&'static str],
    /// The family, which must match the node's `kind`.
    pub kind: NodeKind,
    /// The class's own parameters (the family's are in [`base_params`]).
    pub params: &'static [Param],
}

impl ClassSpec {
    /// Whether `name` is this class's canonical path or one of its aliases.
    pub fn is_named(&self, name: &str) -> bool {
        self.canonical == name || self.aliases.contains(&name)
    }

    /// The parameter `name`, among the class's own and its family's.
    pub fn param(&self, name: &str) -> Option<&'static Param> {
        self.params
            .iter()
            .chain(base_params(self.kind))
            .find(|p| p.name == name)
    }

    /// Every parameter name the class accepts, sorted.
    pub fn param_names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self
            .params
            .iter()
            .chain(base_params(self.kind))
            .map(|p| p.name)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

use NodeKind::{Consumer, Processor, Producer};
use ParamType::{Any, Bool, Int, IntList, Number, Object, String as Str};

/// The base-class parameters 1.0.4's `get_params()` emits for every node of a family (its
/// compiler ships them with the class's own; the runtime takes their meaning from `VF_*`).
pub fn base_params(kind: NodeKind) -> &'static [Param] {
    match kind {
        Producer => BASE_PRODUCER,
        Processor => BASE_PROCESSOR,
        Consumer => BASE_CONSUMER,
    }
}

const BASE_PRODUCER: &[Param] = &[opt("name", Str), opt("image", Str), opt("is_finite", Bool)];
const BASE_PROCESSOR: &[Param] = &[
    opt("name", Str),
    opt("image", Str),
    opt("nb_tasks", Int),
    opt("device_type", Str),
    opt("partition_by", Str),
    opt("join_policy", Object),
    opt("gpu_count", Int),
    opt("gpu_memory_gib", Number),
    opt("delivery", Str),
    opt("on_error", Str),
];
const BASE_CONSUMER: &[Param] = &[
    opt("name", Str),
    opt("image", Str),
    opt("metadata", Bool),
    opt("idempotent", Bool),
    opt("join_policy", Object),
    opt("delivery", Str),
    opt("on_error", Str),
];

const fn class(
    canonical: &'static str,
    aliases: &'static [&'static str],
    kind: NodeKind,
    params: &'static [Param],
) -> ClassSpec {
    ClassSpec {
        canonical,
        aliases,
        kind,
        params,
    }
}

/// Every built-in class, one entry each: canonical path, aliases, family, own parameters.
#[rustfmt::skip]
pub const CLASSES: &[ClassSpec] = &[
    class("videoflow.producers.basic.IntProducer", &["videoflow.producers.IntProducer"], Producer, &[opt("start_value", Int), opt("end_value", Int), opt("wait_time_in_seconds", Number), opt("fps", Number)]),
    // 1.0.4 keeps `VideofileReader = VideoFileReader` for old code; its package re-exports only the old name.
    class("videoflow.producers.video.VideoFileReader", &["videoflow.producers.video.VideofileReader", "videoflow.producers.VideofileReader"], Producer, &[req("video_file", Str), opt("swap_channels", Bool), opt("nb_frames", Int), opt("timestamp_source", Str), opt("decoder_threads", Int)]),
    class("videoflow.producers.video.VideoUrlReader", &[], Producer, &[req("url", Str), opt("swap_channels", Bool), opt("nb_frames", Int), opt("nb_retries", Int), opt("timestamp_source", Str), opt("rtsp_transport", Str), opt("stall_timeout_s", Number), opt("decoder_threads", Int)]),
    class("videoflow.producers.video.VideoDeviceReader", &[], Producer, &[opt("device_id", Any), opt("swap_channels", Bool), opt("nb_frames", Int), opt("nb_retries", Int), opt("timestamp_source", Str), opt("stall_timeout_s", Number), opt("decoder_threads", Int)]),
    class("videoflow.producers.video.ImageProducer", &[], Producer, &[req("image_path", Str)]),
    class("videoflow.producers.video.ImageFolderReader", &[], Producer, &[req("folder_path", Str)]),
    class("videoflow.rs.producers.SyntheticFrameProducer", &[], Producer, &[opt("width", Int), opt("height", Int), opt("channels", Int), opt("count", Int), opt("fps", Number)]),
    class("videoflow.rs.producers.TickProducer", &[], Producer, &[opt("count", Int), opt("period_ms", Number), opt("start_ts", Number), opt("skip_every", Int), opt("value", Any), opt("pace", Bool), opt("pace_relative", Bool)]),
    class("videoflow.rs.producers.FailingProducer", &[], Producer, &[opt("emit", Int), opt("message", Str)]),
    class("videoflow.processors.basic.IdentityProcessor", &["videoflow.processors.IdentityProcessor"], Processor, &[opt("fps", Number)]),
    class("videoflow.processors.basic.JoinerProcessor", &["videoflow.processors.JoinerProcessor"], Processor, &[opt("fps", Number)]),
    class("videoflow.processors.aggregators.SumAggregator", &["videoflow.processors.SumAggregator"], Processor, &[]),
    class("videoflow.processors.aggregators.MultiplicationAggregator", &["videoflow.processors.MultiplicationAggregator"], Processor, &[]),
    class("videoflow.processors.aggregators.CountAggregator", &["videoflow.processors.CountAggregator"], Processor, &[]),
    class("videoflow.processors.aggregators.MaxAggregator", &["videoflow.processors.MaxAggregator"], Processor, &[]),
    class("videoflow.processors.aggregators.MinAggregator", &["videoflow.processors.MinAggregator"], Processor, &[]),
    class("videoflow.processors.vision.transformers.ResizeImageTransformer", &[], Processor, &[opt("new_size", Any), opt("maintain_ratio", Bool)]),
    class("videoflow.processors.vision.transformers.CropImageTransformer", &[], Processor, &[opt("crop_dimensions", Any)]),
    class("videoflow.processors.vision.transformers.MaskImageTransformer", &[], Processor, &[]),
    class("videoflow.processors.vision.annotators.BoundingBoxAnnotator", &[], Processor, &[opt("class_labels_path", Str), opt("class_labels_dataset", Str), opt("box_color", Any), opt("box_thickness", Int), opt("text_color", Any)]),
    class("videoflow.rs.processors.ServiceTimeProcessor", &[], Processor, &[opt("ms", Number), opt("mode", Str)]),
    class("videoflow.rs.processors.FailOn", &[], Processor, &[opt("values", IntList), opt("code", Str)]),
    class("videoflow.rs.processors.Hang", &[], Processor, &[opt("hang_on", IntList), opt("open_seconds", Number)]),
    class("videoflow.rs.processors.Constant", &[], Processor, &[req("value", Any)]),
    class("videoflow.rs.processors.Map", &[], Processor, &[opt("op", Str), opt("operand", Number), opt("key_mod", Int)]),
    class("videoflow.consumers.basic.CommandlineConsumer", &["videoflow.consumers.CommandlineConsumer"], Consumer, &[opt("sep", Str), opt("end", Str)]),
    class("videoflow.consumers.basic.VoidConsumer", &["videoflow.consumers.VoidConsumer"], Consumer, &[]),
    class("videoflow.consumers.basic.FileAppenderConsumer", &["videoflow.consumers.FileAppenderConsumer"], Consumer, &[req("filepath", Str)]),
    class("videoflow.consumers.video.VideofileWriter", &["videoflow.consumers.VideofileWriter"], Consumer, &[req("video_file", Str), opt("swap_channels", Bool), opt("fps", Number)]),
    class("videoflow.rs.consumers.VideoFileWriter", &[], Consumer, &[req("video_file", Str), opt("swap_channels", Bool), opt("fps", Number), opt("crf", Int), opt("preset", Str)]),
    class("videoflow.rs.consumers.JsonlSink", &[], Consumer, &[req("path", Str)]),
    class("videoflow.rs.consumers.KeyedJsonSink", &[], Consumer, &[req("dir", Str)]),
    class("videoflow.rs.consumers.SelfCheck", &[], Consumer, &[req("path", Str), req("expect", Object), opt("partitions", Int), opt("video_file", Str), opt("box_color", IntList), opt("contact_sheet", Str)]),
];

/// The class named `name` (canonical path or alias).
pub fn lookup(name: &str) -> Option<&'static ClassSpec> {
    CLASSES.iter().find(|c| c.is_named(name))
}

/// The built-in producers that decode video themselves, and so may hold a GPU grant of
/// their own to decode on NVDEC (the worker falls back to the CPU, reported, without one).
const GPU_DECODING_PRODUCERS: &[&str] = &[
    "videoflow.producers.video.VideoFileReader",
    "videoflow.producers.video.VideoUrlReader",
    "videoflow.producers.video.VideoDeviceReader",
];

/// The built-in producers with a position of their own, which can resume after the last
/// accepted offset (MSGID-6): their items are numbered by the source (a value, a frame, a
/// file of a sorted folder), not by the moment they were captured.
const REPLAYABLE_PRODUCERS: &[&str] = &[
    "videoflow.producers.basic.IntProducer",
    "videoflow.producers.video.VideoFileReader",
    "videoflow.producers.video.ImageProducer",
    "videoflow.producers.video.ImageFolderReader",
    "videoflow.rs.producers.SyntheticFrameProducer",
];

/// Whether the built-in class `builtin` (by any of its names) is a producer that can seek to
/// an offset, and so may declare `replayable` (MSGID-6).
pub fn replayable(builtin: &str) -> bool {
    lookup(builtin).is_some_and(|c| REPLAYABLE_PRODUCERS.contains(&c.canonical))
}

/// Whether a node of `kind` running `builtin` (its class, when built-in) may declare `gpu`:
/// every processor, and the producers that decode video (by any of their names).
pub fn takes_gpu(kind: NodeKind, builtin: Option<&str>) -> bool {
    match kind {
        Processor => true,
        Producer => builtin
            .and_then(lookup)
            .is_some_and(|c| GPU_DECODING_PRODUCERS.contains(&c.canonical)),
        Consumer => false,
    }
}

/// Every canonical class path, in catalog order.
pub fn canonical_names() -> Vec<&'static str> {
    CLASSES.iter().map(|c| c.canonical).collect()
}

/// Every name a class answers to (canonical paths and aliases).
pub fn all_names() -> impl Iterator<Item = &'static str> {
    CLASSES
        .iter()
        .flat_map(|c| std::iter::once(c.canonical).chain(c.aliases.iter().copied()))
}

/// One thing wrong with a built-in node declaration, relative to its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassProblem {
    /// `component.builtin`, `params.fps`, ...
    pub field: std::string::String,
    /// What is wrong.
    pub message: std::string::String,
    /// How to fix it (with a "did you mean" where one is close).
    pub remedy: std::string::String,
}

/// Checks a built-in node: the class exists, belongs to `kind`'s family, and its params are
/// known and of the right shape (required ones present). Every problem at once.
pub fn check_builtin(class: &str, kind: NodeKind, params: Option<&Json>) -> Vec<ClassProblem> {
    let Some(spec) = lookup(class) else {
        let remedy = match crate::suggest::closest(class, all_names()) {
            Some(near) => format!(
                "Did you mean '{near}'? Built-in classes: {}; any other class runs as an exec or python component.",
                canonical_names().join(", ")
            ),
            None => format!(
                "Built-in classes: {}; any other class runs as an exec or python component.",
                canonical_names().join(", ")
            ),
        };
        return vec![ClassProblem {
            field: "component.builtin".into(),
            message: format!("'{class}' is not a built-in node class."),
            remedy,
        }];
    };
    let mut out = Vec::new();
    if spec.kind != kind {
        let same_family: Vec<&str> = CLASSES
            .iter()
            .filter(|c| c.kind == kind)
            .map(|c| c.canonical)
            .collect();
        out.push(ClassProblem {
            field: "component.builtin".into(),
            message: format!(
                "'{class}' is a {} class, but the node is a {}.",
                spec.kind.as_str(),
                kind.as_str()
            ),
            remedy: format!(
                "Set kind: {}, or use a {} class: {}.",
                spec.kind.as_str(),
                kind.as_str(),
                same_family.join(", ")
            ),
        });
    }
    let map = params.and_then(Json::as_object);
    if let Some(map) = map {
        let mut keys: Vec<&std::string::String> = map.keys().collect();
        keys.sort();
        for key in keys {
            let value = &map[key.as_str()];
            match spec.param(key) {
                None => {
                    let names = spec.param_names();
                    let near = crate::suggest::closest(key, names.iter().copied());
                    out.push(ClassProblem {
                        field: format!("params.{key}"),
                        message: format!("{} has no parameter '{key}'.", spec.canonical),
                        remedy: match near {
                            Some(n) => format!(
                                "Did you mean '{n}'? Its parameters are: {}.",
                                names.join(", ")
                            ),
                            None => format!("Its parameters are: {}.", names.join(", ")),
                        },
                    });
                }
                Some(p) if !p.ty.accepts(value) => out.push(ClassProblem {
                    field: format!("params.{key}"),
                    message: format!(
                        "Parameter '{key}' of {} must be {}, got {value}.",
                        spec.canonical,
                        p.ty.describe()
                    ),
                    remedy: format!("Give '{key}' {} value.", p.ty.describe()),
                }),
                Some(_) => {}
            }
        }
    }
    for p in spec.params.iter().filter(|p| p.required) {
        let given = map
            .and_then(|m| m.get(p.name))
            .is_some_and(|v| !v.is_null());
        if !given {
            out.push(ClassProblem {
                field: "params".into(),
                message: format!("{} requires parameter '{}'.", spec.canonical, p.name),
                remedy: format!(
                    "Add '{}' ({}) to the node's params.",
                    p.name,
                    p.ty.describe()
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_unique_across_classes() {
        let mut all: Vec<&str> = all_names().collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a name is listed twice");
    }

    #[test]
    fn a_misspelt_class_gets_the_near_one() {
        let p = check_builtin("videoflow.consumers.basic.VoidConsumr", Consumer, None);
        assert_eq!(p.len(), 1);
        assert!(
            p[0].remedy
                .starts_with("Did you mean 'videoflow.consumers.basic.VoidConsumer'?"),
            "{}",
            p[0].remedy
        );
    }

    #[test]
    fn wrong_family_unknown_and_mistyped_params_are_all_reported() {
        let p = check_builtin(
            "videoflow.producers.IntProducer",
            Consumer,
            Some(&json!({"start_valu": 1, "end_value": "ten", "fps": null})),
        );
        let fields: Vec<&str> = p.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            ["component.builtin", "params.end_value", "params.start_valu"]
        );
        assert!(
            p[2].remedy.starts_with("Did you mean 'start_value'?"),
            "{}",
            p[2].remedy
        );
        assert!(p[1].message.contains("an integer"), "{}", p[1].message);
    }

    #[test]
    fn a_missing_required_param_is_named() {
        let p = check_builtin(
            "videoflow.rs.consumers.JsonlSink",
            Consumer,
            Some(&json!({})),
        );
        assert_eq!(p.len(), 1);
        assert!(p[0].message.contains("'path'"), "{}", p[0].message);
    }

    #[test]
    fn base_params_of_the_family_are_accepted() {
        let p = check_builtin(
            "videoflow.processors.IdentityProcessor",
            Processor,
            Some(&json!({"name": "a", "nb_tasks": 2, "fps": 3})),
        );
        assert!(p.is_empty(), "{p:?}");
    }
}
