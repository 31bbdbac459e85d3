//! Property tests for the id and key functions: Python float rendering, time-group rounding
//! and identity, owners, and the Python-style JSON of termination records.
//!
//! The golden vectors pin a few dozen points; these check the rules between them.

use proptest::prelude::*;
use videoflow_core::errors::py_json_dumps;
use videoflow_core::join::identity::{SyncMember, round_half_even_micros, time_group_hash_input};
use videoflow_core::partition::{KeyPolicy, is_valid_key, owner, partition_hash, py_float, py_str};
use videoflow_core::value::Value;

/// Every finite double class: normals, subnormals and both zeros, either sign.
fn finite_f64() -> impl Strategy<Value = f64> {
    use proptest::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO
}

/// Exact round-half-even of a double to an integer, by integer arithmetic on its bits:
/// a reference independent of `f64::round_ties_even` (for |p| < 2^100, beyond any test here).
fn exact_round_half_even(p: f64) -> i128 {
    let bits = p.to_bits();
    let negative = bits >> 63 == 1;
    let exp = i32::try_from((bits >> 52) & 0x7ff).unwrap_or_default();
    let frac = bits & ((1 << 52) - 1);
    let (mantissa, shift) = if exp == 0 {
        (frac, -1074) // subnormal
    } else {
        (frac | (1 << 52), exp - 1075)
    };
    let mantissa = i128::from(mantissa);
    let magnitude = if shift >= 0 {
        mantissa << shift
    } else if shift <= -64 {
        0 // below 2^-11: rounds to 0 (never exactly one half)
    } else {
        let down = -shift;
        let int = mantissa >> down;
        let rem = mantissa & ((1 << down) - 1);
        let half = 1 << (down - 1);
        if rem > half || (rem == half && int & 1 == 1) {
            int + 1
        } else {
            int
        }
    };
    if negative { -magnitude } else { magnitude }
}

/// Valid and invalid partition keys of every kind.
fn key_strategy() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        any::<f64>().prop_map(Value::Double),
        ".{0,12}".prop_map(Value::String),
        proptest::collection::vec(any::<u8>(), 0..6).prop_map(Value::Bytes),
        proptest::collection::vec(any::<i64>().prop_map(Value::Int), 0..3).prop_map(Value::List),
    ]
}

/// Nested JSON as a termination record's context may hold.
fn json_strategy() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        // Short decimals: serde_json's default float parser is only exact on those.
        any::<i32>().prop_map(|n| serde_json::Value::from(f64::from(n) / 8.0)),
        prop::sample::select(vec![1e16, 1e22, 1e-05, -2.5e-07, 1.5e300])
            .prop_map(serde_json::Value::from),
        any::<String>().prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(any::<String>(), inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// `repr(float)` round-trips: parsing it back gives the same bits (so -0.0 stays -0.0).
    #[test]
    fn py_float_round_trips(x in finite_f64()) {
        let text = py_float(x);
        let back: f64 = text.parse().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(back.to_bits(), x.to_bits(), "{}", text);
    }

    /// Scientific iff the decimal exponent is < -4 or >= 16; positional always has a '.'.
    #[test]
    fn py_float_layout(x in finite_f64()) {
        let text = py_float(x);
        let a = x.abs();
        let scientific = a != 0.0 && !(1e-4..1e16).contains(&a);
        prop_assert_eq!(text.contains('e'), scientific, "{}", text);
        if scientific {
            let (_, exp) = text.split_once('e').unwrap_or_default();
            prop_assert!(exp.starts_with('+') || exp.starts_with('-'), "{}", text);
            prop_assert!(exp.len() >= 3, "{}", text);
        } else {
            prop_assert!(text.contains('.') && !text.ends_with('.'), "{}", text);
        }
        prop_assert_eq!(py_str(&Value::Double(x)), text);
    }

    /// JOIN-20 agrees with exact integer rounding of the f64 product.
    #[test]
    fn rounding_matches_exact_reference(ts in -2e12f64..2e12f64) {
        let want = exact_round_half_even(ts * 1e6);
        prop_assert_eq!(round_half_even_micros(ts).map(i128::from), Some(want));
    }

    /// Near half-microsecond times, where ties happen: the result matches the exact reference,
    /// and every exact tie of the f64 product lands on the even neighbour.
    #[test]
    fn rounding_ties_go_to_even(n in -1_000_000i32..1_000_000) {
        let ts = (f64::from(n) + 0.5) / 1e6;
        let p = ts * 1e6;
        let got = round_half_even_micros(ts).map(i128::from);
        prop_assert_eq!(got, Some(exact_round_half_even(p)));
        if p.fract().abs() == 0.5 {
            prop_assert_eq!(got.map(|g| g % 2), Some(0), "p={}", p);
        }
    }

    /// The owner is always a replica that exists, and valid keys go to `h % n`.
    #[test]
    fn owner_is_in_range(key in key_strategy(), n in 1u32..64, p in 0u32..100, reject: bool) {
        let policy = if reject { KeyPolicy::Reject } else { KeyPolicy::Fallback { partition: p } };
        let got = owner(Some(&key), n, policy);
        prop_assert!(got.replica < n);
        prop_assert_eq!(got.invalid_key, !is_valid_key(&key));
        if is_valid_key(&key) {
            prop_assert_eq!(got.replica, partition_hash(&py_str(&key)) % n);
        } else if reject {
            prop_assert_eq!(got.replica, 0);
        } else {
            prop_assert_eq!(got.replica, p.min(n - 1));
        }
    }

    /// JOIN-23: the identity does not depend on the order the members are given in.
    #[test]
    fn identity_ignores_member_order(
        members in proptest::collection::btree_map(".{0,6}", (".{0,6}", ".{0,8}", any::<u64>()), 0..5),
        rotate in 0usize..5,
    ) {
        let mut list: Vec<SyncMember<'_>> = members
            .iter()
            .map(|(parent, (producer_name, trace_id, seq))| SyncMember {
                parent,
                producer_name,
                trace_id,
                seq: *seq,
            })
            .collect();
        let sorted = time_group_hash_input(None, &list);
        if !list.is_empty() {
            let k = rotate % list.len();
            list.rotate_left(k);
            list.reverse();
        }
        prop_assert_eq!(time_group_hash_input(None, &list), sorted);
    }

    /// The Python-style JSON of a termination record is JSON that parses back unchanged.
    #[test]
    fn py_json_dumps_parses_back(v in json_strategy()) {
        let text = py_json_dumps(&v);
        prop_assert!(text.is_ascii(), "{}", text);
        let back: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(back, v);
    }
}

#[test]
fn exact_reference_sanity() {
    let cases = [
        (0.5, 0),
        (1.5, 2),
        (2.5, 2),
        (-2.5, -2),
        (3.5, 4),
        (-0.0, 0),
        (0.75, 1),
    ];
    for (p, want) in cases {
        assert_eq!(exact_round_half_even(p), want, "{p}");
    }
    assert_eq!(
        exact_round_half_even(1_700_000_000_000_002.5),
        1_700_000_000_000_002
    );
}
