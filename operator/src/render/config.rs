//! The operator's rendering defaults ([`RenderConfig`]): what a Flow may leave out and the
//! cluster still needs. The `run` and `render` commands fill them from their flags.

/// The worker image when neither the Flow nor the operator's configuration names one: the
/// tag built from this source tree, so operator and workers agree on the protocol.
pub const DEFAULT_WORKER_IMAGE: &str = concat!("videoflow-worker:", env!("CARGO_PKG_VERSION"));

/// The operator's defaults: what a Flow may leave out and the cluster still needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderConfig {
    /// Worker image when `spec.image.worker` is absent.
    pub worker_image: String,
    /// Pull policy when `spec.image.pullPolicy` is absent.
    pub image_pull_policy: String,
    /// Namespace when the Flow has none (an offline render of a file).
    pub namespace: String,
    /// NATS URL when the Flow names no broker; without either, rendering fails
    /// ([`RenderError::NoBroker`](super::error::RenderError::NoBroker)) — a cluster has no local broker to fall back on.
    pub nats_url: Option<String>,
}

impl Default for RenderConfig {
    fn default() -> Self {
        RenderConfig {
            worker_image: DEFAULT_WORKER_IMAGE.to_owned(),
            image_pull_policy: "IfNotPresent".to_owned(),
            namespace: "default".to_owned(),
            nats_url: None,
        }
    }
}
