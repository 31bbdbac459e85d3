//! Run teardown (STREAM-9, STREAM-14): `videoflow-worker teardown` and the local runner's
//! cleanup.
//!
//! Why by owner metadata and never by name: `vf-f-r-x-n` is both run `r` node `x-n` and run
//! `r-x` node `n`, so a name prefix can delete another run's streams. A stream is this run's
//! iff its labels carry the raw flow and run ids verbatim; an unlabelled stream iff its data
//! subject `vf.<flow>.<run>.<node>` names the sanitized ids token for token. The flow-scoped
//! DLQ carries no run label and its subject is not a data subject, so it always stays (it
//! ages out after 7 days). A listing that fails or stops short is an incomplete cleanup
//! (exit 3), never "nothing to delete".
//!
//! The run's records in a durable shared run ledger (`file://`, `redis://`) go too: every key
//! and log under `vf/{flow}/{run}/` (§11.2's layout, raw ids), found by scanning that prefix —
//! the trailing `/` keeps run `r1` from matching run `r1-x`. Ids containing `/` make the
//! prefix ambiguous (flow `a` run `b/c` and flow `a/b` run `c` share `vf/a/b/`), so such a
//! ledger is left alone and the cleanup reported incomplete, naming why.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::naming::{self, LABEL_FLOW_ID, LABEL_RUN_ID};

use crate::broker::{self, Broker};
use crate::config::TeardownConfig;
use crate::store::{Purged, RuntimeStore, ledger::run_prefix};

/// Bound on listing and on each delete.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What a teardown did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cleanup {
    /// Streams confirmed gone (their consumers with them).
    pub removed_streams: Vec<String>,
    /// Run-owned consumers deleted from streams the run does not own (`stream/durable`).
    pub removed_consumers: Vec<String>,
    /// The run ledger's keys and logs deleted (`None`: no ledger was purged — none was
    /// given, or a `memory://` one, which dies with its process).
    pub ledger: Option<Purged>,
    /// Owned objects whose delete failed.
    pub remaining: Vec<String>,
    /// Why the cleanup is incomplete (empty when complete).
    pub reasons: Vec<String>,
}

impl Cleanup {
    /// Complete iff nothing remains and every listing was read to its end.
    pub fn complete(&self) -> bool {
        self.remaining.is_empty() && self.reasons.is_empty()
    }

    /// The incomplete cleanup as an error (exit 3).
    pub fn into_result(self, flow: &str, run: &str) -> Result<Cleanup, VfError> {
        if self.complete() {
            return Ok(self);
        }
        Err(VfError::new(
            ErrorCode::BrokerUnavailable,
            format!(
                "teardown of flow {flow} run {run} is incomplete: {}",
                self.reasons.join("; ")
            ),
        )
        .with_remedy(
            "Re-run the teardown; it deletes only what this run owns and is safe to repeat.",
        )
        .with_context("remaining", self.remaining.join(", ")))
    }
}

/// Whether a stream's labels or data subjects say it belongs to (flow, run).
pub fn owns_stream(config: &async_nats::jetstream::stream::Config, flow: &str, run: &str) -> bool {
    let m = &config.metadata;
    if m.contains_key(LABEL_FLOW_ID) || m.contains_key(LABEL_RUN_ID) {
        return m.get(LABEL_FLOW_ID).map(String::as_str) == Some(flow)
            && m.get(LABEL_RUN_ID).map(String::as_str) == Some(run);
    }
    let (f, r) = (naming::sanitize(flow), naming::sanitize(run));
    let owners: Vec<bool> = config
        .subjects
        .iter()
        .filter_map(|s| {
            let tokens: Vec<&str> = s.split('.').collect();
            // vf.<flow>.<run>.<node> or vf.<flow>.<run>.<node>._eos
            let data = tokens.len() == 4 || (tokens.len() == 5 && tokens[4] == "_eos");
            (data && tokens[0] == "vf" && !tokens[3].starts_with('_'))
                .then(|| tokens[1] == f && tokens[2] == r)
        })
        .collect();
    !owners.is_empty() && owners.iter().all(|o| *o)
}

/// Deletes every stream (with its consumers) and every consumer this run owns, keeping the
/// flow's DLQ.
pub async fn teardown_run(broker: &Broker, flow: &str, run: &str) -> Cleanup {
    let js = broker.jetstream();
    let mut out = Cleanup::default();
    let mut configs = Vec::new();
    let listing = tokio::time::timeout(CALL_TIMEOUT, async {
        let mut streams = js.streams();
        while let Some(item) = streams.next().await {
            match item {
                Ok(info) => configs.push(info.config),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    })
    .await;
    match listing {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            out.reasons.push(format!("stream listing failed: {e}"));
            return out;
        }
        Err(_) => {
            out.reasons
                .push("stream listing did not finish within 30 s".to_owned());
            return out;
        }
    }
    for config in &configs {
        let name = config.name.clone();
        if owns_stream(config, flow, run) {
            match tokio::time::timeout(CALL_TIMEOUT, js.delete_stream(&name)).await {
                Ok(Ok(_)) => out.removed_streams.push(name),
                Ok(Err(e)) if e.to_string().contains("not found") => out.removed_streams.push(name),
                Ok(Err(e)) => {
                    out.reasons.push(format!("{name}: {e}"));
                    out.remaining.push(name);
                }
                Err(_) => {
                    out.reasons.push(format!("{name}: delete timed out"));
                    out.remaining.push(name);
                }
            }
        } else if config.metadata.get(LABEL_FLOW_ID).map(String::as_str) == Some(flow) {
            // A flow-level stream (the DLQ) stays, but a consumer this run left on it goes.
            delete_owned_consumers(broker, &name, flow, run, &mut out).await;
        }
    }
    out
}

async fn delete_owned_consumers(
    broker: &Broker,
    stream: &str,
    flow: &str,
    run: &str,
    out: &mut Cleanup,
) {
    let Ok(Ok(s)) =
        tokio::time::timeout(CALL_TIMEOUT, broker.jetstream().get_stream_no_info(stream)).await
    else {
        out.reasons
            .push(format!("{stream}: consumer listing failed"));
        return;
    };
    let mut owned = Vec::new();
    let mut consumers = s.consumers();
    let listed = tokio::time::timeout(CALL_TIMEOUT, async {
        while let Some(item) = consumers.next().await {
            let info = item.map_err(|e| e.to_string())?;
            let m = &info.config.metadata;
            if m.get(LABEL_FLOW_ID).map(String::as_str) == Some(flow)
                && m.get(LABEL_RUN_ID).map(String::as_str) == Some(run)
            {
                owned.push(info.name.clone());
            }
        }
        Ok::<(), String>(())
    })
    .await;
    match listed {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            return out
                .reasons
                .push(format!("{stream}: consumer listing failed: {e}"));
        }
        Err(_) => {
            return out
                .reasons
                .push(format!("{stream}: consumer listing timed out"));
        }
    }
    for name in owned {
        let label = format!("{stream}/{name}");
        match s.delete_consumer(&name).await {
            Ok(_) => out.removed_consumers.push(label),
            Err(e) => {
                out.reasons.push(format!("{label}: {e}"));
                out.remaining.push(label);
            }
        }
    }
}

/// Deletes the run's records from its run ledger: every key and log under
/// `vf/{flow}/{run}/` ([`run_prefix`]). A `memory://` ledger holds nothing of another
/// process and is skipped; a failed purge, or ids that make the prefix ambiguous, make the
/// cleanup incomplete.
pub async fn purge_run_ledger(store: &RuntimeStore, flow: &str, run: &str, out: &mut Cleanup) {
    if matches!(store, RuntimeStore::Memory(_)) {
        return;
    }
    let Some(prefix) = run_prefix(flow, run) else {
        out.reasons.push(format!(
            "run ledger: the ids flow {flow:?} run {run:?} contain '/', so the prefix \
             vf/{flow}/{run}/ may also hold another run's records; delete this run's by hand"
        ));
        return;
    };
    match tokio::time::timeout(CALL_TIMEOUT, store.purge(&prefix)).await {
        Ok(Ok(purged)) => out.ledger = Some(purged),
        Ok(Err(e)) => out.reasons.push(format!("run ledger: {}", e.message)),
        Err(_) => out
            .reasons
            .push("run ledger: the purge did not finish within 30 s".to_owned()),
    }
}

/// `videoflow-worker teardown`: control stop (CTRL-1), then [`teardown_run`], then the run
/// ledger's records. Reads `VF_NATS_URL`, `VF_FLOW_ID`, `VF_RUN_ID`, `VF_RUNTIME_STORE_URL`;
/// returns the exit status (3 when incomplete), printing refusals in the §15.3 form.
pub async fn run_teardown_job(vars: &BTreeMap<String, String>) -> i32 {
    match teardown_job(vars).await {
        Ok(c) => {
            let ledger = c.ledger.map_or_else(String::new, |p| {
                format!(
                    ", and {} keys and {} logs of the run ledger",
                    p.keys, p.logs
                )
            });
            eprintln!(
                "teardown: deleted {} streams and {} consumers{ledger}; the DLQ stays",
                c.removed_streams.len(),
                c.removed_consumers.len()
            );
            0
        }
        Err(e) => {
            eprintln!("{}", e.render());
            e.exit_code()
        }
    }
}

async fn teardown_job(vars: &BTreeMap<String, String>) -> Result<Cleanup, VfError> {
    let job = TeardownConfig::from_env(vars)?;
    let ledger = RuntimeStore::open(&job.runtime_store_url)?;
    let broker = broker::connect_within(&job.nats_url, job.timeout).await?;
    teardown(&broker, &job.flow_id, &job.run_id, Some(&ledger))
        .await
        .into_result(&job.flow_id, &job.run_id)
}

/// Control stop, then [`teardown_run`], then [`purge_run_ledger`] when a ledger is given —
/// what both the CLI and the local runner call. The ledger goes last: a worker still
/// draining after the stop may record a terminator until its streams are gone.
pub async fn teardown(
    broker: &Broker,
    flow: &str,
    run: &str,
    ledger: Option<&RuntimeStore>,
) -> Cleanup {
    if let Err(e) = broker::send_control_stop(broker, flow, run).await {
        tracing::warn!("control stop before teardown failed: {e}");
    }
    let mut out = teardown_run(broker, flow, run).await;
    if let Some(store) = ledger {
        purge_run_ledger(store, flow, run, &mut out).await;
    }
    out
}
