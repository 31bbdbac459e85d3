//! The metrics registry behind `/metrics` (HEALTH-3) and the scrape-side helpers that read a
//! histogram back and bracket a quantile.
//!
//! Why hand-rolled instead of a Prometheus client: the exposition is contract — no `# HELP` /
//! `# TYPE` lines, families in first-observation order, `le` written as Python floats — and a
//! client library would choose all three for us. The registry is a plain value behind the
//! health state's lock; rendering is a pure function of it, so the text is testable byte for
//! byte.

use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_float;

/// Upper bounds, in seconds, of the latency histogram buckets (HEALTH-3). `+Inf` is implied.
pub const LATENCY_BUCKETS_SECONDS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// `reason` of a group dead-lettered (or discarded) because the data is bad.
pub const DROP_POISON: &str = "poison";
/// `reason` of a transient failure a best-effort node gives up on instead of retrying.
pub const DROP_BEST_EFFORT: &str = "best_effort";
/// `reason` of an at-least-once message whose retry budget ran out.
pub const DROP_EXHAUSTED: &str = "exhausted";
/// `reason` of an input that could not be decoded (DELIV-15).
pub const DROP_UNDECODABLE: &str = "undecodable";
/// `reason` of a join group evicted before it completed.
pub const DROP_JOIN_EVICTED: &str = "join_evicted";
/// `reason` of a live publication the broker refused (DELIV-4).
pub const DROP_PUBLISH_DISCARDED: &str = "publish_discarded";
/// `reason` of an input whose partition key cannot be owned (PART-3a).
pub const DROP_INVALID_PARTITION_KEY: &str = "invalid_partition_key";

/// One observed metric: count, running sum and one non-cumulative count per bucket plus the
/// `+Inf` overflow bucket.
#[derive(Debug, Clone, PartialEq)]
struct Aggregate {
    count: u64,
    total: f64,
    buckets: Vec<u64>,
}

/// The running metrics of one worker, in first-observation order per family.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    node: String,
    bounds: Vec<f64>,
    observed: Vec<(String, Aggregate)>,
    counters: Vec<(String, u64)>,
    errors: Vec<((String, String), u64)>,
    offered: u64,
    drops: Vec<(String, u64)>,
}

/// One consistent reading of the throughput counters (for an in-process observer and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throughput {
    /// `messages_offered_total`.
    pub offered: u64,
    /// `messages_processed_total`.
    pub processed: u64,
    /// `messages_dropped_total` summed over its reasons.
    pub dropped: u64,
}

impl Metrics {
    /// A registry for node `node` over the default latency buckets.
    pub fn new(node: &str) -> Self {
        Metrics::with_buckets(node, &LATENCY_BUCKETS_SECONDS)
            .unwrap_or_else(|_| unreachable!("the default buckets are valid"))
    }

    /// A registry over custom bounds: finite, strictly increasing and non-empty, else
    /// ConfigError (HEALTH-3).
    pub fn with_buckets(node: &str, bounds: &[f64]) -> Result<Self, VfError> {
        let valid = !bounds.is_empty()
            && bounds.iter().all(|b| b.is_finite())
            && bounds.windows(2).all(|w| w[0] < w[1]);
        if !valid {
            return Err(VfError::new(
                ErrorCode::Config,
                format!("Histogram buckets must be finite and strictly increasing, got {bounds:?}."),
            )
            .with_remedy("Pass ascending finite upper bounds in seconds (the +Inf bucket is added for you), or use the default LATENCY_BUCKETS_SECONDS."));
        }
        Ok(Metrics {
            node: node.replace('"', ""),
            bounds: bounds.to_vec(),
            observed: Vec::new(),
            counters: Vec::new(),
            errors: Vec::new(),
            offered: 0,
            drops: Vec::new(),
        })
    }

    /// Observes one latency value of `metric` (e.g. `proctime_seconds`).
    pub fn observe(&mut self, metric: &str, value: f64) {
        let nb = self.bounds.len() + 1;
        let agg = entry(&mut self.observed, metric, || Aggregate {
            count: 0,
            total: 0.0,
            buckets: vec![0; nb],
        });
        agg.count += 1;
        agg.total += value;
        // The first bound ≥ value is its bucket; past the last bound, the +Inf bucket.
        let i = self.bounds.partition_point(|b| *b < value);
        agg.buckets[i] += 1;
    }

    /// Adds `n` to counter `name` (rendered `videoflow_<name>_total`).
    pub fn incr(&mut self, name: &str, n: u64) {
        *entry(&mut self.counters, name, || 0) += n;
    }

    /// Counts one failed group under its code and disposition (`videoflow_errors_total`).
    pub fn record_error(&mut self, code: &str, disposition: &str) {
        let code = if code.is_empty() { "VF_UNKNOWN" } else { code };
        let key = (code.to_owned(), disposition.to_owned());
        match self.errors.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => self.errors.push((key, 1)),
        }
    }

    /// One received group of real work (no terminator in it).
    pub fn record_offered(&mut self) {
        self.offered += 1;
    }

    /// `n` inputs given up on for `reason` (one of the `DROP_*` values).
    pub fn record_drop(&mut self, reason: &str, n: u64) {
        if n > 0 {
            *entry(&mut self.drops, reason, || 0) += n;
        }
    }

    /// The throughput counters as one reading.
    pub fn throughput(&self) -> Throughput {
        Throughput {
            offered: self.offered,
            processed: self
                .counters
                .iter()
                .find(|(k, _)| k == "messages_processed")
                .map_or(0, |(_, n)| *n),
            dropped: self.drops.iter().map(|(_, n)| n).sum(),
        }
    }

    /// The cumulative bucket counts of `metric` (one per bound plus `+Inf`), `None` before
    /// its first observation.
    pub fn histogram(&self, metric: &str) -> Option<Vec<u64>> {
        let (_, agg) = self.observed.iter().find(|(k, _)| k == metric)?;
        Some(cumulative(&agg.buckets))
    }

    /// The exposition text (HEALTH-3), lines joined by `\n` plus a final `\n`.
    pub fn render(&self) -> String {
        let node = &self.node;
        let l = format!("{{node=\"{node}\"}}");
        let mut lines = Vec::new();
        for (m, agg) in &self.observed {
            lines.push(format!("videoflow_{m}_count{l} {}", agg.count));
            lines.push(format!("videoflow_{m}_sum{l} {}", py_float(agg.total)));
        }
        for (c, n) in &self.counters {
            lines.push(format!("videoflow_{c}_total{l} {n}"));
        }
        for ((code, disposition), n) in &self.errors {
            lines.push(format!(
                "videoflow_errors_total{{node=\"{node}\",code=\"{}\",disposition=\"{}\"}} {n}",
                code.replace('"', ""),
                disposition.replace('"', "")
            ));
        }
        for (m, agg) in &self.observed {
            let les = self
                .bounds
                .iter()
                .map(|b| py_float(*b))
                .chain(std::iter::once("+Inf".to_owned()));
            for (le, n) in les.zip(cumulative(&agg.buckets)) {
                lines.push(format!(
                    "videoflow_{m}_bucket{{node=\"{node}\",le=\"{le}\"}} {n}"
                ));
            }
        }
        if self.offered > 0 {
            lines.push(format!(
                "videoflow_messages_offered_total{l} {}",
                self.offered
            ));
        }
        for (reason, n) in &self.drops {
            lines.push(format!(
                "videoflow_messages_dropped_total{{node=\"{node}\",reason=\"{}\"}} {n}",
                reason.replace('"', "")
            ));
        }
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }
}

fn entry<'a, T>(list: &'a mut Vec<(String, T)>, key: &str, init: impl FnOnce() -> T) -> &'a mut T {
    let i = match list.iter().position(|(k, _)| k == key) {
        Some(i) => i,
        None => {
            list.push((key.to_owned(), init()));
            list.len() - 1
        }
    };
    &mut list[i].1
}

fn cumulative(buckets: &[u64]) -> Vec<u64> {
    buckets
        .iter()
        .scan(0u64, |acc, n| {
            *acc += n;
            Some(*acc)
        })
        .collect()
}

/// A histogram read back from an exposition: finite bounds (ascending) and cumulative counts
/// (one per bound plus `+Inf` last). Both empty when the family has no `_bucket` lines.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedHistogram {
    /// The finite `le` bounds.
    pub bounds: Vec<f64>,
    /// Cumulative counts, `+Inf` last.
    pub cumulative: Vec<u64>,
}

/// Reads the `videoflow_<metric>_bucket` lines of one exposition (one node) back, as a
/// scraper sees them.
pub fn parse_histogram(text: &str, metric: &str) -> ParsedHistogram {
    let prefix = format!("videoflow_{metric}_bucket{{");
    let mut found: Vec<(f64, u64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            continue;
        };
        let Some(le) = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix("le=\""))
            .and_then(|v| v.strip_suffix('"'))
        else {
            continue;
        };
        let bound = if le == "+Inf" {
            f64::INFINITY
        } else {
            match le.parse::<f64>() {
                Ok(b) => b,
                Err(_) => continue,
            }
        };
        found.push((bound, value));
    }
    found.sort_by(|a, b| a.0.total_cmp(&b.0));
    ParsedHistogram {
        bounds: found
            .iter()
            .map(|(b, _)| *b)
            .filter(|b| b.is_finite())
            .collect(),
        cumulative: found.iter().map(|(_, n)| *n).collect(),
    }
}

/// Why a quantile cannot be bracketed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuantileError {
    /// `q` outside (0, 1].
    #[error("q must be in (0, 1], got {0}; pass 0.95 for p95.")]
    OutOfRange(f64),
    /// Counts and bounds of mismatched length.
    #[error(
        "{counts} cumulative counts for {bounds} bounds; expected one count per bound plus the +Inf bucket."
    )]
    Shape {
        /// Counts given.
        counts: usize,
        /// Bounds given.
        bounds: usize,
    },
    /// The counts decrease, so the last bucket does not hold every observation.
    #[error("cumulative counts are not cumulative: the last bucket must hold every observation.")]
    NotCumulative,
}

/// The bucket a nearest-rank quantile lies in, `(lower, upper]` (HEALTH-3): rank =
/// `max(1, ceil(q × count − 1e-9))`, the first bucket whose cumulative count reaches it;
/// `lower` is −∞ for the first bucket, `upper` +∞ for the overflow bucket. `Ok(None)` when
/// there are no observations — a percentile of nothing is unavailable, not zero. Never an
/// interpolated point.
pub fn quantile_bounds(
    cumulative: &[u64],
    q: f64,
    bounds: &[f64],
) -> Result<Option<(f64, f64)>, QuantileError> {
    if q.is_nan() || q <= 0.0 || q > 1.0 {
        return Err(QuantileError::OutOfRange(q));
    }
    if cumulative.len() != bounds.len() + 1 {
        return Err(QuantileError::Shape {
            counts: cumulative.len(),
            bounds: bounds.len(),
        });
    }
    let count = cumulative[cumulative.len() - 1];
    if count == 0 {
        return Ok(None);
    }
    // In u128: `q × count` may round up to 2^64, a rank no u64 count reaches (as in 1.0.4,
    // whose ints are exact); `as u64` would saturate it to a reachable u64::MAX.
    let rank = ((q * count as f64 - 1e-9).ceil() as u128).max(1);
    for (i, seen) in cumulative.iter().enumerate() {
        if u128::from(*seen) >= rank {
            let lower = if i == 0 {
                f64::NEG_INFINITY
            } else {
                bounds[i - 1]
            };
            let upper = bounds.get(i).copied().unwrap_or(f64::INFINITY);
            return Ok(Some((lower, upper)));
        }
    }
    Err(QuantileError::NotCumulative)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_3_empty_state_renders_a_single_newline() {
        assert_eq!(Metrics::new("n").render(), "\n");
    }

    #[test]
    fn health_3_families_render_in_contract_order_with_py_float_sums_and_les() {
        let mut m = Metrics::new("a\"b");
        m.incr("messages_received", 1);
        m.observe("proctime_seconds", 0.005);
        m.observe("proctime_seconds", 0.007);
        m.observe("proctime_seconds", 100.0);
        m.incr("messages_processed", 2);
        m.record_error("VF_TRANSIENT", "transient");
        m.record_error("", "poison");
        m.record_offered();
        m.record_offered();
        m.record_offered();
        m.record_drop(DROP_POISON, 1);
        let text = m.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "videoflow_proctime_seconds_count{node=\"ab\"} 3");
        assert_eq!(
            lines[1],
            "videoflow_proctime_seconds_sum{node=\"ab\"} 100.012"
        );
        assert_eq!(lines[2], "videoflow_messages_received_total{node=\"ab\"} 1");
        assert_eq!(
            lines[3],
            "videoflow_messages_processed_total{node=\"ab\"} 2"
        );
        assert_eq!(
            lines[4],
            "videoflow_errors_total{node=\"ab\",code=\"VF_TRANSIENT\",disposition=\"transient\"} 1"
        );
        assert_eq!(
            lines[5],
            "videoflow_errors_total{node=\"ab\",code=\"VF_UNKNOWN\",disposition=\"poison\"} 1"
        );
        assert_eq!(
            lines[6],
            "videoflow_proctime_seconds_bucket{node=\"ab\",le=\"0.005\"} 1"
        );
        assert_eq!(
            lines[7],
            "videoflow_proctime_seconds_bucket{node=\"ab\",le=\"0.01\"} 2"
        );
        assert!(lines.contains(&"videoflow_proctime_seconds_bucket{node=\"ab\",le=\"1.0\"} 2"));
        assert_eq!(
            lines[6 + 13],
            "videoflow_proctime_seconds_bucket{node=\"ab\",le=\"+Inf\"} 3"
        );
        assert_eq!(lines[20], "videoflow_messages_offered_total{node=\"ab\"} 3");
        assert_eq!(
            lines[21],
            "videoflow_messages_dropped_total{node=\"ab\",reason=\"poison\"} 1"
        );
        assert!(text.ends_with("} 1\n") && !text.contains("# "));
        assert_eq!(
            m.throughput(),
            Throughput {
                offered: 3,
                processed: 2,
                dropped: 1
            }
        );
    }

    #[test]
    fn health_3_histogram_reads_back_from_the_exposition() {
        let mut m = Metrics::new("n");
        for v in [0.001, 0.02, 0.02, 0.3, 7.0, 61.0] {
            m.observe("actual_proctime_seconds", v);
        }
        let parsed = parse_histogram(&m.render(), "actual_proctime_seconds");
        assert_eq!(parsed.bounds, LATENCY_BUCKETS_SECONDS.to_vec());
        assert_eq!(
            Some(parsed.cumulative.clone()),
            m.histogram("actual_proctime_seconds")
        );
        assert_eq!(parsed.cumulative.last(), Some(&6));
        assert_eq!(
            parse_histogram(&m.render(), "proctime_seconds"),
            ParsedHistogram::default()
        );
    }

    #[test]
    fn health_3_quantile_bounds_bracket_the_bucket_never_a_point() {
        let b = [0.1, 1.0];
        // 10 observations: 5 ≤ 0.1, 4 in (0.1, 1], 1 above.
        let c = [5, 9, 10];
        assert_eq!(
            quantile_bounds(&c, 0.5, &b),
            Ok(Some((f64::NEG_INFINITY, 0.1)))
        );
        assert_eq!(quantile_bounds(&c, 0.6, &b), Ok(Some((0.1, 1.0))));
        assert_eq!(quantile_bounds(&c, 0.9, &b), Ok(Some((0.1, 1.0))));
        assert_eq!(
            quantile_bounds(&c, 0.95, &b),
            Ok(Some((1.0, f64::INFINITY)))
        );
        assert_eq!(quantile_bounds(&c, 1.0, &b), Ok(Some((1.0, f64::INFINITY))));
        assert_eq!(quantile_bounds(&[0, 0, 0], 0.5, &b), Ok(None));
        assert_eq!(
            quantile_bounds(&c, 0.0, &b),
            Err(QuantileError::OutOfRange(0.0))
        );
        assert!(quantile_bounds(&c, 1.5, &b).is_err());
        assert!(matches!(
            quantile_bounds(&[1, 2], 0.5, &b),
            Err(QuantileError::Shape { .. })
        ));
        // 0.95 × 20 = 19 exactly in decimal, a hair above in binary: the 19th observation.
        let mut c20 = [19, 19, 20];
        assert_eq!(
            quantile_bounds(&c20, 0.95, &b),
            Ok(Some((f64::NEG_INFINITY, 0.1)))
        );
        c20 = [0, 0, 20];
        assert_eq!(
            quantile_bounds(&c20, 0.01, &b),
            Ok(Some((1.0, f64::INFINITY)))
        );
        // 1.0 × u64::MAX rounds to 2^64: a rank no count reaches (1.0.4's exact ints agree).
        assert_eq!(
            quantile_bounds(&[u64::MAX], 1.0, &[]),
            Err(QuantileError::NotCumulative)
        );
    }

    #[test]
    fn health_3_bucket_bounds_must_be_finite_increasing_non_empty() {
        for bad in [
            &[][..],
            &[1.0, 1.0][..],
            &[2.0, 1.0][..],
            &[f64::INFINITY][..],
        ] {
            let e = Metrics::with_buckets("n", bad).expect_err("refused");
            assert_eq!(e.code, ErrorCode::Config);
        }
        assert!(Metrics::with_buckets("n", &[0.5, 2.0]).is_ok());
    }
}
