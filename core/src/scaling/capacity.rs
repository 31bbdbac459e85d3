//! Desired versus granted versus ready (SCALE-5).
//!
//! Why three numbers: a Pending pod or an allocation request is not processing capacity. What
//! demand asks for (desired), what the allocator holds (granted) and what is observed
//! processing (ready) are kept apart, a shortfall is a named `capacity_constrained` decision
//! rather than a silently smaller scale-out, and a claim that could not be observed is listed,
//! never counted either way.

use std::collections::BTreeMap;

use super::Observation;
use super::error::ScalingError;

/// Claim status: the allocator granted devices.
pub const CLAIM_ALLOCATED: &str = "allocated";
/// Claim status: the grant is prepared on the node.
pub const CLAIM_PREPARED: &str = "prepared";
/// Claim status: the workload holding the grant is observed ready.
pub const CLAIM_READY: &str = "ready";

/// What the allocator said about one claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimObservation {
    /// `pending`, `allocated`, `prepared`, `ready`, `failed` or `releasing`.
    pub status: String,
    /// How many devices the grant holds; 0 when there is no grant (an absent grant and an
    /// empty one are the same thing to capacity).
    pub grant_devices: i64,
}

impl ClaimObservation {
    /// Whether the claim holds capacity: a granting status and a non-empty grant.
    pub fn is_granted(&self) -> bool {
        self.grant_devices > 0
            && [CLAIM_ALLOCATED, CLAIM_PREPARED, CLAIM_READY].contains(&self.status.as_str())
    }

    /// Whether the claim is processing capacity: granted and its workload ready.
    pub fn is_ready(&self) -> bool {
        self.is_granted() && self.status == CLAIM_READY
    }
}

/// What a [`CapacityDecision`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CapacityDiagnosis {
    /// Every desired replica holds a grant.
    Admitted,
    /// Fewer grants than desired: partial admission, named as such.
    CapacityConstrained,
    /// A shortfall that unobserved claims could explain: neither counted nor discounted.
    Unknown,
}

impl CapacityDiagnosis {
    /// The word 1.0.4 uses.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityDiagnosis::Admitted => "admitted",
            CapacityDiagnosis::CapacityConstrained => "capacity_constrained",
            CapacityDiagnosis::Unknown => "unknown",
        }
    }
}

/// The outcome of [`reconcile_capacity`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CapacityDecision {
    /// What demand asked for.
    pub desired: i64,
    /// Claims observed holding a grant.
    pub granted: i64,
    /// Granted claims whose workload is observed ready — the only processing capacity.
    pub ready: i64,
    /// `min(desired, granted)`: what may be scheduled now.
    pub admitted: i64,
    /// The diagnosis.
    pub diagnosis: CapacityDiagnosis,
    /// The sentence a report prints for a constrained or unknown decision; empty when admitted.
    pub reason: String,
    /// Claims whose observation was `Unknown`, sorted.
    pub unknown_claims: Vec<String>,
}

/// SCALE-5: reconcile the replicas demand wants with what the allocator actually holds.
///
/// `claims` maps claim id → the allocator's observation, one claim per replica the plan asked
/// for. `desired ≤ granted` is `admitted` (unknown claims still listed); a shortfall with
/// unknown claims is `unknown`, since the shortfall cannot be told from a read failure; any
/// other shortfall is `capacity_constrained`, with the shortfall named.
pub fn reconcile_capacity(
    desired: i64,
    claims: &BTreeMap<String, Observation<ClaimObservation>>,
) -> Result<CapacityDecision, ScalingError> {
    if desired < 0 {
        return Err(ScalingError::NegativeDesired(desired));
    }
    let known: Vec<&ClaimObservation> = claims.values().filter_map(Observation::known).collect();
    let count = |keep: fn(&ClaimObservation) -> bool| {
        i64::try_from(known.iter().filter(|c| keep(c)).count()).unwrap_or(i64::MAX)
    };
    let (granted, ready) = (
        count(ClaimObservation::is_granted),
        count(ClaimObservation::is_ready),
    );
    let unknown_claims: Vec<String> = claims
        .iter()
        .filter(|(_, observed)| observed.known().is_none())
        .map(|(id, _)| id.clone())
        .collect();
    let shortfall = desired - granted;
    let (diagnosis, reason) = if shortfall <= 0 {
        (CapacityDiagnosis::Admitted, String::new())
    } else if !unknown_claims.is_empty() {
        let reason = format!(
            "{shortfall} of {desired} desired replicas hold no observed grant and {} claim(s) \
             could not be observed ({}): the shortfall cannot be told from a read failure.",
            unknown_claims.len(),
            unknown_claims.join(", ")
        );
        (CapacityDiagnosis::Unknown, reason)
    } else {
        let reason = format!(
            "{desired} replicas desired, {granted} granted: {shortfall} cannot be scheduled \
             until the allocator grants more capacity; {ready} of the granted are ready to \
             process."
        );
        (CapacityDiagnosis::CapacityConstrained, reason)
    };
    Ok(CapacityDecision {
        desired,
        granted,
        ready,
        admitted: desired.min(granted),
        diagnosis,
        reason,
        unknown_claims,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(status: &str, grant_devices: i64) -> Observation<ClaimObservation> {
        Observation::Known(ClaimObservation {
            status: status.to_owned(),
            grant_devices,
        })
    }

    fn reconcile(
        desired: i64,
        claims: &[(&str, Observation<ClaimObservation>)],
    ) -> CapacityDecision {
        let map = claims
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        reconcile_capacity(desired, &map).expect("valid")
    }

    #[test]
    fn granted_needs_a_granting_status_and_a_grant() {
        let d = reconcile(
            4,
            &[
                ("c0", claim("ready", 1)),
                ("c1", claim("pending", 0)),
                ("c2", claim("ready", 0)),
                ("c3", claim("allocated", 1)),
                ("c4", claim("releasing", 1)),
            ],
        );
        assert_eq!((d.granted, d.ready, d.admitted), (2, 1, 2));
        assert_eq!(d.diagnosis, CapacityDiagnosis::CapacityConstrained);
        assert_eq!(
            d.reason,
            "4 replicas desired, 2 granted: 2 cannot be scheduled until the allocator grants \
             more capacity; 1 of the granted are ready to process."
        );
    }

    #[test]
    fn unknown_claims_are_listed_never_counted() {
        let d = reconcile(
            3,
            &[
                ("c1", Observation::unknown("timeout", "apiserver slow")),
                ("c0", claim("ready", 1)),
            ],
        );
        assert_eq!(d.diagnosis, CapacityDiagnosis::Unknown);
        assert_eq!(d.granted, 1);
        assert_eq!(
            d.reason,
            "2 of 3 desired replicas hold no observed grant and 1 claim(s) could not be \
             observed (c1): the shortfall cannot be told from a read failure."
        );
        let admitted = reconcile(
            1,
            &[
                ("b", claim("ready", 1)),
                ("a", Observation::unknown("auth", "")),
            ],
        );
        assert_eq!(admitted.diagnosis, CapacityDiagnosis::Admitted);
        assert_eq!(admitted.reason, "");
        assert_eq!(admitted.unknown_claims, vec!["a".to_owned()]);
    }

    #[test]
    fn negative_desired_is_refused() {
        let e = reconcile_capacity(-1, &BTreeMap::new()).expect_err("negative");
        assert_eq!(e.to_string(), "desired replicas must be >= 0, got -1.");
        assert_eq!(e.code(), "VF_CONFIG");
    }
}
