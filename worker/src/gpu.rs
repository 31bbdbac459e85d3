//! The GPU grant check (§18.2, GPU-1..4): what the node was granted against what this
//! process can see, decided before `open()`.
//!
//! The allocator (device plugin, local runner) decides *which* devices a worker gets; this
//! module never allocates. It answers: how many usable devices did I receive, by which
//! identities (the recorded grant `VF_GPU_GRANT_JSON`, else the namespace enumerated through
//! `CUDA_VISIBLE_DEVICES` by ordinal, card UUID or MIG UUID — never by counting integers);
//! is a short grant fatal (only with `gpu_fallback = none`); do the devices have the peer
//! access the node requires (`nvidia-smi topo -p2p r`).
//!
//! What could not be observed stays "unknown": a missing `nvidia-smi` in a CPU image is not
//! evidence of zero devices. The host is read through an injectable [`GpuProbe`]; the real
//! one, [`HostProbe`], asks NVML first ([`nvml`], opened at run time) and `nvidia-smi`
//! ([`NvidiaSmi`], found on `PATH`, bounded by a timeout, its whole process group killed when
//! it hangs) when NVML cannot answer; the report's evidence names the probe that answered and
//! why the first one did not. The probe blocks: call it off the async runtime.
//!
//! Kubernetes' NVIDIA device plugin hands a container its devices in
//! `NVIDIA_VISIBLE_DEVICES` (ordinals, card UUIDs or MIG UUIDs), which the container runtime
//! applies before the process starts; [`effective_mask`] says how that value and
//! `CUDA_VISIBLE_DEVICES` combine.

pub mod inspect;
pub mod metrics;
pub mod nvml;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::GpuFallback;
use videoflow_core::partition::py_repr_str;
use videoflow_core::scaling::Observation;

use crate::config::{DeviceConfig, DeviceType};
use crate::nodes::GpuPlacement;

/// Bound on one `nvidia-smi` call (GPU-2): a wedged driver must not hang startup.
pub const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(5);

/// One accelerator in three identifier spaces: host ordinal, card UUID, MIG UUID.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceIdentity {
    /// The cluster node it lives on, when recorded.
    pub node: Option<String>,
    /// The host (physical) ordinal.
    pub ordinal: Option<i64>,
    /// The card UUID (`GPU-…`); for a MIG instance, its parent card's.
    pub uuid: Option<String>,
    /// The MIG instance UUID (`MIG-…`).
    pub mig_uuid: Option<String>,
    /// Product name (`""` when unknown).
    pub product: String,
    /// Memory in bytes.
    pub memory_bytes: Option<i64>,
    /// MIG profile, e.g. `1g.24gb`.
    pub mig_profile: Option<String>,
    /// NVML's compute mode (`default` = shared, `exclusive_process`, …), when enumerated
    /// through NVML; not part of a recorded grant.
    pub compute_mode: Option<String>,
}

impl DeviceIdentity {
    /// The id a report shows: MIG UUID, else card UUID, else ordinal.
    pub fn id(&self) -> String {
        self.mig_uuid
            .clone()
            .or_else(|| self.uuid.clone())
            .or_else(|| self.ordinal.map(|o| o.to_string()))
            .unwrap_or_else(|| "None".to_owned())
    }
}

/// GPU-1: the grant a launcher recorded (`VF_GPU_GRANT_JSON`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveredGrant {
    /// Required.
    pub workload_id: String,
    /// The delivered devices, in CUDA index order.
    pub devices: Vec<DeviceIdentity>,
    /// Whether the launcher promised exclusive devices (absent = false).
    pub exclusive: bool,
    /// What was requested (absent = 0).
    pub requested: i64,
    /// The allocation policy (absent = `""`).
    pub policy: String,
    /// `observed` (absent) or `unobserved`: whether the launcher saw the host's devices.
    pub host: String,
}

impl DeliveredGrant {
    /// Parses GPU-1 JSON. Invalid JSON or a missing `workload_id` is a ConfigError naming
    /// the variable (1.0.4 fails untyped; ENV-1 asks the SDK to do better).
    pub fn parse(raw: &str) -> Result<Self, VfError> {
        let bad = |why: String| {
            VfError::new(
                ErrorCode::Config,
                format!("VF_GPU_GRANT_JSON is not a valid grant: {why}"),
            )
            .with_remedy("VF_GPU_GRANT_JSON is written by the launcher; unset it or fix the launcher that rendered it.")
        };
        let v: Json = serde_json::from_str(raw).map_err(|e| bad(e.to_string()))?;
        let Some(obj) = v.as_object() else {
            return Err(bad("not a JSON object".into()));
        };
        let workload_id = match obj.get("workload_id") {
            Some(Json::String(s)) => s.clone(),
            Some(Json::Number(n)) => n.to_string(),
            _ => return Err(bad("workload_id is required".into())),
        };
        let str_of = |o: &serde_json::Map<String, Json>, k: &str| {
            o.get(k).and_then(Json::as_str).map(str::to_owned)
        };
        let devices = obj
            .get("devices")
            .and_then(Json::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(Json::as_object)
                    .map(|d| DeviceIdentity {
                        node: str_of(d, "node"),
                        ordinal: d.get("ordinal").and_then(Json::as_i64),
                        uuid: str_of(d, "uuid"),
                        mig_uuid: str_of(d, "mig_uuid"),
                        product: str_of(d, "product").unwrap_or_default(),
                        memory_bytes: d.get("memory_bytes").and_then(Json::as_i64),
                        mig_profile: str_of(d, "mig_profile"),
                        compute_mode: None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(DeliveredGrant {
            workload_id,
            devices,
            exclusive: obj
                .get("exclusive")
                .and_then(Json::as_bool)
                .unwrap_or(false),
            requested: obj.get("requested").and_then(Json::as_i64).unwrap_or(0),
            policy: str_of(obj, "policy").unwrap_or_default(),
            host: str_of(obj, "host").unwrap_or_else(|| "observed".to_owned()),
        })
    }
}

/// The P2P read matrix: `(row ordinal, column index) → status` in `nvidia-smi topo -p2p r`'s
/// words (`OK`, `NS`, `CNS`, `GNS`, `TNS`, `U`, `X` on the diagonal).
pub type P2pMatrix = BTreeMap<(i64, usize), String>;

/// A probe's answer and which probe gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct Probed<T> {
    /// The answer, or why there is none.
    pub answer: Observation<T>,
    /// `nvml` or `nvidia-smi`: the probe that answered (the last one asked when none did).
    pub probe: &'static str,
    /// Why an earlier probe did not answer (`<reason>: <detail>`), when one was asked first.
    pub fallback: Option<String>,
}

impl<T> Probed<T> {
    /// An answer from `probe` alone.
    pub fn from(probe: &'static str, answer: Observation<T>) -> Self {
        Probed {
            answer,
            probe,
            fallback: None,
        }
    }

    fn evidence(&self, key: &str, evidence: &mut BTreeMap<String, String>) {
        evidence.insert(key.to_owned(), self.probe.to_owned());
        if let Some(f) = &self.fallback {
            evidence.insert(format!("{key}_nvml"), f.clone());
        }
    }
}

/// Reads the host's GPUs. Blocking.
pub trait GpuProbe {
    /// Every physical card and MIG instance of the host, or Unknown (`missing`, `timeout`,
    /// `failed`, `unavailable`) — never "none" for a failed read.
    fn host_devices(&self) -> Probed<Vec<DeviceIdentity>>;
    /// The P2P read matrix between the host's cards, or Unknown (`malformed` when no matrix
    /// could be read from an answer).
    fn p2p(&self) -> Probed<P2pMatrix>;
}

/// NVML as a probe on its own.
pub struct NvmlProbe<'a>(pub &'a dyn nvml::NvmlSource);

impl GpuProbe for NvmlProbe<'_> {
    fn host_devices(&self) -> Probed<Vec<DeviceIdentity>> {
        Probed::from("nvml", map_known(self.0.inventory(), |i| i.identities()))
    }

    fn p2p(&self) -> Probed<P2pMatrix> {
        Probed::from("nvml", map_known(self.0.inventory(), |i| i.p2p_matrix()))
    }
}

/// The worker's probe: NVML first, `nvidia-smi` when NVML cannot answer (absent library,
/// a build without it, a failed init).
pub struct HostProbe<'a> {
    /// The first probe.
    pub nvml: &'a dyn nvml::NvmlSource,
    /// The fallback.
    pub smi: NvidiaSmi,
}

impl GpuProbe for HostProbe<'_> {
    fn host_devices(&self) -> Probed<Vec<DeviceIdentity>> {
        first_answer(NvmlProbe(self.nvml).host_devices(), || {
            self.smi.host_devices()
        })
    }

    fn p2p(&self) -> Probed<P2pMatrix> {
        first_answer(NvmlProbe(self.nvml).p2p(), || self.smi.p2p())
    }
}

fn map_known<T, U>(o: Observation<T>, f: impl FnOnce(T) -> U) -> Observation<U> {
    match o {
        Observation::Known(v) => Observation::Known(f(v)),
        Observation::Unknown { reason, detail } => Observation::Unknown { reason, detail },
    }
}

/// `first` when it answered, else `second`, noting why `first` did not; when neither
/// answered, the detail names both.
fn first_answer<T>(first: Probed<T>, second: impl FnOnce() -> Probed<T>) -> Probed<T> {
    let Observation::Unknown { reason, detail } = first.answer else {
        return first;
    };
    let why = format!("{reason}: {detail}");
    let next = second();
    let answer = match next.answer {
        Observation::Unknown {
            reason: r2,
            detail: d2,
        } => Observation::Unknown {
            reason: r2,
            detail: format!("{d2}; NVML: {why}"),
        },
        known => known,
    };
    Probed {
        answer,
        probe: next.probe,
        fallback: Some(why),
    }
}

/// The real probe: `nvidia-smi` found on `PATH` (or an explicit search path, for tests).
#[derive(Debug, Clone)]
pub struct NvidiaSmi {
    /// The search path (the worker's `PATH`, [`crate::config::DeviceConfig::path`]); `None`
    /// finds no `nvidia-smi`.
    pub path: Option<OsString>,
    /// Bound on each call.
    pub timeout: Duration,
}

impl Default for NvidiaSmi {
    fn default() -> Self {
        NvidiaSmi {
            path: None,
            timeout: NVIDIA_SMI_TIMEOUT,
        }
    }
}

impl NvidiaSmi {
    fn resolve(&self) -> Option<PathBuf> {
        let path = self.path.as_ref()?;
        std::env::split_paths(&path)
            .map(|dir| dir.join("nvidia-smi"))
            .find(|p| is_executable(p))
    }

    /// Runs `nvidia-smi <args>` bounded by the timeout; Unknown on absence, timeout or a
    /// failed run.
    pub fn run(&self, args: &[&str]) -> Observation<String> {
        let Some(exe) = self.resolve() else {
            return Observation::unknown("missing", "nvidia-smi is not on PATH (no NVIDIA driver)");
        };
        let mut cmd = Command::new(&exe);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        if let Some(p) = &self.path {
            cmd.env("PATH", p);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Observation::unknown("missing", format!("nvidia-smi: {e}"));
            }
            Err(e) => return Observation::unknown("failed", format!("nvidia-smi: {e}")),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(mut out) = child.stdout.take() {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = out.read_to_end(&mut buf);
                let _ = tx.send(buf);
            });
        }
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    if let Ok(pid) = i32::try_from(child.id()) {
                        let _ = nix::sys::signal::killpg(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                    let _ = child.kill();
                    let _ = child.wait();
                    return Observation::unknown(
                        "timeout",
                        format!(
                            "nvidia-smi {} did not answer within {}s",
                            args.join(" "),
                            self.timeout.as_secs_f64()
                        ),
                    );
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Observation::unknown("failed", format!("nvidia-smi: {e}")),
            }
        };
        if !status.success() {
            return Observation::unknown(
                "failed",
                format!("nvidia-smi {} exited with {status}", args.join(" ")),
            );
        }
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(bytes) => Observation::Known(String::from_utf8_lossy(&bytes).into_owned()),
            Err(_) => Observation::unknown("failed", "nvidia-smi output could not be read"),
        }
    }
}

fn is_executable(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The query the inventory reads: one CSV row per card, memory in MiB.
const SMI_QUERY: [&str; 2] = [
    "--query-gpu=index,uuid,name,memory.total,memory.used",
    "--format=csv,noheader,nounits",
];

impl NvidiaSmi {
    fn enumerate(&self) -> Observation<Vec<DeviceIdentity>> {
        let rows = match self.run(&SMI_QUERY) {
            Observation::Known(t) => parse_smi_query(&t),
            Observation::Unknown { reason, detail } => {
                return Observation::Unknown { reason, detail };
            }
        };
        let listed = match self.run(&["-L"]) {
            Observation::Known(t) => parse_smi_list(&t),
            Observation::Unknown { reason, detail } => {
                return Observation::Unknown { reason, detail };
            }
        };
        Observation::Known(merge_smi(&rows, listed))
    }
}

/// `-L`'s identities with the query's card memory; a MIG instance's memory is not in either
/// output, so it stays unknown. With no `-L` lines the query rows stand alone.
pub fn merge_smi(rows: &[DeviceIdentity], listed: Vec<DeviceIdentity>) -> Vec<DeviceIdentity> {
    if listed.is_empty() {
        return rows.to_vec();
    }
    listed
        .into_iter()
        .map(|mut d| {
            if d.mig_uuid.is_none()
                && let Some(card) = rows.iter().find(|r| r.uuid.is_some() && r.uuid == d.uuid)
            {
                d.memory_bytes = card.memory_bytes;
            }
            d
        })
        .collect()
}

impl GpuProbe for NvidiaSmi {
    fn host_devices(&self) -> Probed<Vec<DeviceIdentity>> {
        Probed::from("nvidia-smi", self.enumerate())
    }

    fn p2p(&self) -> Probed<P2pMatrix> {
        let answer = match self.run(&["topo", "-p2p", "r"]) {
            Observation::Known(text) => {
                let matrix = parse_p2p_matrix(&text);
                if matrix.is_empty() {
                    Observation::unknown("malformed", "nvidia-smi topo -p2p r printed no matrix")
                } else {
                    Observation::Known(matrix)
                }
            }
            Observation::Unknown { reason, detail } => Observation::Unknown { reason, detail },
        };
        Probed::from("nvidia-smi", answer)
    }
}

/// `nvidia-smi --query-gpu=index,uuid,name,memory.total,…` rows as identities.
pub fn parse_smi_query(csv: &str) -> Vec<DeviceIdentity> {
    csv.lines()
        .filter_map(|line| {
            let parts: Vec<&str> = line.split(',').map(str::trim).collect();
            if parts.len() < 4 || !all_digits(parts[0]) {
                return None;
            }
            Some(DeviceIdentity {
                ordinal: parts[0].parse().ok(),
                uuid: Some(parts[1].to_owned()).filter(|u| !u.is_empty()),
                product: parts[2].to_owned(),
                memory_bytes: parts[3].parse::<i64>().ok().map(|m| m * 1024 * 1024),
                ..DeviceIdentity::default()
            })
        })
        .collect()
}

/// `nvidia-smi -L`: one identity per card (`GPU <n>: <product> (UUID: <uuid>)`) and one per
/// MIG instance under it (`  MIG <profile> Device <i>: (UUID: MIG-…)`).
pub fn parse_smi_list(text: &str) -> Vec<DeviceIdentity> {
    let mut out: Vec<DeviceIdentity> = Vec::new();
    let mut card: Option<DeviceIdentity> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("GPU ")
            && let Some((ordinal, rest)) = rest.split_once(": ")
            && all_digits(ordinal)
            && let Some((product, uuid)) = rest.rsplit_once(" (UUID: ")
        {
            let d = DeviceIdentity {
                ordinal: ordinal.parse().ok(),
                uuid: Some(uuid.trim_end_matches(')').to_owned()),
                product: product.trim().to_owned(),
                ..DeviceIdentity::default()
            };
            card = Some(d.clone());
            out.push(d);
            continue;
        }
        let trimmed = line.trim_start();
        if trimmed.len() < line.len()
            && let Some(rest) = trimmed.strip_prefix("MIG ")
            && let Some((profile, rest)) = rest.split_once(char::is_whitespace)
            && let Some((_, uuid)) = rest.split_once("(UUID: ")
            && uuid.starts_with("MIG-")
            && let Some(card) = &card
        {
            out.push(DeviceIdentity {
                mig_uuid: Some(uuid.trim_end_matches(')').to_owned()),
                mig_profile: Some(profile.to_owned()),
                ..card.clone()
            });
        }
    }
    out
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The entries of a `CUDA_VISIBLE_DEVICES` value: `None` when unset; `""` hides everything.
pub fn mask_entries(value: Option<&str>) -> Option<Vec<String>> {
    value.map(|v| {
        v.split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

/// The devices a mask exposes, in mask order, as the CUDA runtime resolves it (GPU-2): an
/// all-digit entry is a physical ordinal, `MIG-…` a MIG UUID, anything else a card UUID (a
/// unique prefix suffices); the list ends at the first entry that names no device or is of
/// the other form than the first; a device named twice invalidates the whole mask. Unset
/// exposes every card, never MIG instances.
pub fn apply_mask(devices: &[DeviceIdentity], mask: Option<&[String]>) -> Vec<DeviceIdentity> {
    let cards: Vec<&DeviceIdentity> = devices.iter().filter(|d| d.mig_uuid.is_none()).collect();
    let Some(mask) = mask else {
        return cards.into_iter().cloned().collect();
    };
    let mut out: Vec<DeviceIdentity> = Vec::new();
    let mut form: Option<bool> = None;
    for entry in mask {
        let is_ordinal = all_digits(entry);
        if *form.get_or_insert(is_ordinal) != is_ordinal {
            break;
        }
        let matches: Vec<&DeviceIdentity> = if is_ordinal {
            let o = entry.parse::<i64>().ok();
            cards
                .iter()
                .copied()
                .filter(|d| d.ordinal.is_some() && d.ordinal == o)
                .collect()
        } else if entry.starts_with("MIG-") {
            devices
                .iter()
                .filter(|d| {
                    d.mig_uuid
                        .as_deref()
                        .is_some_and(|u| u.starts_with(entry.as_str()))
                })
                .collect()
        } else {
            cards
                .iter()
                .copied()
                .filter(|d| {
                    d.uuid
                        .as_deref()
                        .is_some_and(|u| u.starts_with(entry.as_str()))
                })
                .collect()
        };
        let [one] = matches.as_slice() else {
            break;
        };
        if out.contains(one) {
            return Vec::new();
        }
        out.push((*one).clone());
    }
    out
}

/// `nvidia-smi topo -p2p r` as `(i, j) → status` (GPU-4).
pub fn parse_p2p_matrix(text: &str) -> P2pMatrix {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix("GPU") else {
            continue;
        };
        let Some((i, cells)) = rest.split_once('\t') else {
            continue;
        };
        if !all_digits(i) {
            continue;
        }
        let Ok(i) = i.parse::<i64>() else { continue };
        for (j, cell) in cells.split('\t').map(str::trim).enumerate() {
            if !cell.is_empty() {
                out.insert((i, j), cell.to_owned());
            }
        }
    }
    out
}

/// Where the delivered devices came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantSource {
    /// A launcher-recorded grant with host `observed`.
    Grant,
    /// `nvidia-smi` through the mask.
    Enumeration,
    /// Neither answered.
    Unobserved,
}

impl GrantSource {
    /// The report's word.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantSource::Grant => "grant",
            GrantSource::Enumeration => "enumeration",
            GrantSource::Unobserved => "unobserved",
        }
    }
}

/// GPU-2: what this worker really has. Never an error; [`verify_grant`] decides.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantReport {
    /// The node's `gpu_count`.
    pub requested: i64,
    /// The usable devices, in CUDA index order.
    pub delivered: Vec<DeviceIdentity>,
    /// Where they came from.
    pub source: GrantSource,
    /// `gpu`, `cpu` (fallback taken) or `unknown`.
    pub execution: &'static str,
    /// Exclusive devices promised by the launcher.
    pub exclusive: bool,
    /// `CUDA_VISIBLE_DEVICES` as inherited.
    pub mask: Option<String>,
    /// `None` when not checked; Known(bool) or Unknown once checked.
    pub peer_access: Option<Observation<bool>>,
    /// Every shortfall, in words.
    pub problems: Vec<String>,
    /// What the decision rested on.
    pub evidence: BTreeMap<String, String>,
}

impl GrantReport {
    /// What a node that drives the GPU itself may use: the delivered devices, or why there
    /// are none (an unobserved host is not "no device": the node may still try); with
    /// `fallback` `none` the devices are required.
    pub fn placement(&self, fallback: GpuFallback) -> GpuPlacement {
        let why = if self.problems.is_empty() {
            "no device was delivered".to_owned()
        } else {
            self.problems.join("; ")
        };
        if self.source == GrantSource::Unobserved {
            GpuPlacement::Unobserved(why)
        } else if self.delivered.is_empty() {
            GpuPlacement::Denied(why)
        } else {
            GpuPlacement::Granted {
                devices: self.delivered.iter().map(DeviceIdentity::id).collect(),
                required: fallback == GpuFallback::None,
            }
        }
    }

    /// `to_dict` (GPU-2), logged as one JSON line.
    pub fn to_json(&self) -> Json {
        json!({
            "requested": self.requested,
            "delivered": self.delivered.iter().map(DeviceIdentity::id).collect::<Vec<_>>(),
            "source": self.source.as_str(),
            "execution": self.execution,
            "exclusive": self.exclusive,
            "mask": self.mask,
            "peer_access": match &self.peer_access {
                None => Json::Null,
                Some(Observation::Known(b)) => Json::Bool(*b),
                Some(Observation::Unknown { .. }) => Json::from("unknown"),
            },
            "problems": self.problems,
            "evidence": self.evidence,
        })
    }
}

/// The two variables a container's device selection arrives in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Masks<'a> {
    /// `CUDA_VISIBLE_DEVICES`: the CUDA runtime's mask over what the process can see.
    pub cuda: Option<&'a str>,
    /// `NVIDIA_VISIBLE_DEVICES`: what the device plugin asked the container runtime to mount.
    pub nvidia: Option<&'a str>,
}

/// The mask the enumeration is filtered through, and the variable it came from.
///
/// `CUDA_VISIBLE_DEVICES`, when set, is the mask (GPU-2): the CUDA runtime applies it to the
/// devices the process sees, whatever was mounted. Otherwise a device list in
/// `NVIDIA_VISIBLE_DEVICES` is: the container runtime mounted exactly those devices, so its
/// card and MIG UUIDs name them in any namespace. Its ordinals are the host's, which a
/// container that mounted only them renumbers from 0; so an ordinal list is applied only
/// when the process sees more cards than the list names (the runtime did not select — a
/// bare host, a runtime without the NVIDIA hook), and is otherwise already in effect.
/// `all`, `void`, `none`, empty or a path (the device plugin's volume-mount strategy) name no
/// list and apply nothing: with `void`/`none` nothing is mounted, which the enumeration shows.
pub fn effective_mask<'a>(
    masks: Masks<'a>,
    host: &[DeviceIdentity],
) -> (Option<&'a str>, Option<&'static str>) {
    if masks.cuda.is_some() {
        return (masks.cuda, Some("CUDA_VISIBLE_DEVICES"));
    }
    let Some(list) = masks.nvidia.map(str::trim) else {
        return (None, None);
    };
    if list.is_empty()
        || list.starts_with('/')
        || ["all", "void", "none"].contains(&list.to_ascii_lowercase().as_str())
    {
        return (None, None);
    }
    let entries = mask_entries(Some(list)).unwrap_or_default();
    let by_ordinal = entries.first().is_some_and(|e| all_digits(e));
    let cards = host.iter().filter(|d| d.mig_uuid.is_none()).count();
    if by_ordinal && cards <= entries.len() {
        return (
            None,
            Some("NVIDIA_VISIBLE_DEVICES (applied by the container runtime)"),
        );
    }
    (masks.nvidia, Some("NVIDIA_VISIBLE_DEVICES"))
}

/// GPU-2: the report from the grant (when observed), else enumeration, else unobserved.
/// The evidence names the probe that enumerated (`probe`), why NVML did not when
/// `nvidia-smi` did (`probe_nvml`), the mask's variable, and the devices' compute modes.
pub fn report(
    requested: i64,
    masks: Masks<'_>,
    grant: Option<&DeliveredGrant>,
    probe: &dyn GpuProbe,
) -> GrantReport {
    let mut evidence = BTreeMap::new();
    let mut mask = masks.cuda;
    if let Some(n) = masks.nvidia {
        evidence.insert("nvidia_visible_devices".to_owned(), n.to_owned());
    }
    if let Some(g) = grant {
        evidence.insert("policy".to_owned(), g.policy.clone());
    }
    let (delivered, source, exclusive) = match grant {
        Some(g) if g.host == "observed" => (g.devices.clone(), GrantSource::Grant, g.exclusive),
        _ => {
            let probed = probe.host_devices();
            probed.evidence("probe", &mut evidence);
            match probed.answer {
                Observation::Unknown { reason, detail } => {
                    evidence.insert("enumeration".to_owned(), format!("{reason}: {detail}"));
                    return GrantReport {
                        requested,
                        delivered: Vec::new(),
                        source: GrantSource::Unobserved,
                        execution: "unknown",
                        exclusive: false,
                        mask: mask.map(str::to_owned),
                        peer_access: None,
                        problems: vec![format!(
                            "the GPU namespace could not be enumerated ({reason}: {detail})"
                        )],
                        evidence,
                    };
                }
                Observation::Known(host) => {
                    let (applied, variable) = effective_mask(masks, &host);
                    mask = applied.or(mask);
                    if let Some(v) = variable {
                        evidence.insert("mask_variable".to_owned(), v.to_owned());
                    }
                    let entries = mask_entries(applied);
                    (
                        apply_mask(&host, entries.as_deref()),
                        GrantSource::Enumeration,
                        false,
                    )
                }
            }
        }
    };
    let modes: Vec<String> = delivered
        .iter()
        .filter_map(|d| d.compute_mode.as_ref().map(|m| format!("{}={m}", d.id())))
        .collect();
    if !modes.is_empty() {
        evidence.insert("compute_mode".to_owned(), modes.join(", "));
    }
    let mut problems = Vec::new();
    let m = i64::try_from(delivered.len()).unwrap_or(i64::MAX);
    if m < requested {
        let ids = if delivered.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                delivered
                    .iter()
                    .map(DeviceIdentity::id)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        problems.push(format!(
            "requested {requested} device(s), delivered {m}{ids}"
        ));
    }
    GrantReport {
        requested,
        execution: if delivered.is_empty() { "cpu" } else { "gpu" },
        delivered,
        source,
        exclusive,
        mask: mask.map(str::to_owned),
        peer_access: None,
        problems,
        evidence,
    }
}

fn py_opt_str(v: Option<&str>) -> String {
    v.map_or_else(|| "None".to_owned(), py_repr_str)
}

/// GPU-4: whether every ordered pair of distinct delivered devices reads `OK`, and the probe
/// that read the matrix.
pub fn peer_access(devices: &[DeviceIdentity], probe: &dyn GpuProbe) -> Probed<bool> {
    if devices
        .iter()
        .any(|d| d.ordinal.is_none() || d.mig_uuid.is_some())
    {
        return Probed::from(
            "none",
            Observation::unknown(
                "malformed",
                "peer access needs whole physical devices with host ordinals",
            ),
        );
    }
    let probed = probe.p2p();
    let answer = match probed.answer {
        Observation::Known(matrix) => Observation::Known(all_pairs_ok(devices, &matrix)),
        Observation::Unknown { reason, detail } => Observation::Unknown { reason, detail },
    };
    Probed {
        answer,
        probe: probed.probe,
        fallback: probed.fallback,
    }
}

fn all_pairs_ok(devices: &[DeviceIdentity], matrix: &P2pMatrix) -> bool {
    let ordinals: Vec<i64> = devices.iter().filter_map(|d| d.ordinal).collect();
    for a in &ordinals {
        for b in &ordinals {
            let ok = a == b
                || usize::try_from(*b)
                    .ok()
                    .and_then(|j| matrix.get(&(*a, j)))
                    .is_some_and(|s| s == "OK");
            if !ok {
                return false;
            }
        }
    }
    true
}

/// GPU-3/4: the decision before opening a GPU node. ResourceUnavailable (exit 3, with a
/// remedy) when a hard requirement (`none`) meets a short, empty or unobservable grant, or
/// required peer access cannot be verified true.
pub fn verify_grant(
    node: &str,
    requested: i64,
    fallback: GpuFallback,
    requires_peer_access: bool,
    masks: Masks<'_>,
    grant: Option<&DeliveredGrant>,
    probe: &dyn GpuProbe,
) -> Result<GrantReport, VfError> {
    let mut r = report(requested, masks, grant, probe);
    let problems = r.problems.join("; ");
    if r.source == GrantSource::Unobserved {
        if fallback == GpuFallback::None {
            return Err(VfError::new(
                ErrorCode::ResourceUnavailable,
                format!("Node {node} requires {requested} GPU(s) but its grant cannot be verified: {problems}."),
            )
            .with_remedy("Run the node where the NVIDIA driver is mounted (libnvidia-ml.so.1, or nvidia-smi on PATH), or declare gpu_fallback = 'cpu' if the node can run without its devices."));
        }
        tracing::warn!(
            "node {node}: {problems} — opening it anyway (gpu_fallback='cpu'); execution is unknown, not a confirmed CPU run"
        );
        return Ok(r);
    }
    if !r.problems.is_empty() {
        if fallback == GpuFallback::None {
            return Err(VfError::new(
                ErrorCode::ResourceUnavailable,
                format!(
                    "Node {node} requires {requested} GPU(s); {problems} (mask {}, source {}).",
                    py_opt_str(r.mask.as_deref()),
                    r.source.as_str()
                ),
            )
            .with_remedy("Grant the node its devices (gpu_count on Kubernetes, --gpu-policy strict locally), or declare gpu_fallback = 'cpu' if it can run short."));
        }
        tracing::warn!(
            "node {node}: {problems}; running with execution={} (declared gpu_fallback='cpu')",
            r.execution
        );
    }
    if requires_peer_access && requested > 1 && r.problems.is_empty() {
        let probed = peer_access(&r.delivered, probe);
        probed.evidence("p2p_probe", &mut r.evidence);
        let read_by = if probed.probe == "nvml" {
            "NVML P2P status"
        } else {
            "nvidia-smi topo -p2p r"
        };
        let peer = probed.answer;
        r.peer_access = Some(peer.clone());
        match peer {
            Observation::Unknown { reason, detail } => {
                return Err(VfError::new(
                    ErrorCode::ResourceUnavailable,
                    format!("Node {node} requires peer access between its {requested} devices, which could not be verified ({reason}: {detail})."),
                )
                .with_remedy("Run the node where NVML or nvidia-smi can report the P2P topology, or drop requires_peer_access."));
            }
            Observation::Known(false) => {
                let ids: Vec<String> = r
                    .delivered
                    .iter()
                    .map(|d| match (&d.uuid, d.ordinal) {
                        (Some(u), _) => py_repr_str(u),
                        (None, Some(o)) => o.to_string(),
                        (None, None) => "None".to_owned(),
                    })
                    .collect();
                return Err(VfError::new(
                    ErrorCode::ResourceUnavailable,
                    format!("Node {node} requires peer access between its devices, and the delivered pair [{}] has none ({read_by}).", ids.join(", ")),
                )
                .with_remedy("Schedule the node on devices with NVLink/PCIe peer access (a topology constraint), or drop requires_peer_access if the component can run without it."));
            }
            Observation::Known(true) => {}
        }
    }
    Ok(r)
}

/// The worker's entry point (START-1 step 6): nothing unless the node is of a kind that
/// takes a GPU (`takes_gpu`: a processor, or a producer — the video readers decode on
/// NVDEC) with device type `gpu`; else [`verify_grant`] with the node's declarations, the
/// grant and the masks, and the report logged as one JSON line.
pub fn check_node(
    node: &str,
    takes_gpu: bool,
    device: &DeviceConfig,
    masks: Masks<'_>,
    probe: &dyn GpuProbe,
) -> Result<Option<GrantReport>, VfError> {
    if !takes_gpu || device.device_type != DeviceType::Gpu {
        return Ok(None);
    }
    let grant = match device.gpu_grant_json.as_deref().filter(|g| !g.is_empty()) {
        Some(raw) => Some(DeliveredGrant::parse(raw)?),
        None => None,
    };
    let report = verify_grant(
        node,
        device.gpu_count,
        device.gpu_fallback.unwrap_or(GpuFallback::Cpu),
        device.requires_peer_access,
        masks,
        grant.as_ref(),
        probe,
    )?;
    tracing::info!("node {node} GPU grant: {}", report.to_json());
    Ok(Some(report))
}
