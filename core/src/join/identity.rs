//! Time-group identity (JOIN-20, JOIN-23): the seq and trace id a time join emits.
//!
//! Why content-derived: a group re-formed after a crash from the same members must get the
//! same id, so its output is deduplicated downstream (MSGID-2). The seq is the group's event
//! time in microseconds; the member digest keeps two distinct groups whose times round to the
//! same microsecond apart.

use crate::msgid::sha256hex;

/// One synchronized member of a time group, as it enters the identity (JOIN-23).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncMember<'a> {
    /// The parent (input) name the member arrived from.
    pub parent: &'a str,
    /// The member envelope's `producer_name`.
    pub producer_name: &'a str,
    /// The member envelope's `trace_id`.
    pub trace_id: &'a str,
    /// The member envelope's `seq`.
    pub seq: u64,
}

/// JOIN-20: `round_half_even(ts × 1e6)` — the product is taken in f64 first (so
/// `1700000000.0000025` gives `1700000000000002.5` and rounds to `…002`), then rounded ties
/// to even, then converted to an integer.
///
/// Signed on purpose: 1.0.4 does not guard the domain, so a negative `ts` yields a negative
/// group seq which consumers process normally. Returns `None` for a non-finite `ts` (1.0.4's
/// emission then fails as an untyped error, which the caller must reproduce) and for a
/// product outside the i64 range (≈ ±292 000 years, where no real event time lies).
pub fn round_half_even_micros(ts: f64) -> Option<i64> {
    // 2^63 is exactly representable; every f64 in [-2^63, 2^63) converts to i64 exactly.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    let rounded = (ts * 1e6).round_ties_even();
    if rounded.is_finite() && (-LIMIT..LIMIT).contains(&rounded) {
        // Integral and in range (checked above), so the cast is exact.
        Some(rounded as i64)
    } else {
        None
    }
}

/// JOIN-23: the digest input `"{window_id or ''}|{canonical}"`, where `canonical` joins with
/// `|` the strings `"{parent}={producer_name}:{trace_id}:{seq}"` of the sync members sorted
/// by parent name in byte order (= Unicode code-point order). Collect parents never enter it.
pub fn time_group_hash_input(window_id: Option<&str>, members: &[SyncMember<'_>]) -> String {
    let mut sorted: Vec<&SyncMember<'_>> = members.iter().collect();
    sorted.sort_by(|a, b| a.parent.as_bytes().cmp(b.parent.as_bytes()));
    let canonical: Vec<String> = sorted
        .iter()
        .map(|m| format!("{}={}:{}:{}", m.parent, m.producer_name, m.trace_id, m.seq))
        .collect();
    format!("{}|{}", window_id.unwrap_or(""), canonical.join("|"))
}

/// JOIN-23: the emitted trace id `"tw-{rounded_micros}-{d}"`, `d` = the first 12 hex
/// characters of `sha256hex(time_group_hash_input(window_id, members))`.
pub fn time_group_trace_id(
    rounded_micros: i64,
    window_id: Option<&str>,
    members: &[SyncMember<'_>],
) -> String {
    let digest = sha256hex(&time_group_hash_input(window_id, members));
    format!("tw-{rounded_micros}-{}", &digest[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member<'a>(parent: &'a str, trace_id: &'a str, seq: u64) -> SyncMember<'a> {
        SyncMember {
            parent,
            producer_name: parent,
            trace_id,
            seq,
        }
    }

    #[test]
    fn join_20_rounding_examples() {
        let cases: &[(f64, i64)] = &[
            (1.5e-06, 2),
            (2.5e-06, 2),
            (3.5e-06, 4),
            (5e-07, 0),
            (1_700_000_000.5, 1_700_000_000_500_000),
            (1_700_000_000.000_002_5, 1_700_000_000_000_002),
            (-1.5e-06, -2),
            (-0.25, -250_000),
        ];
        for &(ts, want) in cases {
            assert_eq!(round_half_even_micros(ts), Some(want), "ts={ts:e}");
        }
    }

    #[test]
    fn join_20_rejects_what_has_no_integer() {
        assert_eq!(round_half_even_micros(f64::NAN), None);
        assert_eq!(round_half_even_micros(f64::INFINITY), None);
        assert_eq!(round_half_even_micros(f64::NEG_INFINITY), None);
        assert_eq!(round_half_even_micros(1e13), None);
        assert_eq!(round_half_even_micros(-1e13), None);
    }

    #[test]
    fn join_23_examples() {
        let imu = member("imu", "imu:77e1b2c3d4f5:11", 11);
        let cam5 = member("cam", "cam:3f9c1a2b7d4e:5", 5);
        let rounded = round_half_even_micros(1_700_000_000.5);
        assert_eq!(rounded, Some(1_700_000_000_500_000));
        let rounded = rounded.unwrap_or_default();
        // Given out of order on purpose: the identity sorts by parent name.
        assert_eq!(
            time_group_hash_input(None, &[imu, cam5]),
            "|cam=cam:cam:3f9c1a2b7d4e:5:5|imu=imu:imu:77e1b2c3d4f5:11:11"
        );
        assert_eq!(
            time_group_trace_id(rounded, None, &[imu, cam5]),
            "tw-1700000000500000-2604c79085f2"
        );
        let cam6 = member("cam", "cam:3f9c1a2b7d4e:6", 6);
        assert_eq!(
            time_group_trace_id(rounded, None, &[cam6, imu]),
            "tw-1700000000500000-c5024ad18fdc"
        );
        let single = [member("cam", "cam:3f9c1a2b7d4e:1", 1)];
        assert_eq!(time_group_trace_id(0, None, &single), "tw-0-6df525d51bf0");
    }

    #[test]
    fn join_23_window_id_prefixes_the_input() {
        let single = [member("cam", "cam:1", 1)];
        assert_eq!(
            time_group_hash_input(Some("w1"), &single),
            "w1|cam=cam:cam:1:1"
        );
        assert_eq!(time_group_hash_input(None, &[]), "|");
    }

    #[test]
    fn join_23_sorts_by_bytes_not_case_folded() {
        let members = [
            member("b", "b:1", 1),
            member("B", "B:1", 1),
            member("é", "é:1", 1),
        ];
        assert_eq!(
            time_group_hash_input(None, &members),
            "|B=B:B:1:1|b=b:b:1:1|é=é:é:1:1"
        );
    }
}
