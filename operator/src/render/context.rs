//! Everything one render needs, resolved once: the compiled flow, its run identity, the image
//! and the pod settings parsed into Kubernetes types.
//!
//! Resolving up front means a bad `spec.pod.tolerations` or pull policy fails the whole render
//! before any object is built, and every builder reads settled values instead of re-deriving
//! defaults.

use std::collections::BTreeMap;

use kube::Resource;
use videoflow_core::compile::{CompiledFlow, NodeSpec, compile};
use videoflow_core::env::{
    EnvContext, EnvError, EnvValue, KUBERNETES_HEALTH_PORT, render_node_env,
};
use videoflow_core::model::{API_VERSION, FlowDocument, FlowMetadata, KIND, NodeDecl};

use super::config::RenderConfig;
use super::error::RenderError;
use super::labels::RunMeta;
use super::settings::PodExtras;
use crate::crd::Flow;

/// The pull policies Kubernetes accepts.
const PULL_POLICIES: [&str; 3] = ["Always", "IfNotPresent", "Never"];

/// The extended resource a GPU node claims when neither the node nor the Flow names one.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";

/// The Flow as the core crate's document: the same input the local runner compiles.
pub fn flow_document(flow: &Flow) -> Result<FlowDocument, RenderError> {
    let name = flow
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or(RenderError::MissingName)?;
    Ok(FlowDocument {
        api_version: API_VERSION.to_owned(),
        kind: KIND.to_owned(),
        metadata: FlowMetadata {
            name,
            namespace: flow.metadata.namespace.clone(),
        },
        spec: flow.spec.0.clone(),
    })
}

/// The resolved inputs of one render.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    /// Names, labels, namespace and owner of every object.
    pub run: RunMeta,
    /// The Flow as the core document (what `render_node_env` reads).
    pub doc: FlowDocument,
    /// The compiled records, in topological order.
    pub compiled: CompiledFlow,
    /// The worker image: the Flow's, else the operator's default.
    pub image: String,
    /// The pull policy of every container, validated.
    pub pull_policy: String,
    /// The Kubernetes side of the shared env renderer (health port 8080, NATS fallback).
    pub env: EnvContext,
    /// `spec.pod`, parsed.
    pub pod: PodExtras,
}

impl Ctx {
    /// Resolves and validates everything the builders read; fails before any object exists.
    pub fn new(flow: &Flow, config: &RenderConfig) -> Result<Self, RenderError> {
        let doc = flow_document(flow)?;
        let compiled = compile(&doc).map_err(RenderError::Invalid)?;
        let image_spec = doc.spec.image.as_ref();
        let image = image_spec
            .and_then(|i| i.worker.clone())
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| config.worker_image.clone());
        let (pull_policy, path) = match image_spec.and_then(|i| i.pull_policy.clone()) {
            Some(p) => (p, "spec.image.pullPolicy"),
            None => (
                config.image_pull_policy.clone(),
                "the operator's image pull policy",
            ),
        };
        if !PULL_POLICIES.contains(&pull_policy.as_str()) {
            return Err(RenderError::InvalidField {
                path: path.to_owned(),
                message: format!(
                    "'{pull_policy}' is not a pull policy; use one of {}",
                    PULL_POLICIES.join(", ")
                ),
            });
        }
        let pod = PodExtras::parse(doc.spec.pod.as_ref())?;
        let payload = doc.spec.payload_store.as_ref();
        for (path, declared, url, url_from) in [
            (
                "spec.payloadStore",
                payload.is_some(),
                payload.and_then(|p| p.url.as_deref()),
                payload.is_some_and(|p| p.url_from.is_some()),
            ),
            (
                "spec.runtimeStore",
                doc.spec.runtime_store.is_some(),
                doc.spec
                    .runtime_store
                    .as_ref()
                    .and_then(|r| r.url.as_deref()),
                doc.spec
                    .runtime_store
                    .as_ref()
                    .is_some_and(|r| r.url_from.is_some()),
            ),
        ] {
            if declared && url.is_none_or(str::is_empty) && !url_from {
                return Err(RenderError::NoStoreUrl { path });
            }
        }
        let namespace = flow
            .metadata
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| config.namespace.clone());
        let owner = flow.controller_owner_ref(&()).map(|mut o| {
            o.block_owner_deletion = Some(true);
            o
        });
        Ok(Ctx {
            run: RunMeta {
                flow: compiled.flow_id.clone(),
                run: compiled.run_id.clone(),
                namespace,
                owner,
            },
            doc,
            compiled,
            image,
            pull_policy,
            env: EnvContext {
                default_nats_url: config.nats_url.clone().filter(|u| !u.is_empty()),
                health_port: KUBERNETES_HEALTH_PORT,
            },
            pod,
        })
    }

    /// The node's `VF_*` environment from the one shared renderer (core `env`).
    pub fn node_env(&self, node: &str) -> Result<BTreeMap<String, EnvValue>, RenderError> {
        render_node_env(&self.doc, &self.compiled, node, &self.env).map_err(|e| match e {
            EnvError::NoBroker => RenderError::NoBroker,
            EnvError::UnknownNode(node) => RenderError::InvalidField {
                path: "spec.nodes".into(),
                message: format!("node '{node}' is missing from the compiled flow"),
            },
        })
    }

    /// The declaration of a compiled node and its index in `spec.nodes` (for error paths).
    pub fn decl(&self, spec: &NodeSpec) -> Result<(usize, &NodeDecl), RenderError> {
        self.doc
            .spec
            .nodes
            .iter()
            .enumerate()
            .find(|(_, d)| d.name == spec.name)
            .ok_or_else(|| RenderError::InvalidField {
                path: "spec.nodes".into(),
                message: format!("node '{}' is missing from the spec", spec.name),
            })
    }

    /// The extended resource a GPU node claims: the node's, else the Flow's, else NVIDIA's.
    pub fn gpu_resource_name(&self, spec: &NodeSpec) -> String {
        spec.gpu_resource_name
            .clone()
            .or_else(|| {
                self.doc
                    .spec
                    .gpu
                    .as_ref()
                    .and_then(|g| g.resource_name.clone())
            })
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| DEFAULT_GPU_RESOURCE.to_owned())
    }

    /// The RuntimeClass GPU pods need where the NVIDIA runtime is not the node default.
    pub fn gpu_runtime_class(&self) -> Option<String> {
        self.doc
            .spec
            .gpu
            .as_ref()
            .and_then(|g| g.runtime_class_name.clone())
            .filter(|r| !r.is_empty())
    }
}
