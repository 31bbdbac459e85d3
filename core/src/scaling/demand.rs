//! Lag-driven demand (SCALE-1, SCALE-2).
//!
//! Why every parent: keying a scaler on a node's first parent lets a join whose first parent
//! is drained while the second backs up report no lag at all, and makes two equivalent graphs
//! scale differently. [`observe_demand`] evaluates every parent and takes the maximum, which is
//! also what a KEDA `ScaledObject` with one trigger per parent does (the HPA uses the highest
//! desired count), so the decision and the rendered scaler agree by construction.

use std::collections::{BTreeMap, BTreeSet};

use super::error::ScalingError;
use super::{MISSING_OBSERVATION, Observation, clamp};

/// What the broker said about a node's subscription on one parent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubscriptionObservation {
    /// Not yet delivered (`num_pending`).
    pub available: i64,
    /// Delivered, not yet acknowledged (`num_ack_pending`).
    pub leased: i64,
    /// Held by the broker but no longer deliverable.
    pub unresolved: i64,
    /// Evicted before delivery.
    pub dropped: i64,
    /// Publications the channel refused.
    pub rejected_publications: i64,
}

/// What a [`DemandDecision`] says about the node's demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DemandDiagnosis {
    /// A parent could not be observed: the decision is no decision.
    Unknown,
    /// No parent has work waiting.
    Idle,
    /// Some parents have work, others none: for a join, a missing-input stall that no replica
    /// count repairs.
    Starved,
    /// Every parent has work waiting: a processing-capacity shortfall replicas repair.
    Backlog,
}

impl DemandDiagnosis {
    /// The word 1.0.4 uses (`unknown`, `idle`, `starved`, `backlog`).
    pub fn as_str(self) -> &'static str {
        match self {
            DemandDiagnosis::Unknown => "unknown",
            DemandDiagnosis::Idle => "idle",
            DemandDiagnosis::Starved => "starved",
            DemandDiagnosis::Backlog => "backlog",
        }
    }
}

/// One parent's contribution to a decision.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ParentDemand {
    /// The parent node's name.
    pub parent: String,
    /// [`parent_lag`], or `None` when the parent could not be observed.
    pub lag: Option<i64>,
    /// What this parent alone asks for under the rule, or `None` when unknown.
    pub replicas: Option<i64>,
    /// Why the parent is unknown (`timeout`, `missing`, …); empty when observed.
    pub unknown_reason: String,
}

/// The outcome of [`observe_demand`]; canonical, so equal for any input order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DemandDecision {
    /// The maximum over parents, within `[min, max]`; `None` exactly when the diagnosis is
    /// [`DemandDiagnosis::Unknown`] — never `0` for "could not tell".
    pub replicas: Option<i64>,
    /// The diagnosis.
    pub diagnosis: DemandDiagnosis,
    /// Every evaluated parent, sorted by name.
    pub parents: Vec<ParentDemand>,
    /// The parents that could not be observed, sorted.
    pub unknown_parents: Vec<String>,
    /// The parents with nothing waiting while another has a backlog, sorted; empty unless the
    /// diagnosis is [`DemandDiagnosis::Starved`].
    pub starved_parents: Vec<String>,
}

/// SCALE-1 validation, in 1.0.4's order: the target, the floor, then the range.
///
/// Why each bound: a replica must absorb some lag (target ≥ 1); a processor scaled to zero
/// cannot observe its parents' end-of-stream (min ≥ 1); an empty range has no answer.
pub fn validate_scaling_rule(
    target_lag_per_replica: i64,
    min_replicas: i64,
    max_replicas: i64,
) -> Result<(), ScalingError> {
    if target_lag_per_replica < 1 {
        return Err(ScalingError::TargetLagBelowOne(target_lag_per_replica));
    }
    if min_replicas < 1 {
        return Err(ScalingError::MinReplicasBelowOne(min_replicas));
    }
    if max_replicas < min_replicas {
        return Err(ScalingError::MaxBelowMin {
            max: max_replicas,
            min: min_replicas,
        });
    }
    Ok(())
}

/// SCALE-1: the messages the node still owes one parent, `available + leased` — the sum the
/// KEDA NATS JetStream scaler reads (`num_pending + num_ack_pending`), so a decision here
/// matches the rendered trigger. `unresolved` and `dropped` are excluded on purpose: work the
/// broker can no longer deliver is not work another replica could take.
pub fn parent_lag(observation: &SubscriptionObservation) -> i64 {
    observation.available.saturating_add(observation.leased)
}

/// SCALE-1: enough replicas for each to carry at most `target_lag_per_replica` messages —
/// `ceil(lag / target)`, the HPA's `AverageValue` arithmetic, taken in integers so no float
/// rounds a large lag — clamped to `[min_replicas, max_replicas]`.
///
/// It validates nothing ([`validate_scaling_rule`] does, in [`observe_demand`]); so that it
/// cannot panic, a target below 1 is read as 1.
pub fn replicas_for_lag(
    lag: i64,
    target_lag_per_replica: i64,
    min_replicas: i64,
    max_replicas: i64,
) -> i64 {
    let target = target_lag_per_replica.max(1);
    let (quotient, remainder) = (lag / target, lag % target);
    // Integer division truncates towards zero: only a positive remainder rounds up.
    let wanted = if remainder > 0 {
        quotient + 1
    } else {
        quotient
    };
    clamp(wanted, min_replicas, max_replicas)
}

/// SCALE-2: size and diagnose a node's demand from every parent's subscription observation.
///
/// `required_parents` (default: the observed ones) are evaluated even when nobody observed
/// them: such a parent is unknown with reason `missing`, because "nobody asked" is not "no
/// work". Any unknown parent makes the whole decision unknown (`replicas: None`) and names it —
/// a failed read must never scale a busy node down. Otherwise `replicas` is the maximum over
/// parents; all lags 0 is `idle`, some 0 is `starved` (a join waiting on inputs that have not
/// arrived, which no replica count repairs), none 0 is `backlog`.
///
/// The decision is canonical: parents are evaluated in name order, and duplicates in
/// `required_parents` count once.
pub fn observe_demand(
    observations: &BTreeMap<String, Observation<SubscriptionObservation>>,
    required_parents: Option<&[String]>,
    target_lag_per_replica: i64,
    min_replicas: i64,
    max_replicas: i64,
) -> Result<DemandDecision, ScalingError> {
    validate_scaling_rule(target_lag_per_replica, min_replicas, max_replicas)?;
    let names: BTreeSet<&String> = observations
        .keys()
        .chain(required_parents.unwrap_or_default())
        .collect();
    if names.is_empty() {
        return Err(ScalingError::NoParents);
    }
    let parents: Vec<ParentDemand> = names
        .into_iter()
        .map(|name| match observations.get(name) {
            Some(Observation::Known(observed)) => {
                let lag = parent_lag(observed);
                ParentDemand {
                    parent: name.clone(),
                    lag: Some(lag),
                    replicas: Some(replicas_for_lag(
                        lag,
                        target_lag_per_replica,
                        min_replicas,
                        max_replicas,
                    )),
                    unknown_reason: String::new(),
                }
            }
            unobserved => ParentDemand {
                parent: name.clone(),
                lag: None,
                replicas: None,
                unknown_reason: unobserved
                    .and_then(Observation::unknown_reason)
                    .unwrap_or(MISSING_OBSERVATION)
                    .to_owned(),
            },
        })
        .collect();
    Ok(decide(parents))
}

/// The diagnosis over evaluated (sorted) parents.
fn decide(parents: Vec<ParentDemand>) -> DemandDecision {
    let names_where = |keep: fn(&ParentDemand) -> bool| -> Vec<String> {
        parents
            .iter()
            .filter(|p| keep(p))
            .map(|p| p.parent.clone())
            .collect()
    };
    let unknown_parents = names_where(|p| p.lag.is_none());
    let replicas = parents
        .iter()
        .map(|p| p.replicas)
        .collect::<Option<Vec<_>>>();
    let Some(replicas) = replicas.and_then(|r| r.into_iter().max()) else {
        return DemandDecision {
            replicas: None,
            diagnosis: DemandDiagnosis::Unknown,
            parents,
            unknown_parents,
            starved_parents: Vec::new(),
        };
    };
    let empty = names_where(|p| p.lag == Some(0));
    let (diagnosis, starved_parents) = if empty.len() == parents.len() {
        (DemandDiagnosis::Idle, Vec::new())
    } else if !empty.is_empty() {
        (DemandDiagnosis::Starved, empty)
    } else {
        (DemandDiagnosis::Backlog, Vec::new())
    };
    DemandDecision {
        replicas: Some(replicas),
        diagnosis,
        parents,
        unknown_parents,
        starved_parents,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(available: i64, leased: i64) -> Observation<SubscriptionObservation> {
        Observation::Known(SubscriptionObservation {
            available,
            leased,
            ..SubscriptionObservation::default()
        })
    }

    fn demand(
        observations: &[(&str, Observation<SubscriptionObservation>)],
        required: Option<&[String]>,
    ) -> Result<DemandDecision, ScalingError> {
        let map = observations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        observe_demand(&map, required, 10, 1, 10)
    }

    #[test]
    fn scale_1_ceiling_in_integers_then_clamp() {
        assert_eq!(replicas_for_lag(0, 10, 1, 10), 1);
        assert_eq!(replicas_for_lag(10, 10, 1, 10), 1);
        assert_eq!(replicas_for_lag(11, 10, 1, 10), 2);
        assert_eq!(replicas_for_lag(99, 7, 1, 100), 15);
        assert_eq!(
            replicas_for_lag(1_000_000_000_000, 10, 1, 1_000_000),
            1_000_000
        );
        assert_eq!(replicas_for_lag(3, 10, 4, 4), 4);
        assert_eq!(replicas_for_lag(i64::MAX, 1, 1, i64::MAX), i64::MAX);
        assert_eq!(replicas_for_lag(-5, 10, 1, 10), 1);
    }

    #[test]
    fn scale_1_validation_order_and_texts() {
        let text = |t, m, x| validate_scaling_rule(t, m, x).map_err(|e| e.to_string());
        assert_eq!(
            text(0, 0, -1),
            Err("target_lag_per_replica must be >= 1, got 0.".into())
        );
        assert_eq!(
            text(1, 0, -1),
            Err("min_replicas must be >= 1, got 0.".into())
        );
        assert_eq!(
            text(1, 5, 2),
            Err("max_replicas (2) is below min_replicas (5).".into())
        );
        assert_eq!(text(1, 3, 3), Ok(()));
    }

    #[test]
    fn scale_1_lag_excludes_unresolved_and_dropped() {
        let observed = SubscriptionObservation {
            available: 5,
            leased: 2,
            unresolved: 50,
            dropped: 7,
            rejected_publications: 1,
        };
        assert_eq!(parent_lag(&observed), 7);
    }

    #[test]
    fn scale_2_diagnoses() {
        let backlog = demand(&[("a", sub(12, 0)), ("b", sub(40, 5))], None).expect("valid");
        assert_eq!(backlog.replicas, Some(5));
        assert_eq!(backlog.diagnosis, DemandDiagnosis::Backlog);

        let starved = demand(&[("b", sub(30, 0)), ("a", sub(0, 0))], None).expect("valid");
        assert_eq!(starved.diagnosis, DemandDiagnosis::Starved);
        assert_eq!(starved.starved_parents, vec!["a".to_owned()]);
        assert_eq!(starved.replicas, Some(3));

        let idle = demand(&[("a", sub(0, 0)), ("b", sub(0, 0))], None).expect("valid");
        assert_eq!(idle.diagnosis, DemandDiagnosis::Idle);
        assert_eq!(idle.replicas, Some(1));
        assert!(idle.starved_parents.is_empty());
    }

    #[test]
    fn scale_2_unknown_and_missing_parents_are_never_zero() {
        let required = ["a".to_owned(), "c".to_owned(), "a".to_owned()];
        let decision = demand(
            &[
                ("a", sub(100, 0)),
                ("b", Observation::unknown("timeout", "no reply")),
            ],
            Some(&required),
        )
        .expect("valid");
        assert_eq!(decision.replicas, None);
        assert_eq!(decision.diagnosis, DemandDiagnosis::Unknown);
        assert_eq!(
            decision.unknown_parents,
            vec!["b".to_owned(), "c".to_owned()]
        );
        let reasons: Vec<_> = decision
            .parents
            .iter()
            .map(|p| p.unknown_reason.as_str())
            .collect();
        assert_eq!(reasons, vec!["", "timeout", "missing"]);
        assert_eq!(decision.parents[0].replicas, Some(10));
        assert_eq!(decision.parents[1].lag, None);
    }

    #[test]
    fn scale_2_refusals() {
        assert_eq!(demand(&[], None), Err(ScalingError::NoParents));
        assert_eq!(demand(&[], Some(&[])), Err(ScalingError::NoParents));
        let map = BTreeMap::new();
        assert_eq!(
            observe_demand(&map, None, 0, 1, 10),
            Err(ScalingError::TargetLagBelowOne(0)),
            "the rule is validated before the parents are counted"
        );
    }
}
