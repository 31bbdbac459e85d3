//! Prometheus metrics of the controller: reconciles, errors by variant, durations, and flows
//! by phase, in the text exposition format (`GET /metrics`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::crd::FlowPhase;

/// Labels of the error counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ErrorLabels {
    /// [`super::ReconcileError::metric_label`].
    pub error: String,
}

/// Labels of the phase gauge.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The phase's name.
    pub phase: String,
}

/// The controller's metrics; cheap to update from concurrent reconciles.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    errors: Family<ErrorLabels, Counter>,
    duration: Histogram,
    flows: Family<PhaseLabels, Gauge>,
    /// Each Flow's last phase (`namespace/name`), so the gauge counts Flows, not reconciles.
    phases: Mutex<BTreeMap<String, FlowPhase>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric under the `videoflow_operator` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("videoflow_operator");
        let reconciles = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = Histogram::new([
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ]);
        let flows = Family::<PhaseLabels, Gauge>::default();
        registry.register("reconciles", "Reconciles started", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by error variant",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            duration.clone(),
        );
        registry.register("flows", "Flows by phase", flows.clone());
        Metrics {
            registry,
            reconciles,
            errors,
            duration,
            flows,
            phases: Mutex::new(BTreeMap::new()),
        }
    }

    /// A reconcile finished after `elapsed`; `error` is its metric label when it failed.
    pub fn reconciled(&self, elapsed: Duration, error: Option<String>) {
        self.reconciles.inc();
        self.duration.observe(elapsed.as_secs_f64());
        if let Some(error) = error {
            self.errors.get_or_create(&ErrorLabels { error }).inc();
        }
    }

    /// Records a Flow's phase (`None`: the Flow is gone) and refreshes the gauge.
    pub fn set_phase(&self, flow: &str, phase: Option<FlowPhase>) {
        let Ok(mut phases) = self.phases.lock() else {
            return;
        };
        match phase {
            Some(p) => phases.insert(flow.to_owned(), p),
            None => phases.remove(flow),
        };
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        for p in phases.values() {
            *counts.entry(format!("{p:?}")).or_default() += 1;
        }
        for p in [
            FlowPhase::Pending,
            FlowPhase::Admitted,
            FlowPhase::Provisioning,
            FlowPhase::Running,
            FlowPhase::Succeeded,
            FlowPhase::Failed,
            FlowPhase::Degraded,
        ] {
            let name = format!("{p:?}");
            let n = counts.get(&name).copied().unwrap_or(0);
            self.flows
                .get_or_create(&PhaseLabels { phase: name })
                .set(n);
        }
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
