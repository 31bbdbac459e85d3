//! `spec.pod` and the other Kubernetes-typed fields a Flow keeps as free JSON (the core crate
//! has no Kubernetes types), parsed into k8s-openapi types with the path of any bad entry.
//!
//! Parsed once per render, before any object is built, so a typo in a toleration fails the
//! render with `spec.pod.tolerations[0]` instead of an API-server rejection halfway through
//! an apply.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, PodSecurityContext, PodSpec, SecurityContext, Toleration, TopologySpreadConstraint,
    Volume, VolumeMount,
};
use serde::de::DeserializeOwned;
use videoflow_core::model::PodSettings;

use super::error::RenderError;
use super::volumes::{RESERVED_PATHS, RESERVED_VOLUMES};

/// `spec.pod`, parsed from the Flow's free JSON into Kubernetes types.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodExtras {
    /// Identity of every pod (cloud workload identity, image pull secrets).
    pub service_account_name: Option<String>,
    /// Where the run's pods rank against other tenants' work.
    pub priority_class_name: Option<String>,
    /// Node pool of every pod.
    pub node_selector: BTreeMap<String, String>,
    /// Taints every pod tolerates.
    pub tolerations: Vec<Toleration>,
    /// Volumes of worker pods (models, assets).
    pub volumes: Vec<Volume>,
    /// Mounts of every worker container.
    pub volume_mounts: Vec<VolumeMount>,
    /// `spec.pod.probes.startupSeconds` (default [`DEFAULT_STARTUP_SECONDS`]).
    pub startup_seconds: i32,
    /// `spec.pod.probes.livenessSeconds` (default [`DEFAULT_LIVENESS_SECONDS`]).
    pub liveness_seconds: i32,
    /// Pod-level security context (checked against the restricted profile).
    pub security_context: Option<PodSecurityContext>,
    /// Container-level fields merged over the restricted defaults (checked).
    pub container_security_context: Option<SecurityContext>,
    /// Affinity of every pod.
    pub affinity: Option<Affinity>,
    /// Topology spread of every pod.
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// Annotations of every pod template.
    pub annotations: BTreeMap<String, String>,
    /// Seconds between SIGTERM and SIGKILL; `None` keeps Kubernetes' default.
    pub termination_grace_period_seconds: Option<i64>,
}

/// Start-up and `open()` may take ten minutes by default: model loads and image pulls of
/// large assets are minutes, not seconds.
pub const DEFAULT_STARTUP_SECONDS: i32 = 600;
/// `/healthz` may fail for three 15 s periods before a restart.
pub const DEFAULT_LIVENESS_SECONDS: i32 = 45;
const STARTUP_RANGE: (i32, i32) = (10, 86_400);
const LIVENESS_RANGE: (i32, i32) = (15, 3_600);
const GRACE_RANGE: (i64, i64) = (0, 86_400);
/// Annotation prefixes videoflow and Kubernetes set themselves.
const RESERVED_ANNOTATION_PREFIXES: &[&str] = &["videoflow.io/", "batch.kubernetes.io/"];

impl Default for PodExtras {
    fn default() -> Self {
        PodExtras {
            service_account_name: None,
            priority_class_name: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            volumes: Vec::new(),
            volume_mounts: Vec::new(),
            startup_seconds: DEFAULT_STARTUP_SECONDS,
            liveness_seconds: DEFAULT_LIVENESS_SECONDS,
            security_context: None,
            container_security_context: None,
            affinity: None,
            topology_spread_constraints: Vec::new(),
            annotations: BTreeMap::new(),
            termination_grace_period_seconds: None,
        }
    }
}

/// A probe budget within its range, or the error naming its field.
fn budget(
    value: Option<i32>,
    default: i32,
    (min, max): (i32, i32),
    path: &str,
) -> Result<i32, RenderError> {
    match value {
        None => Ok(default),
        Some(v) if (min..=max).contains(&v) => Ok(v),
        Some(v) => Err(RenderError::InvalidField {
            path: path.to_owned(),
            message: format!("{v} is outside {min}..={max} seconds; leave it unset for {default}"),
        }),
    }
}

impl PodExtras {
    /// Parses `spec.pod`; every entry that is not a valid object of its kind is an error with
    /// its path, and names or paths the renderer owns are refused.
    pub fn parse(settings: Option<&PodSettings>) -> Result<Self, RenderError> {
        let Some(s) = settings else {
            return Ok(PodExtras::default());
        };
        let volumes: Vec<Volume> = parse_list(&s.volumes, "spec.pod.volumes")?;
        for (i, v) in volumes.iter().enumerate() {
            if RESERVED_VOLUMES.contains(&v.name.as_str()) {
                return Err(reserved(format!("spec.pod.volumes[{i}].name"), &v.name));
            }
        }
        let volume_mounts: Vec<VolumeMount> =
            parse_list(&s.volume_mounts, "spec.pod.volumeMounts")?;
        for (i, m) in volume_mounts.iter().enumerate() {
            if RESERVED_PATHS.contains(&m.mount_path.trim_end_matches('/')) {
                return Err(reserved(
                    format!("spec.pod.volumeMounts[{i}].mountPath"),
                    &m.mount_path,
                ));
            }
        }
        let probes = s.probes.clone().unwrap_or_default();
        let security_context: Option<PodSecurityContext> = s
            .security_context
            .as_ref()
            .map(|v| parse_value(v, "spec.pod.securityContext".to_owned()))
            .transpose()?;
        if let Some(sc) = &security_context {
            super::security::check_pod(sc)?;
        }
        let container_security_context: Option<SecurityContext> = s
            .container_security_context
            .as_ref()
            .map(|v| parse_value(v, "spec.pod.containerSecurityContext".to_owned()))
            .transpose()?;
        if let Some(sc) = &container_security_context {
            super::security::check_container(sc)?;
        }
        if let Some(key) = s.annotations.keys().find(|k| {
            RESERVED_ANNOTATION_PREFIXES
                .iter()
                .any(|p| k.starts_with(p))
        }) {
            return Err(RenderError::InvalidField {
                path: format!("spec.pod.annotations.{key}"),
                message: format!("'{key}' is under a prefix videoflow or Kubernetes sets itself"),
            });
        }
        let termination_grace_period_seconds = match s.termination_grace_period_seconds {
            Some(g) if !(GRACE_RANGE.0..=GRACE_RANGE.1).contains(&g) => {
                return Err(RenderError::InvalidField {
                    path: "spec.pod.terminationGracePeriodSeconds".to_owned(),
                    message: format!(
                        "{g} is outside {}..={} seconds; leave it unset for Kubernetes' 30",
                        GRACE_RANGE.0, GRACE_RANGE.1
                    ),
                });
            }
            other => other,
        };
        Ok(PodExtras {
            security_context,
            container_security_context,
            affinity: s
                .affinity
                .as_ref()
                .map(|v| parse_value(v, "spec.pod.affinity".to_owned()))
                .transpose()?,
            topology_spread_constraints: parse_list(
                &s.topology_spread_constraints,
                "spec.pod.topologySpreadConstraints",
            )?,
            annotations: s.annotations.clone(),
            termination_grace_period_seconds,
            startup_seconds: budget(
                probes.startup_seconds,
                DEFAULT_STARTUP_SECONDS,
                STARTUP_RANGE,
                "spec.pod.probes.startupSeconds",
            )?,
            liveness_seconds: budget(
                probes.liveness_seconds,
                DEFAULT_LIVENESS_SECONDS,
                LIVENESS_RANGE,
                "spec.pod.probes.livenessSeconds",
            )?,
            service_account_name: s.service_account_name.clone().filter(|n| !n.is_empty()),
            priority_class_name: s.priority_class_name.clone().filter(|n| !n.is_empty()),
            node_selector: s.node_selector.clone(),
            tolerations: parse_list(&s.tolerations, "spec.pod.tolerations")?,
            volumes,
            volume_mounts,
        })
    }

    /// Applies the scheduling and identity settings every pod of the run shares (the
    /// provisioning pod included, so it lands where the workers may).
    pub fn apply_scheduling(&self, pod: &mut PodSpec) {
        pod.service_account_name = self.service_account_name.clone();
        pod.priority_class_name = self.priority_class_name.clone();
        pod.node_selector = non_empty_map(self.node_selector.clone());
        pod.tolerations = non_empty(self.tolerations.clone());
        pod.affinity = self.affinity.clone();
        pod.topology_spread_constraints = non_empty(self.topology_spread_constraints.clone());
        pod.security_context = self.security_context.clone();
        pod.termination_grace_period_seconds = self.termination_grace_period_seconds;
    }

    /// The security context of every videoflow container (rule: `render::security`).
    pub fn container_security(&self) -> k8s_openapi::api::core::v1::SecurityContext {
        super::security::container_context(
            self.security_context.as_ref(),
            self.container_security_context.as_ref(),
        )
    }

    /// The annotations of every pod template; `None` when there are none.
    pub fn pod_annotations(&self) -> Option<BTreeMap<String, String>> {
        non_empty_map(self.annotations.clone())
    }
}

fn reserved(path: String, value: &str) -> RenderError {
    RenderError::InvalidField {
        path,
        message: format!("'{value}' is reserved for the volumes videoflow adds to every pod"),
    }
}

/// Parses one free-JSON value as a Kubernetes type, naming the path on failure.
pub(crate) fn parse_value<T: DeserializeOwned>(
    value: &serde_json::Value,
    path: String,
) -> Result<T, RenderError> {
    serde_json::from_value(value.clone()).map_err(|e| RenderError::InvalidField {
        path,
        message: e.to_string(),
    })
}

fn parse_list<T: DeserializeOwned>(
    values: &[serde_json::Value],
    path: &str,
) -> Result<Vec<T>, RenderError> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| parse_value(v, format!("{path}[{i}]")))
        .collect()
}

pub(crate) fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn non_empty_map(m: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!m.is_empty()).then_some(m)
}
