//! The Kubernetes API permissions the controller needs, in one place.
//!
//! The Helm chart's ClusterRole/Role (`charts/videoflow-operator/templates/rbac.yaml`) and the
//! static manifests (`config/rbac/`) grant exactly these, no more: `operator/tests/rbac.rs`
//! compares them, and checks that every request the controller makes against a mock API
//! server is covered. Add an entry here whenever the controller starts a new kind of call.
//!
//! Secrets are absent on purpose: the operator only *references* Secrets in the pods it
//! renders (`secretKeyRef`), which the kubelet resolves with its own credentials.

/// One RBAC rule: an API group (`""` is the core group), a resource (`kind/subresource` for a
/// subresource) and the verbs on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    /// The API group, `""` for the core group.
    pub group: &'static str,
    /// The plural resource name, or `resource/subresource`.
    pub resource: &'static str,
    /// The verbs, sorted.
    pub verbs: &'static [&'static str],
}

/// Verbs on the kinds the operator renders and owns:
/// - `list`, `watch`: the Controller's watches (which also fill the reflector stores reconciles
///   read, `cache`) and `observe`'s label-selected LISTs where no store runs;
/// - `create`, `patch`: server-side apply (`apply::apply_one`) — a PATCH that creates an
///   absent object is authorized as `create` as well;
/// - `delete`: pruning and the finalizer's stop of the run (`apply::delete_child`).
const OWNED_VERBS: &[&str] = &["create", "delete", "list", "patch", "watch"];

/// Every permission the controller uses (`videoflow-operator run`), sorted by group, then
/// resource.
pub const REQUIRED_PERMISSIONS: &[Permission] = &[
    // Core group.
    Permission {
        group: "",
        resource: "configmaps",
        verbs: OWNED_VERBS,
    },
    // Pods are only read: the watch maps them to their Flow, `observe` lists them for status.
    Permission {
        group: "",
        resource: "pods",
        verbs: &["list", "watch"],
    },
    Permission {
        group: "",
        resource: "services",
        verbs: OWNED_VERBS,
    },
    Permission {
        group: "apps",
        resource: "deployments",
        verbs: OWNED_VERBS,
    },
    Permission {
        group: "apps",
        resource: "statefulsets",
        verbs: OWNED_VERBS,
    },
    Permission {
        group: "batch",
        resource: "jobs",
        verbs: OWNED_VERBS,
    },
    // The events `Recorder` (kube-runtime) creates events.k8s.io/v1 Events and patches a
    // repeated one into a series.
    Permission {
        group: "events.k8s.io",
        resource: "events",
        verbs: &["create", "patch"],
    },
    // KEDA ScaledObjects of autoscaled nodes (SCALE-6): read by label only for Flows that
    // may own some, applied and pruned like the other children; no watch. Harmless where
    // KEDA is absent (RBAC does not check that a resource exists).
    Permission {
        group: "keda.sh",
        resource: "scaledobjects",
        verbs: &["create", "delete", "list", "patch"],
    },
    Permission {
        group: "policy",
        resource: "poddisruptionbudgets",
        verbs: OWNED_VERBS,
    },
    // The Flow watch (`list`, `watch`) and the finalizer's JSON patches (`patch`).
    Permission {
        group: "videoflow.io",
        resource: "flows",
        verbs: &["list", "patch", "watch"],
    },
    // Children carry an owner reference with `blockOwnerDeletion: true`; where the
    // OwnerReferencesPermissionEnforcement admission plugin is on (OpenShift, hardened
    // clusters) setting it requires `update` on the owner's finalizers subresource.
    Permission {
        group: "videoflow.io",
        resource: "flows/finalizers",
        verbs: &["update"],
    },
    // The status: one server-side apply per change.
    Permission {
        group: "videoflow.io",
        resource: "flows/status",
        verbs: &["patch"],
    },
];

/// The leader Lease (`leader`), granted by a Role in the operator's own namespace, apart from
/// [`REQUIRED_PERMISSIONS`] (which may be cluster-wide): `get` and `update` only on the
/// Lease's name (`resourceNames` in the chart); `create` cannot be limited by name.
pub const LEADER_ELECTION_PERMISSIONS: &[Permission] = &[Permission {
    group: "coordination.k8s.io",
    resource: "leases",
    verbs: &["create", "get", "update"],
}];
