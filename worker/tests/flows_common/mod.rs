//! Helpers shared by the flow tests (`flow_*`, `interop_flows`, `component_*`): Flow YAML
//! preambles and the `nodes:` items most flows use, reading the JSONL sink's records back
//! (counting them by trace id, checking none was lost), and reading a run ledger back (§11.2).

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use super::support::FlowHarness;

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

/// The component line of an `IdentityProcessor` node (indented four spaces, for the
/// `middle_lines` of [`numbers_to_sink`]).
pub const IDENTITY: &str =
    "    component: {builtin: videoflow.processors.basic.IdentityProcessor}\n";

/// The `nodes:` item of `numbers`, an IntProducer emitting 0..n−1.
pub fn numbers(n: i64) -> String {
    format!(
        r#"  - name: numbers
    kind: producer
    component: {{builtin: videoflow.producers.basic.IntProducer}}
    params: {{start_value: 0, end_value: {last}}}
"#,
        last = n - 1
    )
}

/// The `nodes:` item of a processor `name` on `parents` (the list's items), with `lines`: its
/// other keys (component, params, replicas, …), each indented four spaces.
pub fn processor(name: &str, parents: &str, lines: &str) -> String {
    format!("  - name: {name}\n    kind: processor\n    parents: [{parents}]\n{lines}")
}

/// The `nodes:` item of a JsonlSink consumer `name` on `parents` (the list's items, e.g.
/// `left, right`) writing `{{DIR}}/<file>`; `params_extra` is appended inside its params
/// (e.g. `, idempotent: true`). More keys of the node may follow, indented four spaces.
pub fn jsonl_sink(name: &str, parents: &str, file: &str, params_extra: &str) -> String {
    format!(
        r#"  - name: {name}
    kind: consumer
    parents: [{parents}]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/{file}"{params_extra}}}
"#
    )
}

/// The `nodes:` item of `sink`, a VoidConsumer on `parent`.
pub fn void_sink(parent: &str) -> String {
    format!(
        r#"  - name: sink
    kind: consumer
    parents: [{parent}]
    component: {{builtin: videoflow.consumers.basic.VoidConsumer}}
"#
    )
}

/// `numbers` (IntProducer, 0..n−1) → `middle` → `sink` (JsonlSink writing `out.jsonl`): the
/// `nodes:` items of the most common test flow. `middle_lines` are the processor's lines after
/// `kind`/`parents` (component, params, replicas, …), each indented four spaces; `sink_extra`
/// is appended inside the sink's params (e.g. `, idempotent: true`).
pub fn numbers_to_sink(n: i64, middle: &str, middle_lines: &str, sink_extra: &str) -> String {
    [
        numbers(n),
        processor(middle, "numbers", middle_lines),
        jsonl_sink("sink", middle, "out.jsonl", sink_extra),
    ]
    .concat()
}

/// The sink records in `out.jsonl` after a run that may have lost inputs (a kill, a crash):
/// asserts every value of `want` is among them, else panics with the lost ones, `after`
/// (what happened to the flow) and the logs.
pub fn assert_none_lost(
    h: &FlowHarness,
    want: impl IntoIterator<Item = i64>,
    after: &str,
) -> Vec<serde_json::Value> {
    let out = h.jsonl("out.jsonl");
    let values: BTreeSet<i64> = out.iter().map(int_value).collect();
    let missing: Vec<i64> = want.into_iter().filter(|v| !values.contains(v)).collect();
    assert!(
        missing.is_empty(),
        "lost inputs {missing:?} {after}; logs:\n{}",
        h.all_logs()
    );
    out
}

/// The `spec:` lines of a run `r1` on the run ledger at `url` (for [`batch_flow`]).
pub fn ledger_spec(url: &str) -> String {
    format!("  runId: r1\n  runtimeStore: {{url: \"{url}\"}}\n")
}

/// Every document under `prefix` in the run ledger at `url`, keyed by the rest of its key.
pub fn ledger_docs(
    h: &FlowHarness,
    url: &str,
    prefix: &str,
) -> BTreeMap<String, serde_json::Value> {
    let store = videoflow_worker::store::RuntimeStore::open(url).expect("ledger store");
    h.block_on(store.scan(prefix))
        .expect("scan")
        .into_iter()
        .map(|(k, v, _)| {
            let doc = serde_json::from_slice(&v).unwrap_or(serde_json::Value::Null);
            (k[prefix.len()..].to_owned(), doc)
        })
        .collect()
}

/// The entries of `log` in the run ledger at `url`, oldest first, as text.
pub fn ledger_log(h: &FlowHarness, url: &str, log: &str) -> Vec<String> {
    let store = videoflow_worker::store::RuntimeStore::open(url).expect("ledger store");
    h.block_on(store.log_entries(log))
        .expect("log")
        .into_iter()
        .map(|r| String::from_utf8(r).expect("utf-8 entry"))
        .collect()
}
