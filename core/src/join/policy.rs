//! Join policies (JOIN-1, JOIN-2, JOIN-4, JOIN-10) and the join working set (STREAM-15).
//!
//! One resolved [`JoinPolicy`] type serves three readers: the Flow validator (which reports
//! every problem with a path), the compiler (which writes the reference's snake_case dict into
//! `specs.json`) and the worker (which parses `VF_JOIN_POLICY_JSON`). Keeping the rules here
//! means the three can never disagree on what a valid policy is.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json, json};

use crate::model::{FlowType, JoinDecl, JoinMode, MissingPolicy};
use crate::partition::py_repr_str;

/// Default `max_pending` (JOIN-2).
pub const DEFAULT_MAX_PENDING: i64 = 256;
/// Default REALTIME join timeout (JOIN-2).
pub const DEFAULT_REALTIME_TIMEOUT_SECONDS: f64 = 10.0;
/// Local queue depth per parent (`prefetch`, STREAM-15).
pub const PREFETCH: i64 = 4;

/// A join policy with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinPolicy {
    /// Seconds to wait for a group's missing members; `None` waits forever.
    pub timeout_seconds: Option<f64>,
    /// What to do with an incomplete group.
    pub missing: MissingPolicy,
    /// Working-set size.
    pub max_pending: i64,
    /// Trace or time grouping.
    pub mode: JoinMode,
    /// Time mode tolerance.
    pub tolerance_ms: Option<f64>,
    /// Time mode quorum.
    pub quorum: Option<i64>,
    /// Time mode collect windows, parent → ms.
    pub collect: BTreeMap<String, f64>,
}

/// A key of the reference dict whose value has the wrong type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadField {
    /// The snake_case key.
    pub field: &'static str,
    /// What it must be, in words.
    pub expected: &'static str,
}

/// One violated join rule: which field, and the reference's message for it.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyProblem {
    /// The camelCase field of [`JoinDecl`] at fault (`collect.<parent>` for a window).
    pub field: String,
    /// What is wrong, in the reference's words.
    pub message: String,
    /// How to fix it.
    pub remedy: String,
}

impl JoinPolicy {
    /// The flow-type default (JOIN-2): BATCH waits for every member, anything else drops a
    /// group after 10 s.
    pub fn default_for(flow_type: FlowType) -> Self {
        let (timeout_seconds, missing) = match flow_type {
            FlowType::Batch => (None, MissingPolicy::Wait),
            FlowType::Realtime => (Some(DEFAULT_REALTIME_TIMEOUT_SECONDS), MissingPolicy::Drop),
        };
        JoinPolicy {
            timeout_seconds,
            missing,
            max_pending: DEFAULT_MAX_PENDING,
            mode: JoinMode::Trace,
            tolerance_ms: None,
            quorum: None,
            collect: BTreeMap::new(),
        }
    }

    /// Resolves a declaration the way the reference's constructor does: unset keys take the
    /// constructor defaults (not the flow-type preset), and `missing: wait` clears the timeout.
    pub fn from_decl(decl: &JoinDecl) -> Self {
        let missing = decl.missing.unwrap_or(MissingPolicy::Drop);
        JoinPolicy {
            timeout_seconds: if missing == MissingPolicy::Wait {
                None
            } else {
                decl.timeout_seconds
            },
            missing,
            max_pending: decl.max_pending.unwrap_or(DEFAULT_MAX_PENDING),
            mode: decl.mode.unwrap_or(JoinMode::Trace),
            tolerance_ms: decl.tolerance_ms,
            quorum: decl.quorum,
            collect: decl.collect.clone(),
        }
    }

    /// Parses the reference's dict (`VF_JOIN_POLICY_JSON`, the `join_policy` of
    /// `specs.json`): unknown keys ignored, `null` as unset for the nullable keys, then the
    /// same constructor rules as [`JoinPolicy::from_decl`]. Only types are checked here;
    /// [`JoinPolicy::problems`] checks the rules.
    ///
    /// `missing` and `mode` are not nullable: 1.0.4's `d.get('missing', 'drop')` hands an
    /// explicit `null` to the constructor, which refuses it (`missing must be one of …, got
    /// None`), so an explicit `null` is refused here too (differential test JOIN-1).
    pub fn from_reference_json(obj: &Map<String, Json>) -> Result<Self, BadField> {
        let bad = |field, expected| BadField { field, expected };
        let present = |k: &str| obj.get(k).filter(|v| !v.is_null());
        let number = |k: &'static str| -> Result<Option<f64>, BadField> {
            present(k)
                .map(|v| v.as_f64().ok_or(bad(k, "a number or null")))
                .transpose()
        };
        let integer = |k: &'static str| -> Result<Option<i64>, BadField> {
            present(k)
                .map(|v| v.as_i64().ok_or(bad(k, "an integer or null")))
                .transpose()
        };
        // Absent means the default; an explicit null is not in the set (JOIN-1).
        let word = |k: &str| obj.get(k).map(Json::as_str);
        let missing = match word("missing") {
            None => None,
            Some(Some("drop")) => Some(MissingPolicy::Drop),
            Some(Some("wait")) => Some(MissingPolicy::Wait),
            Some(Some("error")) => Some(MissingPolicy::Error),
            Some(_) => return Err(bad("missing", "one of 'drop', 'wait', 'error'")),
        };
        let mode = match word("mode") {
            None => None,
            Some(Some("trace")) => Some(JoinMode::Trace),
            Some(Some("time")) => Some(JoinMode::Time),
            Some(_) => return Err(bad("mode", "one of 'trace', 'time'")),
        };
        let mut collect = BTreeMap::new();
        match present("collect") {
            None => {}
            Some(Json::Object(m)) => {
                for (parent, window) in m {
                    let w = window
                        .as_f64()
                        .ok_or(bad("collect", "an object of numbers"))?;
                    collect.insert(parent.clone(), w);
                }
            }
            Some(_) => return Err(bad("collect", "an object of numbers")),
        }
        Ok(Self::from_decl(&JoinDecl {
            mode,
            timeout_seconds: number("timeout_seconds")?,
            missing,
            max_pending: integer("max_pending")?,
            tolerance_ms: number("tolerance_ms")?,
            quorum: integer("quorum")?,
            collect,
        }))
    }

    /// The working set `max(1, max_pending) × max(1, P − 1) + 1` (STREAM-15, JOIN-5a): the
    /// delivery credit a join needs per parent so an adversarial ordering cannot fill it.
    pub fn working_set(&self, parents: usize) -> i64 {
        let halves = i64::try_from(parents.saturating_sub(1).max(1)).unwrap_or(i64::MAX);
        self.max_pending
            .max(1)
            .saturating_mul(halves)
            .saturating_add(1)
    }

    /// The rule checks of JOIN-1 (field rules, in the reference's order) and JOIN-10 (rules
    /// that need the parents). Returns every problem, not just the first.
    pub fn problems(&self, node: &str, parents: &[String]) -> Vec<PolicyProblem> {
        let mut out = Vec::new();
        let mut push = |field: &str, message: String, remedy: &str| {
            out.push(PolicyProblem {
                field: field.to_owned(),
                message,
                remedy: remedy.to_owned(),
            })
        };
        match self.mode {
            JoinMode::Time => {
                if !self.tolerance_ms.is_some_and(|t| t > 0.0) {
                    push(
                        "toleranceMs",
                        "mode='time' requires a positive tolerance_ms".into(),
                        "Set toleranceMs below the fastest parent's inter-message period (e.g. 10 for 50 fps).",
                    );
                }
            }
            JoinMode::Trace => {
                for (field, set) in [
                    ("toleranceMs", self.tolerance_ms.is_some()),
                    ("quorum", self.quorum.is_some()),
                    ("collect", !self.collect.is_empty()),
                ] {
                    if set {
                        push(
                            field,
                            "tolerance_ms/quorum/collect only apply to mode='time'".into(),
                            "Set mode: time, or remove the time-mode fields.",
                        );
                    }
                }
            }
        }
        if let Some(q) = self.quorum {
            if q < 1 {
                push(
                    "quorum",
                    format!("quorum must be >= 1, got {q}"),
                    "Use a quorum of at least 1, or remove it to require every parent.",
                );
            }
            if self.timeout_seconds.is_none() {
                push(
                    "quorum",
                    "quorum requires timeout_seconds (a quorum group is only emitted once the timeout says no more parents are coming)".into(),
                    "Set timeoutSeconds (and a missing policy other than wait).",
                );
            }
        }
        for (parent, window) in &self.collect {
            if window.is_nan() || *window <= 0.0 {
                push(
                    &format!("collect.{parent}"),
                    format!(
                        "collect window for {} must be a positive number of milliseconds, got {}",
                        py_repr_str(parent),
                        crate::partition::py_float(*window)
                    ),
                    "Give every collected parent a positive window in milliseconds.",
                );
            }
        }
        if self.mode == JoinMode::Time {
            let unknown: Vec<&String> = self
                .collect
                .keys()
                .filter(|k| !parents.contains(k))
                .collect();
            if !unknown.is_empty() {
                push(
                    "collect",
                    format!(
                        "{node}: collect parents {} are not parents of this node (parents: {})",
                        py_list(unknown.iter().map(|s| s.as_str())),
                        py_list(parents.iter().map(String::as_str))
                    ),
                    "Only parents of the node can be collected; fix the names in collect.",
                );
            }
            let sync = parents
                .iter()
                .filter(|p| !self.collect.contains_key(*p))
                .count();
            if sync == 0 {
                push(
                    "collect",
                    format!(
                        "{node}: at least one parent must be synchronized (not in collect) to anchor time groups"
                    ),
                    "Remove one parent from collect.",
                );
            }
            if let Some(q) = self.quorum
                && q > i64::try_from(sync).unwrap_or(i64::MAX)
            {
                push(
                    "quorum",
                    format!(
                        "{node}: quorum={q} exceeds the number of synchronized parents ({sync})"
                    ),
                    "Lower quorum to at most the number of parents not in collect.",
                );
            }
        }
        out
    }

    /// The reference's dict (`JoinPolicy.to_dict`), the `join_policy` of `specs.json` and the
    /// value of `VF_JOIN_POLICY_JSON`.
    pub fn to_reference_json(&self) -> Json {
        let collect: Map<String, Json> = self
            .collect
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        json!({
            "timeout_seconds": self.timeout_seconds,
            "missing": missing_word(self.missing),
            "max_pending": self.max_pending,
            "mode": match self.mode { JoinMode::Trace => "trace", JoinMode::Time => "time" },
            "tolerance_ms": self.tolerance_ms,
            "quorum": self.quorum,
            "collect": collect,
        })
    }
}

/// The protocol word of a missing policy.
pub fn missing_word(m: MissingPolicy) -> &'static str {
    match m {
        MissingPolicy::Drop => "drop",
        MissingPolicy::Wait => "wait",
        MissingPolicy::Error => "error",
    }
}

/// Python's repr of a list of strings, for messages that quote the reference.
fn py_list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let parts: Vec<String> = items.map(py_repr_str).collect();
    format!("[{}]", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parents(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn join_2_defaults_per_flow_type() {
        let b = JoinPolicy::default_for(FlowType::Batch);
        assert_eq!((b.timeout_seconds, b.missing), (None, MissingPolicy::Wait));
        let r = JoinPolicy::default_for(FlowType::Realtime);
        assert_eq!(
            (r.timeout_seconds, r.missing),
            (Some(10.0), MissingPolicy::Drop)
        );
        assert_eq!(r.max_pending, 256);
    }

    #[test]
    fn join_1_wait_clears_timeout() {
        let decl = JoinDecl {
            missing: Some(MissingPolicy::Wait),
            timeout_seconds: Some(5.0),
            ..Default::default()
        };
        assert_eq!(JoinPolicy::from_decl(&decl).timeout_seconds, None);
    }

    #[test]
    fn join_1_time_requires_tolerance_and_trace_refuses_time_fields() {
        let time = JoinPolicy::from_decl(&JoinDecl {
            mode: Some(JoinMode::Time),
            ..Default::default()
        });
        let p = time.problems("n", &parents(&["a", "b"]));
        assert!(p.iter().any(|p| p.field == "toleranceMs"
            && p.message == "mode='time' requires a positive tolerance_ms"));

        let trace = JoinPolicy::from_decl(&JoinDecl {
            quorum: Some(1),
            timeout_seconds: Some(1.0),
            ..Default::default()
        });
        let p = trace.problems("n", &parents(&["a", "b"]));
        assert_eq!(p.len(), 1);
        assert_eq!(
            p[0].message,
            "tolerance_ms/quorum/collect only apply to mode='time'"
        );
    }

    #[test]
    fn join_1_quorum_rules() {
        let pol = JoinPolicy::from_decl(&JoinDecl {
            mode: Some(JoinMode::Time),
            tolerance_ms: Some(5.0),
            quorum: Some(0),
            ..Default::default()
        });
        let msgs: Vec<String> = pol
            .problems("n", &parents(&["a", "b"]))
            .into_iter()
            .map(|p| p.message)
            .collect();
        assert!(msgs.contains(&"quorum must be >= 1, got 0".to_string()));
        assert!(
            msgs.iter()
                .any(|m| m.starts_with("quorum requires timeout_seconds"))
        );
    }

    #[test]
    fn join_10_collect_and_quorum_against_parents() {
        let pol = JoinPolicy::from_decl(&JoinDecl {
            mode: Some(JoinMode::Time),
            tolerance_ms: Some(5.0),
            timeout_seconds: Some(1.0),
            quorum: Some(2),
            collect: [("imu".to_string(), 20.0), ("x".to_string(), 5.0)]
                .into_iter()
                .collect(),
            ..Default::default()
        });
        let msgs: Vec<String> = pol
            .problems("fuse", &parents(&["cam", "imu"]))
            .into_iter()
            .map(|p| p.message)
            .collect();
        assert!(msgs.contains(
            &"fuse: collect parents ['x'] are not parents of this node (parents: ['cam', 'imu'])"
                .to_string()
        ));
        assert!(msgs.contains(
            &"fuse: quorum=2 exceeds the number of synchronized parents (1)".to_string()
        ));
        // Names are quoted with Python's repr, as 1.0.4 formats the list.
        let quoted = JoinPolicy::from_decl(&JoinDecl {
            mode: Some(JoinMode::Time),
            tolerance_ms: Some(5.0),
            collect: [("a\\b".to_string(), 0.0)].into_iter().collect(),
            ..Default::default()
        });
        let msgs: Vec<String> = quoted
            .problems("n", &parents(&["it's"]))
            .into_iter()
            .map(|p| p.message)
            .collect();
        assert_eq!(
            msgs,
            [
                r"collect window for 'a\\b' must be a positive number of milliseconds, got 0.0",
                r#"n: collect parents ['a\\b'] are not parents of this node (parents: ["it's"])"#,
            ]
        );

        let all_collected = JoinPolicy::from_decl(&JoinDecl {
            mode: Some(JoinMode::Time),
            tolerance_ms: Some(5.0),
            collect: [("a".to_string(), 1.0)].into_iter().collect(),
            ..Default::default()
        });
        assert!(
            all_collected
                .problems("n", &parents(&["a"]))
                .iter()
                .any(|p| p
                    .message
                    .contains("at least one parent must be synchronized"))
        );
    }

    #[test]
    fn reference_dict_round_trips_and_types_are_checked() {
        let decl = JoinDecl {
            mode: Some(JoinMode::Time),
            timeout_seconds: Some(2.0),
            tolerance_ms: Some(5.0),
            quorum: Some(1),
            collect: [("imu".to_string(), 20.0)].into_iter().collect(),
            ..Default::default()
        };
        let policy = JoinPolicy::from_decl(&decl);
        let Json::Object(dict) = policy.to_reference_json() else {
            panic!("not an object")
        };
        assert_eq!(JoinPolicy::from_reference_json(&dict), Ok(policy));
        let wait = json!({"missing": "wait", "timeout_seconds": 3});
        let Json::Object(wait) = wait else { panic!() };
        let parsed = JoinPolicy::from_reference_json(&wait).expect("parses");
        assert_eq!(
            parsed.timeout_seconds, None,
            "JOIN-1: wait clears the timeout"
        );
        for null_word in ["missing", "mode"] {
            let Json::Object(d) = json!({ null_word: null }) else {
                panic!()
            };
            assert_eq!(
                JoinPolicy::from_reference_json(&d).map_err(|e| e.field),
                Err(null_word),
                "JOIN-1: an explicit null {null_word} is not in the set"
            );
        }
        let bad = json!({"quorum": "two"});
        let Json::Object(bad) = bad else { panic!() };
        assert_eq!(
            JoinPolicy::from_reference_json(&bad).map_err(|e| e.field),
            Err("quorum")
        );
    }

    #[test]
    fn stream_15_working_set() {
        let p = JoinPolicy::default_for(FlowType::Batch);
        assert_eq!(p.working_set(2), 257);
        assert_eq!(p.working_set(3), 513);
        assert_eq!(p.working_set(1), 257);
    }

    #[test]
    fn reference_dict_shape() {
        let j = JoinPolicy::default_for(FlowType::Realtime).to_reference_json();
        assert_eq!(
            j,
            json!({"timeout_seconds": 10.0, "missing": "drop", "max_pending": 256,
                   "mode": "trace", "tolerance_ms": null, "quorum": null, "collect": {}})
        );
    }
}
