//! The device variables (design §5, ENV-14, §18): `VF_DEVICE_TYPE`, the GPU request and grant,
//! `VF_ASSETS_JSON`, and the host facts the GPU and asset checks read (`CUDA_VISIBLE_DEVICES`,
//! `NVIDIA_VISIBLE_DEVICES`, `PATH` for `nvidia-smi`, `HOSTNAME` for portable assets).

use std::ffi::OsString;

use serde_json::Value as Json;
use videoflow_core::errors::VfError;
use videoflow_core::model::{AssetDecl, GpuFallback};
use videoflow_core::partition::py_repr_str;

use super::read::{Env, config_error, invalid_json};

/// `VF_DEVICE_TYPE` (design §5): where the node's work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceType {
    /// No accelerator (the default when unset or empty).
    #[default]
    Cpu,
    /// A GPU node: the grant is checked before `open()` (§18.2).
    Gpu,
}

/// The GPU and asset variables (design §5, ENV-14, §18), read only by device checks.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    /// `VF_DEVICE_TYPE`.
    pub device_type: DeviceType,
    /// `VF_GPU_COUNT`: requested devices (default 1; informational to 1.0.4).
    pub gpu_count: i64,
    /// `VF_GPU_RESOURCE_NAME`: the extended resource name; `None` when unset or empty.
    pub gpu_resource_name: Option<String>,
    /// `VF_GPU_FALLBACK`; `None` when unset so the §18.2 check applies its own default.
    pub gpu_fallback: Option<GpuFallback>,
    /// `VF_GPU_REQUIRES_PEER_ACCESS` is `1`.
    pub requires_peer_access: bool,
    /// `VF_GPU_GRANT_JSON`, raw: the grant is parsed by the GPU check (GPU-1), whose failure
    /// text is its own.
    pub gpu_grant_json: Option<String>,
    /// `VF_ASSETS_JSON`: declared assets to verify before `open()` (ASSET-1).
    pub assets: Vec<AssetDecl>,
    /// `CUDA_VISIBLE_DEVICES`: the device mask the grant check reads (§18.2).
    pub cuda_visible_devices: Option<String>,
    /// `NVIDIA_VISIBLE_DEVICES`: the devices Kubernetes' device plugin selected for the
    /// container (ordinals, `GPU-…` or `MIG-…` UUIDs, `all`, `none`, `void`).
    pub nvidia_visible_devices: Option<String>,
    /// `VF_NVML_LIBRARY`: the NVML library to open instead of `libnvidia-ml.so.1` (a driver
    /// installed outside the loader's path).
    pub nvml_library: Option<String>,
    /// `PATH`, where the GPU probe looks for `nvidia-smi`.
    pub path: Option<OsString>,
    /// `HOSTNAME` when non-empty: the host a non-portable asset is bound to (ASSET-1).
    pub hostname: Option<String>,
}

impl DeviceConfig {
    /// The device variables alone (the `gpu` inspection command reads only these).
    pub fn from_environment(env: &super::Environment) -> Result<DeviceConfig, VfError> {
        parse_device(&Env(env.vars()))
    }
}

/// The design §5 device variables and `VF_ASSETS_JSON`.
pub(super) fn parse_device(env: &Env<'_>) -> Result<DeviceConfig, VfError> {
    let device_type = match env.non_empty("VF_DEVICE_TYPE") {
        None | Some("cpu") => DeviceType::Cpu,
        Some("gpu") => DeviceType::Gpu,
        Some(v) => {
            return Err(config_error(
                "VF_DEVICE_TYPE",
                Some(v),
                format!(
                    "VF_DEVICE_TYPE={} is not a known device type.",
                    py_repr_str(v)
                ),
                "Use one of: cpu, gpu.".into(),
            ));
        }
    };
    let gpu_count = env.optional_int("VF_GPU_COUNT")?.unwrap_or(1);
    let gpu_fallback = match env.non_empty("VF_GPU_FALLBACK") {
        None => None,
        Some("cpu") => Some(GpuFallback::Cpu),
        Some("none") => Some(GpuFallback::None),
        Some(v) => {
            return Err(config_error(
                "VF_GPU_FALLBACK",
                Some(v),
                format!(
                    "VF_GPU_FALLBACK={}: gpu_fallback must be one of ('cpu', 'none'), got {}",
                    py_repr_str(v),
                    py_repr_str(v)
                ),
                "Use one of: cpu, none.".into(),
            ));
        }
    };
    let requires_peer_access = match env.non_empty("VF_GPU_REQUIRES_PEER_ACCESS") {
        None | Some("0") => false,
        Some("1") => true,
        Some(v) => {
            return Err(config_error(
                "VF_GPU_REQUIRES_PEER_ACCESS",
                Some(v),
                format!(
                    "VF_GPU_REQUIRES_PEER_ACCESS={} is not 0 or 1.",
                    py_repr_str(v)
                ),
                "Use 1 to require peer access between the devices, 0 (or unset) otherwise.".into(),
            ));
        }
    };
    let assets = match env.non_empty("VF_ASSETS_JSON") {
        None => Vec::new(),
        Some(v) => {
            const REMEDY: &str = "Set it to a JSON list of {\"path\", \"sha256\", \"portable\"} objects, or unset it.";
            let json: Json = serde_json::from_str(v)
                .map_err(|e| invalid_json("VF_ASSETS_JSON", v, e, REMEDY))?;
            serde_json::from_value::<Vec<AssetDecl>>(json).map_err(|e| {
                config_error(
                    "VF_ASSETS_JSON",
                    Some(v),
                    format!(
                        "VF_ASSETS_JSON={} is not a list of assets: {e}",
                        py_repr_str(v)
                    ),
                    REMEDY.into(),
                )
            })?
        }
    };
    Ok(DeviceConfig {
        device_type,
        gpu_count,
        gpu_resource_name: env.non_empty("VF_GPU_RESOURCE_NAME").map(str::to_owned),
        gpu_fallback,
        requires_peer_access,
        gpu_grant_json: env.non_empty("VF_GPU_GRANT_JSON").map(str::to_owned),
        assets,
        cuda_visible_devices: env.get("CUDA_VISIBLE_DEVICES").map(str::to_owned),
        nvidia_visible_devices: env.get("NVIDIA_VISIBLE_DEVICES").map(str::to_owned),
        nvml_library: env.non_empty("VF_NVML_LIBRARY").map(str::to_owned),
        path: env.get("PATH").map(OsString::from),
        hostname: env.non_empty("HOSTNAME").map(str::to_owned),
    })
}
