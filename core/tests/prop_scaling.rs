//! Properties of the §19 scaling decisions that no finite list of cases pins down: canonical
//! (input order never matters), bounded (a known recommendation is always inside the range),
//! monotonic in lag, and truthful (an unknown observation never becomes a number).

use std::collections::BTreeMap;

use proptest::prelude::*;
use videoflow_core::scaling::{
    DemandDiagnosis, Observation, RateDiagnosis, RateObjective, SubscriptionObservation,
    ThroughputSample, observe_demand, observe_rate_demand, replicas_for_lag,
};

type Sub = Observation<SubscriptionObservation>;

/// Parents, the same shuffled, required parents, the same shuffled, and the rule.
type Permuted = (
    Vec<(String, Sub)>,
    Vec<(String, Sub)>,
    Vec<String>,
    Vec<String>,
    (i64, i64, i64),
);

fn subscription() -> impl Strategy<Value = Sub> {
    let known = (0i64..200, 0i64..50, 0i64..20, 0i64..20).prop_map(
        |(available, leased, unresolved, dropped)| {
            Observation::Known(SubscriptionObservation {
                available,
                leased,
                unresolved,
                dropped,
                rejected_publications: 0,
            })
        },
    );
    let unknown = prop::sample::select(vec!["timeout", "auth", "api"])
        .prop_map(|reason| Observation::unknown(reason, "detail"));
    prop_oneof![4 => known, 1 => unknown]
}

/// Parent observations with distinct names, plus a valid rule `(target, min, max)`.
fn parents_and_rule() -> impl Strategy<Value = (Vec<(String, Sub)>, (i64, i64, i64))> {
    let parents = prop::collection::btree_map("[a-e]{1,3}", subscription(), 1..6)
        .prop_map(|m| m.into_iter().collect::<Vec<_>>());
    (parents, rule())
}

fn rule() -> impl Strategy<Value = (i64, i64, i64)> {
    (1i64..20, 1i64..6, 0i64..10).prop_map(|(target, min, extra)| (target, min, min + extra))
}

fn insert_in_order(parents: &[(String, Sub)]) -> BTreeMap<String, Sub> {
    let mut map = BTreeMap::new();
    for (name, observed) in parents {
        map.insert(name.clone(), observed.clone());
    }
    map
}

proptest! {
    /// SCALE-2: the decision is identical for any insertion order of the observations and any
    /// order (or repetition) of the required parents.
    #[test]
    fn observe_demand_is_permutation_invariant(
        (parents, shuffled, required, shuffled_required, (target, min, max)) in
            permuted_inputs(),
    ) {
        let mut repeated = shuffled_required;
        repeated.extend(required.iter().take(2).cloned());
        let a = observe_demand(&insert_in_order(&parents), Some(&required), target, min, max);
        let b = observe_demand(&insert_in_order(&shuffled), Some(&repeated), target, min, max);
        prop_assert_eq!(a, b);
    }

    /// SCALE-1/2: a known recommendation, and every per-parent one, lies in `[min, max]`.
    #[test]
    fn known_demand_is_clamped((parents, (target, min, max)) in parents_and_rule()) {
        let decision = observe_demand(&insert_in_order(&parents), None, target, min, max)
            .expect("a valid rule and at least one parent");
        if let Some(replicas) = decision.replicas {
            prop_assert!(min <= replicas && replicas <= max);
        }
        for parent in &decision.parents {
            if let Some(replicas) = parent.replicas {
                prop_assert!(min <= replicas && replicas <= max);
            }
        }
    }

    /// SCALE-1: more lag never asks for fewer replicas, and below the clamp the answer is the
    /// exact integer ceiling.
    #[test]
    fn replicas_are_monotonic_in_lag(
        lag in 0i64..i64::MAX / 2,
        more in 0i64..1_000_000,
        (target, min, max) in rule(),
    ) {
        let low = replicas_for_lag(lag, target, min, max);
        let high = replicas_for_lag(lag + more, target, min, max);
        prop_assert!(low <= high);
        prop_assert!(min <= low && high <= max);
        let ceiling = (i128::from(lag) + i128::from(target) - 1) / i128::from(target);
        let expected = ceiling.clamp(i128::from(min), i128::from(max));
        prop_assert_eq!(i128::from(low), expected);
    }

    /// SCALE-2: one unknown or missing parent makes the whole decision unknown — no number,
    /// every such parent named — however much the others ask for.
    #[test]
    fn unknown_parent_never_yields_a_number(
        (parents, (target, min, max)) in parents_and_rule(),
        missing in prop::option::of("[x-z]{1,2}"),
    ) {
        let mut required: Vec<String> = parents.iter().map(|(n, _)| n.clone()).collect();
        required.extend(missing.clone());
        let decision =
            observe_demand(&insert_in_order(&parents), Some(&required), target, min, max)
                .expect("valid");
        let unknown = parents.iter().filter(|(_, o)| o.known().is_none()).count()
            + usize::from(missing.is_some());
        prop_assert_eq!(decision.unknown_parents.len(), unknown);
        if unknown > 0 {
            prop_assert_eq!(decision.replicas, None);
            prop_assert_eq!(decision.diagnosis, DemandDiagnosis::Unknown);
            for parent in decision.parents.iter().filter(|p| !p.unknown_reason.is_empty()) {
                prop_assert_eq!(parent.lag, None);
                prop_assert_eq!(parent.replicas, None);
            }
        } else {
            prop_assert!(decision.replicas.is_some());
        }
    }

    /// SCALE-3: a missing or unreadable sample never yields a number; a usable one yields one
    /// inside the range unless the node is stalled.
    #[test]
    fn rate_demand_unknown_is_never_a_number(
        offered in 0i64..10_000,
        processed in 0i64..10_000,
        window_seconds in 0.0f64..60.0,
        fraction in 0.01f64..=1.0,
        current in 1i64..20,
        (_, min, max) in rule(),
        readable in any::<bool>(),
    ) {
        let objective = RateObjective {
            min_delivered_fraction: fraction,
            control_window_seconds: 30.0,
            stabilization_seconds: 0.0,
        };
        let decide = |sample: Option<&Observation<ThroughputSample>>| {
            observe_rate_demand(sample, &objective, current, min, max, None, 0.0).expect("valid")
        };
        let missing = decide(None);
        prop_assert_eq!((missing.replicas, missing.diagnosis), (None, RateDiagnosis::Unknown));
        let sample = if readable {
            Observation::Known(ThroughputSample { offered, processed, dropped: 0, window_seconds })
        } else {
            Observation::unknown("api", "scrape failed")
        };
        let decision = decide(Some(&sample));
        match decision.diagnosis {
            RateDiagnosis::Unknown | RateDiagnosis::Stalled => {
                prop_assert_eq!(decision.replicas, None);
            }
            _ => {
                let replicas = decision.replicas.expect("a decided diagnosis carries a number");
                prop_assert!(min <= replicas && replicas <= max);
            }
        }
        if !readable {
            prop_assert_eq!(decision.diagnosis, RateDiagnosis::Unknown);
        }
    }
}

/// Parents and required parents (the observed ones plus a few extra names), each with a
/// shuffled copy, and a valid rule.
fn permuted_inputs() -> impl Strategy<Value = Permuted> {
    (
        parents_and_rule(),
        prop::collection::vec("[a-f]{1,3}", 0..4),
    )
        .prop_flat_map(|((parents, rule), extra)| {
            let required: Vec<String> = parents
                .iter()
                .map(|(n, _)| n.clone())
                .chain(extra)
                .collect();
            (
                Just(parents.clone()),
                Just(parents).prop_shuffle(),
                Just(required.clone()),
                Just(required).prop_shuffle(),
                Just(rule),
            )
        })
}
