//! Labels, selectors, names and owner references: the metadata every rendered object shares.
//!
//! One module so that the reconciler's label-selected watches and orphan pruning, `kubectl -l`
//! and the pod selectors all agree on the spelling. Selectors are run-scoped (flow, run and
//! node) so a concurrent or retiring run's pods are never adopted by the new run's workloads.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use videoflow_core::naming::k8s_name;

/// Kubernetes recommended label: the application.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// Kubernetes recommended label: this instance of the application (the Flow's name).
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
/// Kubernetes recommended label: the role of the object (`worker`, `provision`, `specs`).
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// Kubernetes recommended label: the higher-level application.
pub const LABEL_PART_OF: &str = "app.kubernetes.io/part-of";
/// Kubernetes recommended label: the tool that manages the object.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The Flow an object belongs to (its name, as a label value).
pub const LABEL_FLOW: &str = "videoflow.io/flow";
/// The run an object belongs to: pruning and selectors are run-scoped.
pub const LABEL_RUN: &str = "videoflow.io/run";
/// The node a worker object runs; the same key as the broker's owner label.
pub const LABEL_NODE: &str = videoflow_core::naming::LABEL_NODE;

/// `app.kubernetes.io/name` and `part-of` value.
pub const APP_NAME: &str = "videoflow";
/// `app.kubernetes.io/managed-by` value: what the reconciler selects its children by.
pub const MANAGED_BY: &str = "videoflow-operator";

/// The role of an object within a run, the `app.kubernetes.io/component` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// The compiled node records (`specs.json`).
    Specs,
    /// The provisioning Job.
    Provision,
    /// A node's workload and its Service / PodDisruptionBudget.
    Worker,
}

impl Component {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Specs => "specs",
            Component::Provision => "provision",
            Component::Worker => "worker",
        }
    }
}

/// A label value for a raw name: label values are DNS-label-like and at most 63 characters,
/// which node names and explicit run ids need not be, so they go through the same encoding as
/// object names (lossy, like the names themselves; validation refuses colliding node names).
pub fn label_value(raw: &str) -> String {
    k8s_name(&[raw])
}

/// Identity of one run: what every object's metadata is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMeta {
    /// Raw flow id (`metadata.name`).
    pub flow: String,
    /// Raw run id.
    pub run: String,
    /// Namespace of every object.
    pub namespace: String,
    /// The controller reference to the Flow, when the Flow has a uid (it does on a cluster;
    /// an offline render of a file has none).
    pub owner: Option<OwnerReference>,
}

impl RunMeta {
    /// A run-scoped object name, `vf-<flow>-<run>[-<part>…]` (core naming, one place).
    pub fn name(&self, parts: &[&str]) -> String {
        videoflow_core::naming::run_object_name(&self.flow, &self.run, parts)
    }

    /// The full label set of an object (and of a workload's pod template).
    pub fn labels(&self, component: Component, node: Option<&str>) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            (LABEL_NAME.to_owned(), APP_NAME.to_owned()),
            (LABEL_INSTANCE.to_owned(), label_value(&self.flow)),
            (LABEL_COMPONENT.to_owned(), component.as_str().to_owned()),
            (LABEL_PART_OF.to_owned(), APP_NAME.to_owned()),
            (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
            (LABEL_FLOW.to_owned(), label_value(&self.flow)),
            (LABEL_RUN.to_owned(), label_value(&self.run)),
        ]);
        if let Some(node) = node {
            labels.insert(LABEL_NODE.to_owned(), label_value(node));
        }
        labels
    }

    /// The pod selector of one node of this run. Immutable on Deployments and StatefulSets,
    /// so it holds only identity labels, never anything a later release might rename.
    pub fn selector(&self, node: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([
                (LABEL_FLOW.to_owned(), label_value(&self.flow)),
                (LABEL_RUN.to_owned(), label_value(&self.run)),
                (LABEL_NODE.to_owned(), label_value(node)),
            ])),
            match_expressions: None,
        }
    }

    /// Object metadata: name, namespace, labels and the owner reference.
    pub fn meta(&self, name: String, component: Component, node: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels(component, node)),
            owner_references: self.owner.clone().map(|o| vec![o]),
            ..ObjectMeta::default()
        }
    }

    /// Pod template metadata: labels only (pods are owned by their workload, not the Flow).
    pub fn template_meta(&self, component: Component, node: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            labels: Some(self.labels(component, node)),
            ..ObjectMeta::default()
        }
    }
}
