//! The run's ConfigMap of compiled node records (`specs.json`), the provisioning input.
//!
//! The records are the core compiler's, byte for byte (`CompiledFlow::specs_json`), so the
//! provisioner on the cluster reads exactly what `videoflow-worker compile` prints locally.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::context::Ctx;
use super::labels::Component;

/// The key of the records in the ConfigMap, and the file name where the provisioning pod
/// mounts it.
pub const SPECS_KEY: &str = "specs.json";

/// `vf-<flow>-<run>-specs` with `specs.json`.
pub(crate) fn specs_configmap(ctx: &Ctx) -> ConfigMap {
    ConfigMap {
        metadata: ctx
            .run
            .meta(specs_configmap_name(ctx), Component::Specs, None),
        data: Some(BTreeMap::from([(
            SPECS_KEY.to_owned(),
            ctx.compiled.specs_json(),
        )])),
        ..ConfigMap::default()
    }
}

/// The ConfigMap's name, which the provisioning Job mounts.
pub(crate) fn specs_configmap_name(ctx: &Ctx) -> String {
    ctx.run.name(&["specs"])
}
