//! Differential test of the histogram quantile bracket (HEALTH-3) against the Python
//! reference, videoflow 1.0.4: `health::metrics::quantile_bounds` vs
//! `videoflow.runtime.health.quantile_bounds`, case by case.
//!
//! Same plumbing as `core/tests/differential.rs` (the helper `tests/conformance/refhelper.py`,
//! one batch per test, a seeded generator): a failure prints the seed; rerun with
//! `VF_DIFF_SEED=<seed>`. Brackets are compared bit for bit (floats travel as their bits),
//! refusals by kind (HEALTH-3 fixes no texts). A missing reference fails the test with the
//! remedy (`./scripts/install-deps`).

#[path = "../../core/tests/diff_support/mod.rs"]
mod diff_support;

use diff_support::{Rng, f2h, reference_batch, report};
use serde_json::{Value as Json, json};
use videoflow_worker::health::metrics::{LATENCY_BUCKETS_SECONDS, QuantileError, quantile_bounds};

/// A quantile: mostly in (0, 1] (exact ranks, the p-values people ask for, the edges), else
/// out of range (≤ 0, > 1, NaN) or any bits.
fn gen_q(rng: &mut Rng) -> f64 {
    match rng.below(10) {
        0..=2 => (rng.below(1 << 53) + 1) as f64 / (1u64 << 53) as f64,
        3 => *rng.pick(&[
            0.5,
            0.9,
            0.95,
            0.99,
            0.999,
            1.0,
            1.0 - f64::EPSILON / 2.0,
            f64::MIN_POSITIVE,
            5e-324,
            1e-9,
            0.1 + 0.2,
        ]),
        // k / n: lands on (or an ulp off) an exact rank.
        4 | 5 => {
            let n = rng.range(1, 1000);
            rng.range(1, n) as f64 / n as f64
        }
        6 => *rng.pick(&[
            0.0,
            -0.0,
            -0.5,
            -1.0,
            1.0 + f64::EPSILON,
            1.5,
            2.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
        ]),
        _ => rng.double(),
    }
}

/// Finite bucket bounds: the runtime's own, ascending ones, unsorted ones or any doubles.
fn gen_bounds(rng: &mut Rng) -> Vec<f64> {
    let len = if rng.chance(10) {
        0
    } else {
        rng.range(1, 15) as usize
    };
    match rng.below(4) {
        0 => LATENCY_BUCKETS_SECONDS.to_vec(),
        1 => {
            let mut at = rng.range(-5, 5) as f64 / 1000.0;
            (0..len)
                .map(|_| {
                    at += rng.range(1, 10_000) as f64 / 1000.0;
                    at
                })
                .collect()
        }
        2 => (0..len).map(|_| rng.range(-50, 50) as f64 / 10.0).collect(),
        _ => (0..len).map(|_| rng.double()).collect(),
    }
}

/// A count step: small mostly, sometimes big enough to reach 2^53 and u64::MAX.
fn gen_step(rng: &mut Rng) -> u64 {
    match rng.below(8) {
        0 => 0,
        1 => rng.below(1 << 60),
        2 => rng.u64(),
        _ => rng.below(50),
    }
}

/// Cumulative counts for `buckets` buckets (`bounds + 1` unless the shape is the point).
fn gen_cumulative(rng: &mut Rng, buckets: usize) -> Vec<u64> {
    match rng.below(8) {
        // Monotone, saturating at u64::MAX.
        0..=3 => {
            let mut at = 0u64;
            (0..buckets)
                .map(|_| {
                    at = at.saturating_add(gen_step(rng));
                    at
                })
                .collect()
        }
        // Every observation in one place, the total near a float boundary.
        4 => {
            let near_max = u64::MAX - rng.below(4096);
            let total = *rng.pick(&[
                1,
                20,
                100,
                (1 << 53) - 1,
                1 << 53,
                (1 << 53) + 1,
                u64::MAX / 2,
                near_max,
                u64::MAX,
            ]);
            let from = rng.below(buckets as u64 + 1);
            (0..buckets as u64)
                .map(|i| if i >= from { total } else { 0 })
                .collect()
        }
        // All zero: no observations.
        5 => vec![0; buckets],
        // Not cumulative: decreasing somewhere, possibly a zero total after counts.
        _ => (0..buckets).map(|_| gen_step(rng)).collect(),
    }
}

fn kind(e: &QuantileError) -> &'static str {
    match e {
        QuantileError::OutOfRange(_) => "out_of_range",
        QuantileError::Shape { .. } => "shape",
        QuantileError::NotCumulative => "not_cumulative",
    }
}

/// The kind of the reference's refusal: 1.0.4 raises a ValueError for each, told apart by text.
fn reference_kind(want: &Json) -> Option<&'static str> {
    let message = want["message"].as_str()?;
    if want["raised"] != "ValueError" {
        return None;
    }
    if message.starts_with("q must be in (0, 1]") {
        Some("out_of_range")
    } else if message.contains(" cumulative counts for ") {
        Some("shape")
    } else if message.contains("are not cumulative") {
        Some("not_cumulative")
    } else {
        None
    }
}

#[test]
fn health_3_quantile_bounds_match_the_reference() {
    let mut rng = Rng::for_test("health_3_quantile_bounds_match_the_reference");
    let cases: Vec<(Vec<u64>, f64, Vec<f64>)> = (0..6000)
        .map(|_| {
            let bounds = gen_bounds(&mut rng);
            let buckets = if rng.chance(85) {
                bounds.len() + 1
            } else {
                // Shape mismatches: empty, one per bound (the +Inf bucket missing), one too many.
                let any = rng.below(18) as usize;
                *rng.pick(&[0, bounds.len(), bounds.len() + 2, any])
            };
            let cumulative = gen_cumulative(&mut rng, buckets);
            (cumulative, gen_q(&mut rng), bounds)
        })
        .collect();
    let args: Vec<Json> = cases
        .iter()
        .map(|(c, q, b)| json!([c, f2h(*q), b.iter().map(|x| f2h(*x)).collect::<Vec<_>>()]))
        .collect();
    let answers = reference_batch("quantile_bounds", &args);
    let mut outcomes = [0usize; 3];
    let failures: Vec<String> = cases
        .iter()
        .zip(&answers)
        .filter_map(|((c, q, b), want)| {
            let got = quantile_bounds(c, *q, b);
            let same = match &got {
                Ok(Some((lower, upper))) => {
                    outcomes[0] += 1;
                    *want == json!([f2h(*lower), f2h(*upper)])
                }
                Ok(None) => {
                    outcomes[1] += 1;
                    want.is_null()
                }
                Err(e) => {
                    outcomes[2] += 1;
                    reference_kind(want) == Some(kind(e))
                }
            };
            (!same).then(|| {
                format!("quantile_bounds({c:?}, {q:?}, {b:?}): rust {got:?}, reference {want}")
            })
        })
        .collect();
    eprintln!("brackets / none / refusals: {outcomes:?}");
    report(&rng, cases.len(), &failures);
}
