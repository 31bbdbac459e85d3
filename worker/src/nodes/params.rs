//! Typed reading of `VF_NODE_PARAMS_JSON` for one built-in class.
//!
//! Why a reader that remembers what it was asked for: after a node has read its parameters,
//! whatever is left is unknown, and the error can list the accepted ones. Every failure is
//! `VF_CONFIG` naming the parameter, the class and the offending value.

use std::time::Duration;

use serde_json::{Map, Value as Json};
use videoflow_core::catalog::ParamType;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::NodeKind;
use videoflow_core::partition::py_repr_str;
use videoflow_core::suggest::closest;

use crate::config::{MAX_SECONDS, bounded_seconds};

/// Reads one class's parameters; see the module docs.
pub(crate) struct Params<'a> {
    class: &'a str,
    map: &'a Map<String, Json>,
    /// Every parameter asked for, with the shape it was read as (the catalog check compares
    /// these with `videoflow_core::catalog`).
    reads: Vec<(&'static str, ParamType)>,
}

/// Consumer-only declarations carried in the params (1.0.4 `ConsumerNode.__init__`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ConsumerFlags {
    /// `metadata`.
    pub metadata: bool,
    /// `idempotent`.
    pub idempotent: bool,
}

impl<'a> Params<'a> {
    /// A reader of `map` for `class` (named in every error).
    pub(crate) fn new(class: &'a str, map: &'a Map<String, Json>) -> Self {
        Params {
            class,
            map,
            reads: Vec::new(),
        }
    }

    /// The raw value of `name`, `None` when absent or JSON `null` (Python's default applies).
    fn get(&mut self, name: &'static str, ty: ParamType) -> Option<&'a Json> {
        self.reads.push((name, ty));
        self.map.get(name).filter(|v| !v.is_null())
    }

    /// `VF_CONFIG`: parameter `name` is not `expected` (shows the offending JSON).
    pub(crate) fn bad(&self, name: &str, expected: &str, got: &Json) -> VfError {
        VfError::new(
            ErrorCode::Config,
            format!(
                "VF_NODE_PARAMS_JSON: parameter {} of {} must be {expected}, got {got}.",
                py_repr_str(name),
                self.class
            ),
        )
        .with_remedy("Fix the node's params in the Flow.")
        .with_context("variable", "VF_NODE_PARAMS_JSON")
        .with_context("class", self.class)
        .with_context("param", name)
    }

    /// An integer parameter (a JSON integer; bools and fractions are refused).
    pub(crate) fn opt_int(&mut self, name: &'static str) -> Result<Option<i64>, VfError> {
        match self.get(name, ParamType::Int) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.bad(name, "an integer", v)),
        }
    }

    /// [`Params::opt_int`] with Python's default.
    pub(crate) fn int(&mut self, name: &'static str, default: i64) -> Result<i64, VfError> {
        Ok(self.opt_int(name)?.unwrap_or(default))
    }

    /// A number parameter (integers accepted, as Python accepts them for a float).
    pub(crate) fn opt_float(&mut self, name: &'static str) -> Result<Option<f64>, VfError> {
        match self.get(name, ParamType::Number) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| self.bad(name, "a finite number", v)),
        }
    }

    /// [`Params::opt_float`] with Python's default.
    pub(crate) fn float(&mut self, name: &'static str, default: f64) -> Result<f64, VfError> {
        Ok(self.opt_float(name)?.unwrap_or(default))
    }

    /// A span of seconds as a [`Duration`]: refused (naming the parameter) when negative, not
    /// finite or beyond [`MAX_SECONDS`], where `Duration::from_secs_f64` would panic.
    pub(crate) fn seconds_value(&self, name: &str, seconds: f64) -> Result<Duration, VfError> {
        bounded_seconds(name, seconds).map_err(|_| {
            self.bad(
                name,
                &format!("a number of seconds between 0 and {MAX_SECONDS:.0}"),
                &Json::from(seconds),
            )
        })
    }

    /// The period an `fps` parameter asks for: `1 / fps` when positive (1.0.4's rule), `None`
    /// otherwise; a rate so low that no clock can wait out its period is refused.
    pub(crate) fn fps_period(&mut self, name: &'static str) -> Result<Option<Duration>, VfError> {
        let fps = self.float(name, -1.0)?;
        if fps.is_nan() || fps <= 0.0 {
            return Ok(None);
        }
        self.seconds_value(name, 1.0 / fps).map(Some).map_err(|_| {
            self.bad(
                name,
                &format!("a frame rate of at least 1/{MAX_SECONDS:.0} per second"),
                &Json::from(fps),
            )
        })
    }

    /// A string parameter.
    pub(crate) fn opt_string(&mut self, name: &'static str) -> Result<Option<String>, VfError> {
        match self.get(name, ParamType::String) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(|s| Some(s.to_owned()))
                .ok_or_else(|| self.bad(name, "a string", v)),
        }
    }

    /// [`Params::opt_string`] with Python's default.
    pub(crate) fn string(&mut self, name: &'static str, default: &str) -> Result<String, VfError> {
        Ok(self.opt_string(name)?.unwrap_or_else(|| default.to_owned()))
    }

    /// A string parameter without a default (Python raises without it).
    pub(crate) fn required_string(&mut self, name: &'static str) -> Result<String, VfError> {
        self.opt_string(name)?.ok_or_else(|| self.missing(name))
    }

    /// `VF_CONFIG`: required parameter `name` is absent.
    pub(crate) fn missing(&self, name: &'static str) -> VfError {
        VfError::new(
            ErrorCode::Config,
            format!(
                "VF_NODE_PARAMS_JSON: {} requires parameter {}.",
                self.class,
                py_repr_str(name)
            ),
        )
        .with_remedy("Add it to the node's params in the Flow.")
        .with_context("variable", "VF_NODE_PARAMS_JSON")
        .with_context("class", self.class)
        .with_context("param", name)
    }

    /// Whether `name` is given as JSON `null` (Python `None` passed explicitly), which the
    /// typed readers take for "use the default".
    pub(crate) fn is_null(&self, name: &str) -> bool {
        matches!(self.map.get(name), Some(Json::Null))
    }

    /// A parameter of any JSON shape (`None` when absent or `null`), for nodes that take a
    /// literal value.
    pub(crate) fn opt_json(&mut self, name: &'static str) -> Option<&'a Json> {
        self.get(name, ParamType::Any)
    }

    /// A list of integers (absent ⇒ empty).
    pub(crate) fn int_list(&mut self, name: &'static str) -> Result<Vec<i64>, VfError> {
        match self.get(name, ParamType::IntList) {
            None => Ok(Vec::new()),
            Some(v) => v
                .as_array()
                .and_then(|items| items.iter().map(Json::as_i64).collect::<Option<Vec<_>>>())
                .ok_or_else(|| self.bad(name, "a list of integers", v)),
        }
    }

    /// A boolean parameter.
    pub(crate) fn bool(&mut self, name: &'static str, default: bool) -> Result<bool, VfError> {
        match self.get(name, ParamType::Bool) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.bad(name, "a boolean", v)),
        }
    }

    /// A parameter whose JSON shape is checked but whose value the runtime reads from its own
    /// `VF_*` variable (e.g. `partition_by` ↔ `VF_PARTITION_BY`).
    fn shaped(&mut self, name: &'static str, ty: ParamType) -> Result<(), VfError> {
        match self.get(name, ty) {
            Some(v) if !ty.accepts(v) => Err(self.bad(name, ty.describe(), v)),
            _ => Ok(()),
        }
    }

    /// The parameters read so far, with their shapes.
    #[cfg(test)]
    pub(crate) fn reads(&self) -> &[(&'static str, ParamType)] {
        &self.reads
    }

    /// The base-class parameters 1.0.4's `get_params()` emits for every node of `family`
    /// (the compiler ships them with the class's own). The runtime takes their meaning from
    /// the environment; only the consumer flags exist nowhere else, so they are returned.
    pub(crate) fn base(&mut self, kind: NodeKind) -> Result<ConsumerFlags, VfError> {
        use ParamType::{Int, Number, Object, String};
        self.shaped("name", String)?;
        self.shaped("image", String)?;
        let mut flags = ConsumerFlags::default();
        match kind {
            NodeKind::Producer => {
                self.bool("is_finite", true)?;
            }
            NodeKind::Processor => {
                self.shaped("nb_tasks", Int)?;
                self.shaped("device_type", String)?;
                self.shaped("partition_by", String)?;
                self.shaped("join_policy", Object)?;
                self.shaped("gpu_count", Int)?;
                self.shaped("gpu_memory_gib", Number)?;
                self.shaped("delivery", String)?;
                self.shaped("on_error", String)?;
            }
            NodeKind::Consumer => {
                flags.metadata = self.bool("metadata", false)?;
                flags.idempotent = self.bool("idempotent", false)?;
                self.shaped("join_policy", Object)?;
                self.shaped("delivery", String)?;
                self.shaped("on_error", String)?;
            }
        }
        Ok(flags)
    }

    /// Fails on the first parameter nobody asked for (sorted, so the error is stable), with
    /// the closest accepted one as a "did you mean".
    pub(crate) fn finish(self) -> Result<(), VfError> {
        let mut unknown: Vec<&String> = self
            .map
            .keys()
            .filter(|k| !self.reads.iter().any(|(n, _)| n == k))
            .collect();
        unknown.sort();
        let Some(first) = unknown.first() else {
            return Ok(());
        };
        let mut accepted: Vec<&str> = self.reads.iter().map(|(n, _)| *n).collect();
        accepted.sort_unstable();
        accepted.dedup();
        let listed = format!("Its parameters are: {}.", accepted.join(", "));
        let remedy = match closest(first, accepted.iter().copied()) {
            Some(near) => format!("Did you mean {}? {listed}", py_repr_str(near)),
            None => listed,
        };
        Err(VfError::new(
            ErrorCode::Config,
            format!(
                "VF_NODE_PARAMS_JSON: {} has no parameter {}.",
                self.class,
                py_repr_str(first)
            ),
        )
        .with_remedy(remedy)
        .with_context("variable", "VF_NODE_PARAMS_JSON")
        .with_context("class", self.class)
        .with_context("param", first.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(j: Json) -> Map<String, Json> {
        match j {
            Json::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn null_means_default_and_ints_pass_as_floats() {
        let m = map(serde_json::json!({"a": null, "b": 2}));
        let mut p = Params::new("C", &m);
        assert_eq!(p.int("a", 7), Ok(7));
        assert_eq!(p.float("b", 0.0), Ok(2.0));
        assert_eq!(p.finish(), Ok(()));
    }

    #[test]
    fn wrong_type_names_the_param() {
        let m = map(serde_json::json!({"a": "x"}));
        let mut p = Params::new("C", &m);
        let e = p.int("a", 0).err();
        assert_eq!(e.as_ref().map(|e| e.code), Some(ErrorCode::Config));
        assert_eq!(
            e.map(|e| e.message),
            Some(r#"VF_NODE_PARAMS_JSON: parameter 'a' of C must be an integer, got "x"."#.into())
        );
    }

    #[test]
    fn unknown_param_lists_the_accepted_ones() {
        let m = map(serde_json::json!({"zz": 1, "yy": 2}));
        let mut p = Params::new("C", &m);
        let _ = p.int("a", 0);
        let e = p.finish().err();
        assert_eq!(
            e.as_ref().map(|e| e.message.as_str()),
            Some("VF_NODE_PARAMS_JSON: C has no parameter 'yy'.")
        );
        assert_eq!(
            e.and_then(|e| e.remedy),
            Some("Its parameters are: a.".into())
        );
    }
}
