//! The runtime guards wired into START-1: the GPU and asset checks (step 6), the health
//! server (step 9) and the progress deadline with its watchdog (step 10).

use std::sync::Arc;
use std::time::Duration;

use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::GpuFallback;
use videoflow_core::scaling::Observation;

use crate::broker::{BoundDurable, Broker};
use crate::config::WorkerConfig;
use crate::gpu::nvml::{NvmlLibrary, NvmlSource};
use crate::gpu::{self, HostProbe, Masks, NvidiaSmi};
use crate::health::{self, HealthServer};
use crate::nodes::GpuPlacement;
use crate::supervision::{
    PendingProbe, ProgressDeadline, ProgressWatchdog, exit_process, monotonic_clock,
};

/// Bound on one pending-work read from the deadline (the watchdog must never wait forever).
const PENDING_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// START-1 step 6: the GPU grant check (processors and producers with
/// `VF_DEVICE_TYPE=gpu`), then the asset check, both off the async runtime (they load NVML
/// or run `nvidia-smi`, and hash files). A checked GPU node's `/metrics` then carries its
/// granted devices' figures. Returns what the node may run on.
pub(crate) async fn device_checks(
    cfg: &Arc<WorkerConfig>,
    takes_gpu: bool,
) -> Result<GpuPlacement, VfError> {
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || {
        let device = &cfg.device;
        let probe = HostProbe {
            nvml: NvmlLibrary::shared(device.nvml_library.as_deref()),
            smi: NvidiaSmi {
                path: device.path.clone(),
                ..NvidiaSmi::default()
            },
        };
        let masks = Masks {
            cuda: device.cuda_visible_devices.as_deref(),
            nvidia: device.nvidia_visible_devices.as_deref(),
        };
        let report = gpu::check_node(&cfg.node_name, takes_gpu, device, masks, &probe)?;
        let fallback = device.gpu_fallback.unwrap_or(GpuFallback::Cpu);
        let placement = report
            .as_ref()
            .map_or(GpuPlacement::Cpu, |r| r.placement(fallback));
        if let (Some(report), Some(state)) = (report, health::global()) {
            let node = cfg.node_name.clone();
            let ids: Vec<String> = report.delivered.iter().map(|d| d.id()).collect();
            let nvml = NvmlLibrary::shared(device.nvml_library.as_deref());
            state.set_extra_metrics(move || gpu::metrics::render(&node, &ids, &nvml.samples(&ids)));
        }
        crate::assets::verify_assets(
            &cfg.node_name,
            &crate::assets::hostname(device.hostname.as_deref()),
            &device.assets,
        )?;
        Ok(placement)
    })
    .await
    .map_err(|e| VfError::new(ErrorCode::Unknown, format!("device checks: {e}")))?
}

/// START-1 step 9: the health server when `VF_HEALTH_PORT > 0`; readiness also requires the
/// broker connection to be up.
pub(crate) async fn start_health(
    cfg: &WorkerConfig,
    broker: &Broker,
) -> Result<Option<HealthServer>, VfError> {
    let Some(state) = health::global() else {
        return Ok(None);
    };
    let client = broker.client().clone();
    state.set_broker_probe(move || {
        client.connection_state() == async_nats::connection::State::Connected
    });
    if cfg.health_port <= 0 {
        return Ok(None);
    }
    let port = u16::try_from(cfg.health_port).map_err(|_| {
        VfError::new(
            ErrorCode::Config,
            format!("VF_HEALTH_PORT={} is not a TCP port.", cfg.health_port),
        )
        .with_remedy("Use a port between 1 and 65535, or 0 to disable the health server.")
    })?;
    health::serve(state.clone(), port).await.map(Some)
}

/// START-1 step 10 for a non-producer: the progress deadline over the parents' durables and,
/// with a positive interval and timeout, its watchdog (SUP-1/2). The watchdog is started
/// only once `open()` returned ([`Supervision::opened`]).
pub(crate) struct Supervision {
    pub(crate) deadline: Arc<ProgressDeadline>,
    watchdog: Option<ProgressWatchdog>,
}

impl Supervision {
    pub(crate) fn new(
        cfg: &WorkerConfig,
        broker: &Broker,
        durables: &[BoundDurable],
    ) -> Result<Self, VfError> {
        let deadline = Arc::new(ProgressDeadline::new(
            &cfg.node_name,
            cfg.progress_timeout_seconds,
            pending_probe(broker.clone(), durables.to_vec()),
            monotonic_clock(),
        ));
        let watchdog = if cfg.watchdog_interval_seconds > 0.0 && cfg.progress_timeout_seconds > 0.0
        {
            Some(ProgressWatchdog::new(
                deadline.clone(),
                cfg.watchdog_interval_seconds,
                exit_process(cfg.termination_log.clone()),
                &cfg.node_name,
            )?)
        } else {
            None
        };
        Ok(Supervision { deadline, watchdog })
    }

    /// `open()` returned: reset the silence clock, start the watchdog (LOOP-1).
    pub(crate) fn opened(&mut self) -> Result<(), VfError> {
        self.deadline.record_progress();
        if let Some(w) = &mut self.watchdog {
            w.start()?;
        }
        Ok(())
    }

    /// Before `close()`: stop the watchdog (LOOP-1).
    pub(crate) fn closing(&mut self) {
        if let Some(w) = &mut self.watchdog {
            w.stop();
        }
    }

    /// The loop's own check after each group. Within the deadline it is a clock read; past
    /// it the probe blocks this thread until a task on the runtime answers, so it runs on
    /// the blocking pool while the loop awaits it (on a light node's current-thread runtime
    /// the loop's thread is the one that must run that task).
    pub(crate) async fn check(&self) -> Result<(), VfError> {
        if self.deadline.within() {
            return Ok(());
        }
        let deadline = self.deadline.clone();
        tokio::task::spawn_blocking(move || deadline.check())
            .await
            .unwrap_or_else(|e| {
                Err(VfError::new(
                    ErrorCode::Runtime,
                    format!("the progress deadline check did not complete: {e}"),
                ))
            })
    }
}

/// Σ over parents of `num_pending + num_ack_pending` (which includes every delivery held
/// locally: fetched and unacked is ack-pending). Runs on the async runtime but is awaited
/// from a plain thread with a bound, so a wedged runtime reads as Unknown, not as a hang.
fn pending_probe(broker: Broker, durables: Vec<BoundDurable>) -> PendingProbe {
    let handle = tokio::runtime::Handle::current();
    Arc::new(move || {
        let (tx, rx) = std::sync::mpsc::channel();
        let (b, ds) = (broker.clone(), durables.clone());
        handle.spawn(async move {
            let mut total: i64 = 0;
            for d in &ds {
                match d.observe(&b).await {
                    Observation::Known(c) => {
                        let n = c.num_pending.saturating_add(c.num_ack_pending);
                        total = total.saturating_add(i64::try_from(n).unwrap_or(i64::MAX));
                    }
                    Observation::Unknown { reason, detail } => {
                        let _ = tx.send(Observation::Unknown { reason, detail });
                        return;
                    }
                }
            }
            let _ = tx.send(Observation::Known(total));
        });
        rx.recv_timeout(PENDING_READ_TIMEOUT).unwrap_or_else(|_| {
            Observation::unknown(
                "timeout",
                format!(
                    "the pending-work query did not answer within {}s",
                    PENDING_READ_TIMEOUT.as_secs()
                ),
            )
        })
    })
}
