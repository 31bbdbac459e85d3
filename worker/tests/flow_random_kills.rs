//! Randomized SIGKILLs (DELIV-1/2, LOOP-5, MSGID-2, IDEM-1, EOS-7): each repetition picks a
//! worker at random — the producer, a processor replica, the join or the sink — and a moment
//! at random, SIGKILLs it, starts it again under the same replica id (as its pod would be),
//! and checks every value reaches the idempotent sink exactly once with no dead letter — but
//! for the one repeat IDEM-1's order allows: the sink killed between appending a group and
//! marking it appends that same group (same input key) again; and a restarted live producer
//! is a new epoch (MSGID-5) that publishes every value again as new items, each of which must
//! arrive exactly once. The run reports both counts.
//!
//! ```text
//!   numbers ─┬─ left  (IdentityProcessor, 2 competing replicas) ─┐
//!            └─ right (IdentityProcessor) ───────────────────────┴─ pair (JoinerProcessor,
//!                                                                  missing: wait) ─ sink
//! ```
//!
//! Repetitions alternate between no run ledger and a shared `file://` run ledger. Each prints
//! its seed; `VF_FAULT_SEED=<seed>` replays exactly that repetition (same victim, same moment,
//! same pause before the restart). `VF_FAULT_REPS` sets how many run (default 2: one of each
//! kind, so the default suite stays short); `scripts/faults kills` runs 24.

mod flows_common;
mod streams;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flows_common::{batch_flow, jsonl_sink, ledger_spec, numbers, processor};
use support::{Exit, FlowHarness};
use videoflow_core::naming;

const N: i64 = 300;
const ACK_WAIT: Duration = Duration::from_secs(5);
/// (node, replicas) of the flow, and every data edge (child, parent).
const NODES: [(&str, i64); 5] = [
    ("numbers", 1),
    ("left", 2),
    ("right", 1),
    ("pair", 1),
    ("sink", 1),
];
const EDGES: [(&str, &str); 5] = [
    ("left", "numbers"),
    ("right", "numbers"),
    ("pair", "left"),
    ("pair", "right"),
    ("sink", "pair"),
];

/// SplitMix64: a tiny seeded generator, so a seed names one repetition on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

fn flow_yaml(ledger: bool) -> String {
    let spec = if ledger {
        ledger_spec("file://{{DIR}}/ledger")
    } else {
        "  runId: r1\n".to_owned()
    };
    let nodes = [
        numbers(N),
        processor(
            "left",
            "numbers",
            "    replicas: 2\n    component: {builtin: videoflow.processors.basic.IdentityProcessor}\n",
        ),
        processor(
            "right",
            "numbers",
            "    component: {builtin: videoflow.processors.basic.IdentityProcessor}\n",
        ),
        processor(
            "pair",
            "left, right",
            "    join: {missing: wait}\n    component: {builtin: videoflow.processors.basic.JoinerProcessor}\n",
        ),
        jsonl_sink("sink", "pair", "out.jsonl", ", idempotent: true"),
    ]
    .concat();
    batch_flow(
        "kills",
        &format!("{spec}  payloadStore: {{url: \"{{{{REDIS}}}}\"}}\n"),
        &nodes,
    )
}

/// One repetition: what its seed chose.
#[derive(Debug)]
struct Plan {
    seed: u64,
    ledger: bool,
    victim: (&'static str, i64),
    /// Kill once the sink holds this many records (0 for the producer: from its start) …
    after_records: usize,
    /// … plus this long.
    extra_delay: Duration,
    /// Pause before the victim starts again.
    restart_after: Duration,
}

impl Plan {
    fn from_seed(seed: u64) -> Self {
        let mut rng = Rng(seed);
        let ledger = seed % 2 == 1;
        let victims: Vec<(&'static str, i64)> = NODES
            .iter()
            .flat_map(|(n, r)| (0..*r).map(move |i| (*n, i)))
            .collect();
        let victim = victims[rng.range(0, victims.len() as u64) as usize];
        let (after_records, extra_delay) = if victim.0 == "numbers" {
            // The producer publishes all N within about a second of starting: a moment by
            // the sink's count would nearly always find it ended, so it is a moment in time.
            (0, Duration::from_millis(rng.range(0, 800)))
        } else {
            (
                rng.range(0, (N as u64) * 3 / 4) as usize,
                Duration::from_millis(rng.range(0, 300)),
            )
        };
        Plan {
            seed,
            ledger,
            victim,
            after_records,
            extra_delay,
            restart_after: Duration::from_millis(rng.range(0, 1000)),
        }
    }
}

/// The sink records' values: each must be `[v, v]` (the join of `left` and `right` for
/// input `v`); returns, per `v`, the (`input_key`, `trace_id`) of each arrival.
fn joined_values(h: &FlowHarness) -> BTreeMap<i64, Vec<(String, String)>> {
    let mut arrivals: BTreeMap<i64, Vec<(String, String)>> = BTreeMap::new();
    for r in h.jsonl("out.jsonl") {
        let pair = r["value"]
            .as_array()
            .unwrap_or_else(|| panic!("joined value is a list: {r}"));
        let [a, b] = pair.as_slice() else {
            panic!("two inputs per group: {r}");
        };
        let (a, b) = (a.as_i64(), b.as_i64());
        assert!(
            a.is_some() && a == b,
            "a group of two inputs of one value: {r}"
        );
        let key = r["input_key"].as_str().unwrap_or_default().to_owned();
        let trace = r["trace_id"].as_str().unwrap_or_default().to_owned();
        arrivals
            .entry(a.unwrap_or_default())
            .or_default()
            .push((key, trace));
    }
    arrivals
}

fn run(plan: &Plan) -> String {
    eprintln!("random kill: VF_FAULT_SEED={} → {plan:?}", plan.seed);
    let mut h = FlowHarness::new(&flow_yaml(plan.ledger));
    h.provision();
    for (child, parent) in EDGES {
        h.set_ack_wait(child, parent, ACK_WAIT);
    }
    let t0 = Instant::now();
    for (node, replicas) in NODES {
        for r in 0..replicas {
            h.spawn(node, r, &[]);
        }
    }
    let replay = format!("replay: VF_FAULT_SEED={} ({plan:?})", plan.seed);
    h.wait_until(&replay, Duration::from_secs(120), || {
        let got = h.jsonl("out.jsonl").len();
        if got >= plan.after_records {
            Ok(())
        } else {
            Err(format!("{got} records at the sink"))
        }
    });
    std::thread::sleep(plan.extra_delay);
    let at_kill = h.jsonl("out.jsonl").len();
    let (node, replica) = plan.victim;
    let killed = h.kill(node, replica);
    std::thread::sleep(plan.restart_after);
    if killed {
        h.spawn(node, replica, &[]);
    }
    let exits = h.wait_all(Duration::from_secs(180));
    // The victim was killed (or had already ended cleanly); every other process ended 0.
    let bad: Vec<&Exit> = exits
        .iter()
        .filter(|e| e.code != Some(0) && !(killed && e.node == node && e.replica == replica))
        .collect();
    assert!(
        bad.is_empty(),
        "{replay}: abnormal exits {bad:?}; logs:\n{}",
        h.all_logs()
    );
    let arrivals = joined_values(&h);
    let lost: Vec<i64> = (0..N).filter(|v| !arrivals.contains_key(v)).collect();
    // IDEM-1 runs consume, then mark, then ack: a sink killed after appending a group's line
    // and before its mark writes that group again when it is redelivered. That repeat is the
    // same group (same input key) — one effect applied twice, which an effect keyed by the
    // input key absorbs — and it can only follow a kill of the sink itself.
    let sink_window = |a: &[(String, String)]| {
        node == "sink" && killed && a.iter().all(|(k, _)| !k.is_empty() && *k == a[0].0)
    };
    // MSGID-5: a restarted live producer is a new process with a new epoch, so it publishes
    // every value again as new items (`numbers:<epoch>:<n>`); each item must still arrive
    // exactly once. Only a killed producer may repeat a value, and only under another trace.
    let reemitted = |a: &[(String, String)]| {
        node == "numbers" && killed && {
            let traces: std::collections::BTreeSet<&String> = a.iter().map(|(_, t)| t).collect();
            traces.len() == a.len()
        }
    };
    let mut effect_repeats = 0;
    let mut reemits = 0;
    let mut duplicated = Vec::new();
    for (v, a) in &arrivals {
        if a.len() < 2 {
        } else if sink_window(a) {
            effect_repeats += 1;
        } else if reemitted(a) {
            reemits += 1;
        } else {
            duplicated.push((*v, a.clone()));
        }
    }
    assert!(
        lost.is_empty() && duplicated.is_empty() && arrivals.len() as i64 == N,
        "{replay}: lost {lost:?}, duplicated {duplicated:?}; logs:\n{}",
        h.all_logs()
    );
    let dead = h.block_on(streams::read_stream(
        &h.nats.url(),
        &naming::dlq_stream_name("kills"),
    ));
    assert!(
        dead.is_empty(),
        "{replay}: {} dead letter(s), first {:?}",
        dead.len(),
        dead.first()
    );
    let line = format!(
        "seed {} ledger={} killed {node}.{replica} at {at_kill} records{}: {N} values, 0 lost, \
         0 duplicated, {effect_repeats} group(s) appended twice by the killed sink (same \
         input key), {reemits} value(s) published again by the restarted producer (new \
         epoch, each item once), 0 dead letters, run {:?}",
        plan.seed,
        plan.ledger,
        if killed {
            ""
        } else {
            " (it had already ended)"
        },
        t0.elapsed()
    );
    eprintln!("RELIABILITY random-kill {line}");
    line
}

/// ≥ 1 repetition per ledger kind; `VF_FAULT_SEED` replays one, `VF_FAULT_REPS` sets the
/// count (seeds `base, base + 1, …` from `VF_FAULT_BASE_SEED`, else the clock).
#[test]
fn random_sigkills_lose_and_duplicate_nothing() {
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Vec<u64> = if let Some(seed) = var("VF_FAULT_SEED") {
        vec![seed]
    } else {
        let base = var("VF_FAULT_BASE_SEED").unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
                & !1
        });
        (0..var("VF_FAULT_REPS").unwrap_or(2))
            .map(|i| base + i)
            .collect()
    };
    let lines: Vec<String> = seeds.iter().map(|s| run(&Plan::from_seed(*s))).collect();
    eprintln!(
        "RELIABILITY random-kills: {} repetitions, all 0 lost, 0 duplicated, 0 dead letters\n{}",
        lines.len(),
        lines.join("\n")
    );
}
