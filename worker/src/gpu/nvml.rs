//! NVML, NVIDIA's management library, as the first GPU probe: devices by index and UUID,
//! MIG instances and their UUIDs, memory, compute mode, P2P status between cards, and the
//! utilisation samples behind the GPU metrics.
//!
//! Why a data seam ([`NvmlSource`] returning an [`Inventory`]): everything the grant check
//! and the metrics do with NVML's answers is pure, so a recorded enumeration (JSON) replays
//! it in a unit test on a machine without a GPU, and the live library ([`NvmlLibrary`]) is
//! only the part that talks to the driver.
//!
//! The live library is opened at run time (`libnvidia-ml.so.1`, the name the NVIDIA
//! container runtime mounts; the unversioned `.so` comes only with development packages).
//! Absent or unusable, the probe answers Unknown — never zero devices — and the grant check
//! asks `nvidia-smi` instead. A worker built without the `nvml` feature (the statically
//! linked musl build, which cannot `dlopen`) answers Unknown `unavailable`. Opening happens
//! once per process; every call blocks, so callers run it off the async runtime.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use videoflow_core::scaling::Observation;

use super::DeviceIdentity;

/// The library the live probe opens.
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// What NVML reports about one host: every card, its MIG instances, the P2P matrix.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Inventory {
    /// The driver version NVML reports (`""` when unread).
    #[serde(default)]
    pub driver_version: String,
    /// The cards in NVML index order.
    pub cards: Vec<Card>,
    /// P2P read status for each ordered pair of distinct cards.
    #[serde(default)]
    pub p2p: Vec<P2pCell>,
}

/// One physical card.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Card {
    /// NVML's index (the ordinal `nvidia-smi` prints).
    pub index: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Framebuffer memory, when readable.
    #[serde(default)]
    pub memory_total_bytes: Option<u64>,
    /// Framebuffer memory in use, when readable.
    #[serde(default)]
    pub memory_used_bytes: Option<u64>,
    /// `default` (shared), `exclusive_process`, `exclusive_thread` or `prohibited`.
    #[serde(default)]
    pub compute_mode: Option<String>,
    /// MIG mode is on (its instances are then the schedulable devices).
    #[serde(default)]
    pub mig_enabled: bool,
    /// The MIG instances, in NVML's index order.
    #[serde(default)]
    pub mig: Vec<MigInstance>,
}

/// One MIG instance of a card.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MigInstance {
    /// `MIG-…`.
    pub uuid: String,
    /// NVML's name, e.g. `NVIDIA H200 MIG 1g.18gb`.
    pub name: String,
    /// The instance's memory, when readable.
    #[serde(default)]
    pub memory_total_bytes: Option<u64>,
    /// Its memory in use, when readable.
    #[serde(default)]
    pub memory_used_bytes: Option<u64>,
}

/// One cell of the P2P read matrix, in `nvidia-smi topo -p2p r`'s words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct P2pCell {
    /// Row card index.
    pub from: u32,
    /// Column card index.
    pub to: u32,
    /// `OK`, `CNS`, `GNS`, `TNS`, `NS` or `U`.
    pub status: String,
}

/// One device's live figures; `None` where NVML does not report it (a MIG instance has no
/// utilisation counters of its own), never a zero standing in for "unknown".
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DeviceSample {
    /// The device id the grant report shows (MIG UUID, else card UUID).
    pub id: String,
    /// Fraction of time a kernel ran (0..1).
    #[serde(default)]
    pub utilization: Option<f64>,
    /// Memory in use.
    #[serde(default)]
    pub memory_used_bytes: Option<u64>,
    /// Memory in all.
    #[serde(default)]
    pub memory_total_bytes: Option<u64>,
    /// Fraction of time NVDEC was busy (0..1).
    #[serde(default)]
    pub decoder_utilization: Option<f64>,
    /// Fraction of time NVENC was busy (0..1).
    #[serde(default)]
    pub encoder_utilization: Option<f64>,
}

/// Where NVML's answers come from: the live library or a recording.
pub trait NvmlSource: Send + Sync {
    /// The host's cards and MIG instances, or Unknown (`missing` library, `unavailable` in
    /// this build, `failed` init or read).
    fn inventory(&self) -> Observation<Inventory>;
    /// Live figures for the devices with these ids (card or MIG UUIDs), in that order.
    fn samples(&self, ids: &[String]) -> Observation<Vec<DeviceSample>>;
}

impl Inventory {
    /// The host's devices as grant identities, in the order `nvidia-smi -L` prints them:
    /// each card, then its MIG instances (which carry the card's ordinal and UUID).
    pub fn identities(&self) -> Vec<DeviceIdentity> {
        let mut out = Vec::new();
        for card in &self.cards {
            let base = DeviceIdentity {
                ordinal: Some(i64::from(card.index)),
                uuid: Some(card.uuid.clone()),
                product: card.name.clone(),
                memory_bytes: card.memory_total_bytes.and_then(|m| i64::try_from(m).ok()),
                compute_mode: card.compute_mode.clone(),
                ..DeviceIdentity::default()
            };
            out.push(base.clone());
            for mig in &card.mig {
                out.push(DeviceIdentity {
                    mig_uuid: Some(mig.uuid.clone()),
                    mig_profile: mig_profile(&mig.name),
                    memory_bytes: mig.memory_total_bytes.and_then(|m| i64::try_from(m).ok()),
                    ..base.clone()
                });
            }
        }
        out
    }

    /// The P2P matrix in the shape [`super::parse_p2p_matrix`] gives `nvidia-smi`'s:
    /// `(row ordinal, column index) → status`, `X` on the diagonal.
    pub fn p2p_matrix(&self) -> BTreeMap<(i64, usize), String> {
        let mut out = BTreeMap::new();
        for card in &self.cards {
            if let Ok(j) = usize::try_from(card.index) {
                out.insert((i64::from(card.index), j), "X".to_owned());
            }
        }
        for cell in &self.p2p {
            if let Ok(j) = usize::try_from(cell.to) {
                out.insert((i64::from(cell.from), j), cell.status.clone());
            }
        }
        out
    }
}

/// The profile in a MIG instance's NVML name (`NVIDIA H200 MIG 1g.18gb` → `1g.18gb`), the
/// word `nvidia-smi -L` prints after `MIG`.
pub fn mig_profile(name: &str) -> Option<String> {
    let (_, profile) = name.rsplit_once("MIG ")?;
    let profile = profile.trim();
    (!profile.is_empty()).then(|| profile.to_owned())
}

/// Where two enumerations of one host disagree: ordinal, UUIDs, product, MIG profile, and
/// memory to the MiB (`nvidia-smi` prints MiB; `-L` prints no MIG memory, so a side without
/// it is not a difference). Empty when they agree.
pub fn differences(nvml: &[DeviceIdentity], smi: &[DeviceIdentity]) -> Vec<String> {
    let mut out = Vec::new();
    if nvml.len() != smi.len() {
        out.push(format!(
            "NVML lists {} device(s), nvidia-smi {}",
            nvml.len(),
            smi.len()
        ));
    }
    for (a, b) in nvml.iter().zip(smi) {
        let id = a.id();
        let mut field = |name: &str, x: String, y: String| {
            if x != y {
                out.push(format!("{id}: {name} is {x} by NVML, {y} by nvidia-smi"));
            }
        };
        field(
            "ordinal",
            format!("{:?}", a.ordinal),
            format!("{:?}", b.ordinal),
        );
        field("uuid", format!("{:?}", a.uuid), format!("{:?}", b.uuid));
        field(
            "mig_uuid",
            format!("{:?}", a.mig_uuid),
            format!("{:?}", b.mig_uuid),
        );
        field("product", a.product.clone(), b.product.clone());
        field(
            "mig_profile",
            format!("{:?}", a.mig_profile),
            format!("{:?}", b.mig_profile),
        );
        if let (Some(x), Some(y)) = (a.memory_bytes, b.memory_bytes) {
            let (x, y) = (x >> 20, y >> 20);
            if x.abs_diff(y) > 1 {
                out.push(format!(
                    "{id}: memory is {x} MiB by NVML, {y} MiB by nvidia-smi"
                ));
            }
        }
    }
    out
}

/// A recorded NVML answer: replays an enumeration captured elsewhere (a unit test, a
/// fixture from a GPU machine).
#[derive(Debug, Clone)]
pub struct Recorded {
    /// What [`NvmlSource::inventory`] answers.
    pub inventory: Observation<Inventory>,
    /// The samples, by device id; an id not here is left out of the answer.
    pub samples: Vec<DeviceSample>,
}

impl NvmlSource for Recorded {
    fn inventory(&self) -> Observation<Inventory> {
        self.inventory.clone()
    }

    fn samples(&self, ids: &[String]) -> Observation<Vec<DeviceSample>> {
        if let Observation::Unknown { reason, detail } = &self.inventory {
            return Observation::unknown(reason.clone(), detail.clone());
        }
        Observation::Known(
            ids.iter()
                .filter_map(|id| self.samples.iter().find(|s| &s.id == id).cloned())
                .collect(),
        )
    }
}

/// The live library, opened on first use from [`NvmlLibrary::path`] and kept for the
/// process (a failed open is kept too: it is reported, not retried per call).
#[derive(Debug)]
pub struct NvmlLibrary {
    /// The file `dlopen` is given (a bare name searches the loader's path).
    pub path: String,
    #[cfg(feature = "nvml")]
    opened: std::sync::OnceLock<Result<nvml_wrapper::Nvml, (String, String)>>,
}

impl Default for NvmlLibrary {
    fn default() -> Self {
        NvmlLibrary::at(NVML_LIBRARY)
    }
}

impl NvmlLibrary {
    /// A library to be opened from `path`.
    pub fn at(path: impl Into<String>) -> Self {
        NvmlLibrary {
            path: path.into(),
            #[cfg(feature = "nvml")]
            opened: std::sync::OnceLock::new(),
        }
    }

    /// The process-wide library, so the grant check and the metrics share one
    /// initialisation: opened from `path` (`VF_NVML_LIBRARY`, else [`NVML_LIBRARY`]) by the
    /// first caller; later callers get that one.
    pub fn shared(path: Option<&str>) -> &'static NvmlLibrary {
        static SHARED: std::sync::OnceLock<NvmlLibrary> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| NvmlLibrary::at(path.unwrap_or(NVML_LIBRARY)))
    }
}

#[cfg(not(feature = "nvml"))]
impl NvmlSource for NvmlLibrary {
    fn inventory(&self) -> Observation<Inventory> {
        Observation::unknown("unavailable", UNAVAILABLE)
    }

    fn samples(&self, _ids: &[String]) -> Observation<Vec<DeviceSample>> {
        Observation::unknown("unavailable", UNAVAILABLE)
    }
}

/// Why a worker without the `nvml` feature has no NVML.
#[cfg(not(feature = "nvml"))]
const UNAVAILABLE: &str =
    "this worker is built without NVML (the statically linked build cannot load libnvidia-ml.so.1)";

#[cfg(feature = "nvml")]
mod live {
    use nvml_wrapper::enum_wrappers::device::{ComputeMode, P2pCapabilitiesIndex, P2pStatus};
    use nvml_wrapper::error::NvmlError;
    use nvml_wrapper::{Device, Nvml};
    use videoflow_core::scaling::Observation;

    use super::{Card, DeviceSample, Inventory, MigInstance, NvmlLibrary, NvmlSource, P2pCell};

    impl NvmlLibrary {
        fn open(&self) -> Result<&Nvml, (String, String)> {
            self.opened
                .get_or_init(|| {
                    Nvml::builder()
                        .lib_path(std::ffi::OsStr::new(&self.path))
                        .init()
                        .map_err(|e| open_error(&self.path, e))
                })
                .as_ref()
                .map_err(Clone::clone)
        }
    }

    /// A library that cannot be opened is `missing` (no driver here); one that opened but
    /// would not initialise is `failed`.
    fn open_error(path: &str, e: NvmlError) -> (String, String) {
        match e {
            NvmlError::LibloadingError(
                inner @ (libloading::Error::DlOpen { .. } | libloading::Error::DlOpenUnknown),
            ) => (
                "missing".to_owned(),
                format!("{path} could not be loaded (no NVIDIA driver): {inner}"),
            ),
            other => (
                "failed".to_owned(),
                format!("NVML from {path} did not initialise: {other}"),
            ),
        }
    }

    fn failed(what: &str, e: &NvmlError) -> Observation<Inventory> {
        Observation::unknown("failed", format!("NVML {what}: {e}"))
    }

    fn compute_mode(d: &Device<'_>) -> Option<String> {
        d.compute_mode().ok().map(|m| {
            match m {
                ComputeMode::Default => "default",
                ComputeMode::ExclusiveThread => "exclusive_thread",
                ComputeMode::Prohibited => "prohibited",
                ComputeMode::ExclusiveProcess => "exclusive_process",
            }
            .to_owned()
        })
    }

    /// `nvidia-smi topo -p2p`'s legend for NVML's status.
    fn p2p_word(s: Result<P2pStatus, NvmlError>) -> &'static str {
        match s {
            Ok(P2pStatus::Ok) => "OK",
            Ok(P2pStatus::ChipsetNotSupported) => "CNS",
            Ok(P2pStatus::GpuNotSupported) => "GNS",
            Ok(P2pStatus::IohTopologyNotSupported) => "TNS",
            Ok(P2pStatus::DisabledByRegkey | P2pStatus::NotSupported) => "NS",
            Ok(P2pStatus::Unknown) | Err(_) => "U",
        }
    }

    fn ratio(percent: u32) -> f64 {
        f64::from(percent) / 100.0
    }

    impl NvmlSource for NvmlLibrary {
        fn inventory(&self) -> Observation<Inventory> {
            let nvml = match self.open() {
                Ok(n) => n,
                Err((reason, detail)) => return Observation::Unknown { reason, detail },
            };
            let count = match nvml.device_count() {
                Ok(c) => c,
                Err(e) => return failed("device count", &e),
            };
            let mut handles = Vec::new();
            let mut cards = Vec::new();
            for index in 0..count {
                let d = match nvml.device_by_index(index) {
                    Ok(d) => d,
                    Err(e) => return failed(&format!("device {index}"), &e),
                };
                let uuid = match d.uuid() {
                    Ok(u) => u,
                    Err(e) => return failed(&format!("device {index} UUID"), &e),
                };
                let memory = d.memory_info().ok();
                let mig_enabled = d.mig_mode().is_ok_and(|m| m.current == 1);
                let mut mig = Vec::new();
                if mig_enabled {
                    for slot in 0..d.mig_device_count().unwrap_or(0) {
                        // Unused slots answer NotFound; only populated ones are devices.
                        let Ok(m) = d.mig_device_by_index(slot) else {
                            continue;
                        };
                        let Ok(mig_uuid) = m.uuid() else { continue };
                        let mem = m.memory_info().ok();
                        mig.push(MigInstance {
                            uuid: mig_uuid,
                            name: m.name().unwrap_or_default(),
                            memory_total_bytes: mem.as_ref().map(|x| x.total),
                            memory_used_bytes: mem.as_ref().map(|x| x.used),
                        });
                    }
                }
                cards.push(Card {
                    index: d.index().unwrap_or(index),
                    uuid,
                    name: d.name().unwrap_or_default(),
                    memory_total_bytes: memory.as_ref().map(|m| m.total),
                    memory_used_bytes: memory.as_ref().map(|m| m.used),
                    compute_mode: compute_mode(&d),
                    mig_enabled,
                    mig,
                });
                handles.push(d);
            }
            let mut p2p = Vec::new();
            for (a, da) in cards.iter().zip(&handles) {
                for (b, db) in cards.iter().zip(&handles) {
                    if a.index != b.index {
                        p2p.push(P2pCell {
                            from: a.index,
                            to: b.index,
                            status: p2p_word(da.p2p_status(db, P2pCapabilitiesIndex::Read))
                                .to_owned(),
                        });
                    }
                }
            }
            Observation::Known(Inventory {
                driver_version: nvml.sys_driver_version().unwrap_or_default(),
                cards,
                p2p,
            })
        }

        fn samples(&self, ids: &[String]) -> Observation<Vec<DeviceSample>> {
            let nvml = match self.open() {
                Ok(n) => n,
                Err((reason, detail)) => return Observation::Unknown { reason, detail },
            };
            let mut out = Vec::new();
            for id in ids {
                let Ok(d) = nvml.device_by_uuid(id.as_str()) else {
                    continue;
                };
                let memory = d.memory_info().ok();
                out.push(DeviceSample {
                    id: id.clone(),
                    utilization: d.utilization_rates().ok().map(|u| ratio(u.gpu)),
                    memory_used_bytes: memory.as_ref().map(|m| m.used),
                    memory_total_bytes: memory.as_ref().map(|m| m.total),
                    decoder_utilization: d.decoder_utilization().ok().map(|u| ratio(u.utilization)),
                    encoder_utilization: d.encoder_utilization().ok().map(|u| ratio(u.utilization)),
                });
            }
            Observation::Known(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profile_is_the_word_after_mig() {
        assert_eq!(
            mig_profile("NVIDIA H200 MIG 1g.18gb").as_deref(),
            Some("1g.18gb")
        );
        assert_eq!(
            mig_profile("NVIDIA A100-SXM4-40GB MIG 3g.20gb+me").as_deref(),
            Some("3g.20gb+me")
        );
        assert_eq!(mig_profile("NVIDIA H200"), None);
        assert_eq!(mig_profile("NVIDIA H200 MIG "), None);
    }

    /// What `videoflow-worker gpu` prints under `nvml.inventory` on a GPU machine reads back
    /// as the same inventory, so a recording from real hardware replays here; fields a
    /// recording leaves out take their defaults.
    #[test]
    fn an_inventory_recording_round_trips_through_json() {
        let inv = Inventory {
            driver_version: "570.86".to_owned(),
            cards: vec![Card {
                index: 0,
                uuid: "GPU-aaaa".to_owned(),
                name: "NVIDIA H200".to_owned(),
                memory_total_bytes: Some(150_754_820_096),
                memory_used_bytes: Some(0),
                compute_mode: Some("default".to_owned()),
                mig_enabled: true,
                mig: vec![MigInstance {
                    uuid: "MIG-bbbb".to_owned(),
                    name: "NVIDIA H200 MIG 1g.18gb".to_owned(),
                    memory_total_bytes: Some(19_327_352_832),
                    memory_used_bytes: None,
                }],
            }],
            p2p: Vec::new(),
        };
        let text = serde_json::to_string(&inv).expect("serialises");
        let back: Inventory = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back, inv);
        let sparse: Inventory =
            serde_json::from_str(r#"{"cards": [{"index": 1, "uuid": "GPU-c", "name": "X"}]}"#)
                .expect("defaults");
        assert_eq!(sparse.identities()[0].ordinal, Some(1));
        assert!(sparse.p2p.is_empty() && !sparse.cards[0].mig_enabled);
    }

    /// GPU-2 with NVML: a library that is not there is Unknown `missing` — never an empty,
    /// "zero devices" inventory.
    #[cfg(feature = "nvml")]
    #[test]
    fn gpu_2_absent_library_is_unobserved_not_zero_devices() {
        let lib = NvmlLibrary::at("/nonexistent/videoflow-test/libnvidia-ml.so.1");
        match lib.inventory() {
            Observation::Unknown { reason, detail } => {
                assert_eq!(reason, "missing", "{detail}");
                assert!(detail.contains("libnvidia-ml.so.1"), "{detail}");
            }
            Observation::Known(inv) => panic!("an absent library answered {inv:?}"),
        }
        assert!(matches!(
            lib.samples(&["GPU-x".to_owned()]),
            Observation::Unknown { .. }
        ));
    }

    /// A file that opens but is not NVML (here the C library) did not initialise: `failed`,
    /// which is still Unknown.
    #[cfg(feature = "nvml")]
    #[test]
    fn gpu_2_a_library_without_nvml_symbols_is_failed() {
        let lib = NvmlLibrary::at("libc.so.6");
        match lib.inventory() {
            Observation::Unknown { reason, .. } => assert_eq!(reason, "failed"),
            Observation::Known(inv) => panic!("libc answered as NVML: {inv:?}"),
        }
    }

    #[cfg(not(feature = "nvml"))]
    #[test]
    fn gpu_2_a_build_without_nvml_reports_it_unavailable() {
        match NvmlLibrary::default().inventory() {
            Observation::Unknown { reason, detail } => {
                assert_eq!(reason, "unavailable");
                assert!(detail.contains("without NVML"), "{detail}");
            }
            Observation::Known(inv) => panic!("{inv:?}"),
        }
    }
}
