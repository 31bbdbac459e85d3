//! What every reconcile shares ([`Context`]): the API client, the Event recorder, the
//! operator's configuration, metrics, the clock and the per-Flow failure counts the error
//! policy backs off by.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, ResourceExt};

use super::cache::Stores;
use super::demand::DemandObserver;
use super::metrics::Metrics;
use super::status::StatusConfig;
use crate::crd::Flow;
use crate::render::RenderConfig;

/// The reporting controller of Events and the field manager of writes.
pub const CONTROLLER_NAME: &str = "videoflow-operator";

/// Where "now" comes from: the system clock in the operator, a fixed instant in tests.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The system clock, truncated to whole seconds as `metav1.Time` stores it, so a condition
/// written and read back compares equal.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
    })
}

/// What every reconcile shares.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The one Event recorder of the process (its series cache aggregates repeats).
    pub recorder: Recorder,
    /// The operator's rendering defaults.
    pub render: RenderConfig,
    /// Status knobs.
    pub status: StatusConfig,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The clock.
    pub clock: Clock,
    /// Reads the broker's lag into `status.nodes[].demand`; `None` leaves demand untouched.
    pub demand: Option<Arc<DemandObserver>>,
    /// Consecutive failures per Flow, for the error policy's backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// The reflector stores of the running Controller (the controller's `run` sets them per
    /// term); `None` reads children with LISTs (the mocked-API tests).
    stores: RwLock<Option<Stores>>,
}

impl Context {
    /// A context over `client`; `instance` names this replica in Events (its pod name).
    pub fn new(
        client: Client,
        render: RenderConfig,
        status: StatusConfig,
        metrics: Arc<Metrics>,
        clock: Clock,
        instance: Option<String>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: CONTROLLER_NAME.to_owned(),
                instance,
            },
        );
        Context {
            client,
            recorder,
            render,
            status,
            metrics,
            clock,
            demand: None,
            failures: Mutex::new(HashMap::new()),
            stores: RwLock::new(None),
        }
    }

    /// The same context with a demand observer, which fills `status.nodes[].demand`.
    pub fn with_demand(mut self, observer: Arc<DemandObserver>) -> Self {
        self.demand = Some(observer);
        self
    }

    /// The reflector stores reads come from, when a Controller runs with them.
    pub fn stores(&self) -> Option<Stores> {
        self.stores.read().ok().and_then(|s| s.clone())
    }

    /// Sets (or clears) the stores reads come from.
    pub fn set_stores(&self, stores: Option<Stores>) {
        if let Ok(mut slot) = self.stores.write() {
            *slot = stores;
        }
    }

    /// Now, from the context's clock.
    pub fn now(&self) -> Timestamp {
        (self.clock)()
    }

    fn key(flow: &Flow) -> String {
        format!(
            "{}/{}",
            flow.namespace().unwrap_or_default(),
            flow.name_any()
        )
    }

    /// Counts a failed reconcile of `flow`; returns the consecutive count.
    pub fn count_failure(&self, flow: &Flow) -> u32 {
        let Ok(mut failures) = self.failures.lock() else {
            return 1;
        };
        let n = failures.entry(Self::key(flow)).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Resets the failure count of `flow` after a successful reconcile.
    pub fn forget_failures(&self, flow: &Flow) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(&Self::key(flow));
        }
    }
}
