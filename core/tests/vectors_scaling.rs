//! Golden scaling decisions (protocol §19), replayed as `shared/vectors/README.md` "scaling/"
//! prescribes. Every case is its own named test (`scaling::observe_demand::join_starved`), so a
//! failure names the case and `cargo test --test vectors_scaling -- observe_demand` runs one
//! function's cases.
//!
//! Each case calls the function with its `input` fields and renders the result in the
//! vectors' JSON shape; outputs then compare exactly (integers, strings, lists in order,
//! doubles by `==`). An `{"error_code", "message"}` output must be a refusal with that code
//! and that message.

mod support;

use std::collections::BTreeMap;

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::{Value as J, json};
use support::read_json;
use videoflow_core::scaling::{
    CapacityDecision, ClaimObservation, CounterReading, DemandDecision, Observation, RateDecision,
    RateObjective, ScalingError, SubscriptionObservation, ThroughputSample, observe_demand,
    observe_rate_demand, reconcile_capacity, replicas_for_lag, throughput_sample,
};

const FILE: &str = "scaling/decisions.json";

/// One §19 function: its key in the vector file and how a case's `input` is replayed.
type Replay = fn(&J) -> Result<Result<J, ScalingError>, Failed>;

const FUNCTIONS: [(&str, Replay); 5] = [
    ("replicas_for_lag", replay_replicas_for_lag),
    ("observe_demand", replay_observe_demand),
    ("throughput_sample", replay_throughput_sample),
    ("observe_rate_demand", replay_observe_rate_demand),
    ("reconcile_capacity", replay_reconcile_capacity),
];

fn main() {
    let args = Arguments::from_args();
    let vectors = read_json(FILE);
    let mut trials = Vec::new();
    for (function, replay) in FUNCTIONS {
        let cases = vectors[function].as_array().cloned().unwrap_or_default();
        assert!(!cases.is_empty(), "{FILE} holds no {function} cases");
        for (i, case) in cases.into_iter().enumerate() {
            let name = case["name"]
                .as_str()
                .map_or_else(|| format!("case_{}", i + 1), str::to_owned);
            trials.push(Trial::test(
                format!("scaling::{function}::{name}"),
                move || check(&case, replay),
            ));
        }
    }
    assert!(!trials.is_empty(), "{FILE} yielded no cases");
    libtest_mimic::run(&args, trials).exit();
}

/// Replays one case and compares with its `output`.
fn check(case: &J, replay: Replay) -> Result<(), Failed> {
    let want = &case["output"];
    let got = replay(&case["input"])?;
    match (want.get("error_code"), got) {
        (Some(code), Err(error)) => {
            expect("error_code", &json!(error.code()), code)?;
            expect("message", &json!(error.to_string()), &want["message"])
        }
        (Some(code), Ok(output)) => Err(format!("want a {code} refusal, got {output}").into()),
        (None, Err(error)) => Err(format!("want {want}, got {}: {error}", error.code()).into()),
        (None, Ok(output)) => expect("output", &output, want),
    }
}

fn expect(what: &str, got: &J, want: &J) -> Result<(), Failed> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}:\n  got  {got}\n  want {want}").into())
    }
}

// -- replays -------------------------------------------------------------------------------

fn replay_replicas_for_lag(input: &J) -> Result<Result<J, ScalingError>, Failed> {
    let replicas = replicas_for_lag(
        int(input, "lag")?,
        int(input, "target_lag_per_replica")?,
        int(input, "min_replicas")?,
        int(input, "max_replicas")?,
    );
    Ok(Ok(json!(replicas)))
}

fn replay_observe_demand(input: &J) -> Result<Result<J, ScalingError>, Failed> {
    let observations = observation_map(&input["observations"], subscription)?;
    let required = match &input["required_parents"] {
        J::Null => None,
        list => Some(strings(list, "required_parents")?),
    };
    let decision = observe_demand(
        &observations,
        required.as_deref(),
        int(input, "target_lag_per_replica")?,
        int(input, "min_replicas")?,
        int(input, "max_replicas")?,
    );
    Ok(decision.map(|d| demand_json(&d)))
}

fn replay_throughput_sample(input: &J) -> Result<Result<J, ScalingError>, Failed> {
    let reading = |when: &str| -> Result<CounterReading, Failed> {
        Ok(CounterReading {
            offered: int(input, &format!("offered_{when}"))?,
            processed: int(input, &format!("processed_{when}"))?,
            dropped: int(input, &format!("dropped_{when}"))?,
            evicted: int(input, &format!("evicted_{when}"))?,
        })
    };
    let sample = throughput_sample(
        reading("before")?,
        reading("after")?,
        float(input, "window_seconds")?,
    );
    Ok(Ok(sample_json(&sample)))
}

fn replay_observe_rate_demand(input: &J) -> Result<Result<J, ScalingError>, Failed> {
    let sample = match &input["sample"] {
        J::Null => None,
        observed => Some(observation(observed, throughput)?),
    };
    let objective = &input["objective"];
    let objective = RateObjective {
        min_delivered_fraction: float(objective, "min_delivered_fraction")?,
        control_window_seconds: float(objective, "control_window_seconds")?,
        stabilization_seconds: float(objective, "stabilization_seconds")?,
    };
    let last_change_at = match &input["last_change_at"] {
        J::Null => None,
        _ => Some(float(input, "last_change_at")?),
    };
    let decision = observe_rate_demand(
        sample.as_ref(),
        &objective,
        int(input, "current_replicas")?,
        int(input, "min_replicas")?,
        int(input, "max_replicas")?,
        last_change_at,
        float(input, "now")?,
    );
    Ok(decision.map(|d| rate_json(&d)))
}

fn replay_reconcile_capacity(input: &J) -> Result<Result<J, ScalingError>, Failed> {
    let claims = observation_map(&input["claims"], claim)?;
    let decision = reconcile_capacity(int(input, "desired")?, &claims);
    Ok(decision.map(|d| capacity_json(&d)))
}

// -- inputs ----------------------------------------------------------------------------------

/// `{"known": {...}}` or `{"unknown": {"reason", "detail"}}`.
fn observation<T>(j: &J, known: fn(&J) -> Result<T, Failed>) -> Result<Observation<T>, Failed> {
    if let Some(value) = j.get("known") {
        return Ok(Observation::Known(known(value)?));
    }
    let unknown = j
        .get("unknown")
        .ok_or_else(|| format!("neither known nor unknown: {j}"))?;
    Ok(Observation::unknown(
        text(unknown, "reason")?,
        text(unknown, "detail")?,
    ))
}

fn observation_map<T>(
    j: &J,
    known: fn(&J) -> Result<T, Failed>,
) -> Result<BTreeMap<String, Observation<T>>, Failed> {
    j.as_object()
        .ok_or_else(|| format!("not an object: {j}"))?
        .iter()
        .map(|(name, observed)| Ok((name.clone(), observation(observed, known)?)))
        .collect()
}

fn subscription(j: &J) -> Result<SubscriptionObservation, Failed> {
    Ok(SubscriptionObservation {
        available: int(j, "available")?,
        leased: int(j, "leased")?,
        unresolved: int(j, "unresolved")?,
        dropped: int(j, "dropped")?,
        rejected_publications: int(j, "rejected_publications")?,
    })
}

fn throughput(j: &J) -> Result<ThroughputSample, Failed> {
    Ok(ThroughputSample {
        offered: int(j, "offered")?,
        processed: int(j, "processed")?,
        dropped: int(j, "dropped")?,
        window_seconds: float(j, "window_seconds")?,
    })
}

/// `grant_devices: null` (no grant) and `0` (an empty grant) are both "no grant".
fn claim(j: &J) -> Result<ClaimObservation, Failed> {
    let grant_devices = match &j["grant_devices"] {
        J::Null => 0,
        _ => int(j, "grant_devices")?,
    };
    Ok(ClaimObservation {
        status: text(j, "status")?,
        grant_devices,
    })
}

fn int(j: &J, key: &str) -> Result<i64, Failed> {
    j[key]
        .as_i64()
        .ok_or_else(|| format!("{key} is not an integer: {}", j[key]).into())
}

fn float(j: &J, key: &str) -> Result<f64, Failed> {
    j[key]
        .as_f64()
        .ok_or_else(|| format!("{key} is not a number: {}", j[key]).into())
}

fn text(j: &J, key: &str) -> Result<String, Failed> {
    j[key]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{key} is not a string: {}", j[key]).into())
}

fn strings(j: &J, what: &str) -> Result<Vec<String>, Failed> {
    j.as_array()
        .ok_or_else(|| format!("{what} is not a list: {j}"))?
        .iter()
        .map(|s| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{what} holds a non-string: {s}").into())
        })
        .collect()
}

// -- outputs, in the vectors' shape -------------------------------------------------------------

fn demand_json(d: &DemandDecision) -> J {
    let parents: Vec<J> = d
        .parents
        .iter()
        .map(|p| {
            json!({
                "parent": p.parent,
                "lag": p.lag,
                "replicas": p.replicas,
                "unknown_reason": p.unknown_reason,
            })
        })
        .collect();
    json!({
        "replicas": d.replicas,
        "diagnosis": d.diagnosis.as_str(),
        "parents": parents,
        "unknown_parents": d.unknown_parents,
        "starved_parents": d.starved_parents,
    })
}

fn sample_json(s: &ThroughputSample) -> J {
    json!({
        "offered": s.offered,
        "processed": s.processed,
        "dropped": s.dropped,
        "window_seconds": s.window_seconds,
        "delivered_fraction": s.delivered_fraction(),
    })
}

fn rate_json(d: &RateDecision) -> J {
    json!({
        "replicas": d.replicas,
        "diagnosis": d.diagnosis.as_str(),
        "delivered_fraction": d.delivered_fraction,
        "sample": d.sample.as_ref().map(sample_json),
        "unknown_reason": d.unknown_reason,
    })
}

fn capacity_json(d: &CapacityDecision) -> J {
    json!({
        "desired": d.desired,
        "granted": d.granted,
        "ready": d.ready,
        "admitted": d.admitted,
        "diagnosis": d.diagnosis.as_str(),
        "reason": d.reason,
        "unknown_claims": d.unknown_claims,
    })
}
