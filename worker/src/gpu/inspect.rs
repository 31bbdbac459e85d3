//! `videoflow-worker gpu`: one JSON document saying what this machine's GPU probes see and
//! what the grant check decides under the current masks — the worker's own code paths,
//! for `scripts/gpu-check` on a GPU machine and for an operator debugging a GPU pod.
//!
//! It holds: NVML's inventory (or why there is none), `nvidia-smi`'s enumeration (or why
//! not), whether the two agree, the grant report or the refusal the node would exit with,
//! and the `/metrics` lines the node would serve for its granted devices. With a video file
//! it also decodes the file as a video reader on that grant would (NVDEC, or the CPU and
//! why) and compares the frames with a CPU decoding.

use serde_json::{Value as Json, json};
use videoflow_core::scaling::Observation;

use super::nvml::{NvmlSource, differences};
use super::{DeviceIdentity, GpuProbe, HostProbe, Masks, NvidiaSmi, check_node, metrics};
use videoflow_core::model::GpuFallback;

use crate::config::DeviceConfig;
use crate::nodes::GpuPlacement;

fn identity_json(d: &DeviceIdentity) -> Json {
    json!({
        "ordinal": d.ordinal,
        "uuid": d.uuid,
        "mig_uuid": d.mig_uuid,
        "product": d.product,
        "memory_bytes": d.memory_bytes,
        "mig_profile": d.mig_profile,
        "compute_mode": d.compute_mode,
    })
}

fn unobserved(reason: &str, detail: &str) -> Json {
    json!({"unobserved": {"reason": reason, "detail": detail}})
}

/// The inspection of `node` with the device settings in `device` (its `device_type` is
/// taken as `gpu`), NVML from `nvml` and `nvidia-smi` from `smi`; with `decode`, that video
/// file decoded by the reader on the grant and on the CPU (`decode`: null when the node
/// would be refused). The second value is whether the grant check let the node open.
pub fn inspect(
    node: &str,
    device: &DeviceConfig,
    nvml: &dyn NvmlSource,
    smi: &NvidiaSmi,
    decode: Option<&str>,
) -> (Json, bool) {
    let inventory = nvml.inventory();
    let nvml_json = match &inventory {
        Observation::Known(inv) => json!({
            "driver_version": inv.driver_version,
            "devices": inv.identities().iter().map(identity_json).collect::<Vec<_>>(),
            "p2p": inv.p2p.iter().map(|c| json!([c.from, c.to, c.status])).collect::<Vec<_>>(),
            "inventory": serde_json::to_value(inv).unwrap_or(Json::Null),
        }),
        Observation::Unknown { reason, detail } => unobserved(reason, detail),
    };
    let smi_devices = smi.host_devices().answer;
    let smi_json = match &smi_devices {
        Observation::Known(list) => {
            json!({"devices": list.iter().map(identity_json).collect::<Vec<_>>()})
        }
        Observation::Unknown { reason, detail } => unobserved(reason, detail),
    };
    let (agree, diffs) = match (&inventory, &smi_devices) {
        (Observation::Known(inv), Observation::Known(list)) => {
            let d = differences(&inv.identities(), list);
            (Json::Bool(d.is_empty()), d)
        }
        _ => (Json::Null, Vec::new()),
    };
    let probe = HostProbe {
        nvml,
        smi: smi.clone(),
    };
    let masks = Masks {
        cuda: device.cuda_visible_devices.as_deref(),
        nvidia: device.nvidia_visible_devices.as_deref(),
    };
    let gpu_device = DeviceConfig {
        device_type: crate::config::DeviceType::Gpu,
        ..device.clone()
    };
    let checked = check_node(node, true, &gpu_device, masks, &probe);
    let (report, refusal, ids, placement) = match checked {
        Ok(Some(r)) => {
            let ids: Vec<String> = r.delivered.iter().map(DeviceIdentity::id).collect();
            let fallback = device.gpu_fallback.unwrap_or(GpuFallback::Cpu);
            (r.to_json(), Json::Null, ids, Some(r.placement(fallback)))
        }
        Ok(None) => (Json::Null, Json::Null, Vec::new(), Some(GpuPlacement::Cpu)),
        Err(e) => (
            Json::Null,
            json!({"code": e.code.to_string(), "message": e.message, "remedy": e.remedy_text(), "exit_code": e.exit_code()}),
            Vec::new(),
            None,
        ),
    };
    let opened = placement.is_some();
    let decoded = match (decode, &placement) {
        (Some(file), Some(p)) => crate::nodes::video::decode_twice(file, p),
        _ => Json::Null,
    };
    let doc = json!({
        "node": node,
        "masks": {"CUDA_VISIBLE_DEVICES": masks.cuda, "NVIDIA_VISIBLE_DEVICES": masks.nvidia},
        "requested": device.gpu_count,
        "nvml": nvml_json,
        "nvidia_smi": smi_json,
        "agree": agree,
        "differences": diffs,
        "report": report,
        "refusal": refusal,
        "metrics": metrics::render(node, &ids, &nvml.samples(&ids)),
        "decode": decoded,
    });
    (doc, opened)
}
