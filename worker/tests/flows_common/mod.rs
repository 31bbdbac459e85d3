//! Helpers shared by the issue #3 "Done when" flow tests (`flow_diamond`,
//! `flow_partitioned_join`, `flow_sigkill`, `flow_payload_store`, `flow_realtime_overload`):
//! reading the JSONL sink's records back and counting them by trace id.

#![allow(dead_code)]

use std::collections::BTreeMap;

/// The sink records keyed by trace id, each with how many times it arrived.
pub fn by_trace(records: &[serde_json::Value]) -> BTreeMap<String, Vec<&serde_json::Value>> {
    let mut out: BTreeMap<String, Vec<&serde_json::Value>> = BTreeMap::new();
    for r in records {
        let trace = r["trace_id"]
            .as_str()
            .unwrap_or_else(|| panic!("sink record without a trace id: {r}"))
            .to_owned();
        out.entry(trace).or_default().push(r);
    }
    out
}

/// How many arrivals repeat a trace id already seen (0 ⇔ every trace id at most once).
pub fn duplicate_arrivals(records: &[serde_json::Value]) -> usize {
    by_trace(records)
        .values()
        .map(|v| v.len().saturating_sub(1))
        .sum()
}

/// The record's `value` as an int (panics with the record otherwise).
pub fn int_value(r: &serde_json::Value) -> i64 {
    r["value"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an int value: {r}"))
}

/// A record's `field` as `f64` (panics with the record otherwise).
pub fn f64_field(r: &serde_json::Value, field: &str) -> f64 {
    r[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no numeric {field}: {r}"))
}

/// The median of `xs` (upper median for an even count); `NaN` when empty.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A BATCH Flow named `name` with `spec_extra` (more `spec:` keys, each line indented two
/// spaces, or empty) and `nodes` (the `nodes:` list items, indented two spaces): the preamble
/// every flow test repeats.
pub fn batch_flow(name: &str, spec_extra: &str, nodes: &str) -> String {
    format!(
        "apiVersion: videoflow.io/v1alpha1\nkind: Flow\nmetadata: {{name: {name}}}\nspec:\n  \
         type: batch\n{spec_extra}  nodes:\n{nodes}"
    )
}
