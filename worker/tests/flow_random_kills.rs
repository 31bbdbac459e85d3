//! Randomized SIGKILLs (DELIV-1/2, LOOP-5, MSGID-2, IDEM-1, EOS-7): each repetition picks a
//! worker at random — the producer, a processor replica, the join or the sink — and a moment
//! at random, SIGKILLs it, starts it again under the same replica id (as its pod would be),
//! and checks every value reaches the idempotent sink exactly once with no dead letter.
//!
//! The sink is idempotent in its effect, not only by IDEM-1's markers: `KeyedJsonSink` writes
//! each group as `effects/<input_key>.json`, so a group consumed again — the sink killed
//! between its effect and its mark, a redelivery after a lost ack — replaces its own record.
//! What the sink holds is what a reviewer counts: one file per effect, and a value in two
//! files is a duplicate, whatever the cause, and fails the test. The producer is replayable
//! (MSGID-6): a restarted one resumes after the last offset its ledger checkpointed and
//! re-mints `numbers:<offset>` for anything after it, which the broker's duplicate window
//! drops; without a ledger it starts again from offset 1 under the same ids. (A *live*
//! producer, MSGID-5, would publish every value again under a new epoch: new groups no sink
//! can tell from new data.)
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

use flows_common::{batch_flow, ledger_spec, processor};
use support::{Exit, FlowHarness};
use videoflow_core::naming;

const N: i64 = 300;
/// The producer's pace: N values take 5 s, so every worker is still running (none can end
/// before the producer's EOS) at any moment of [`KILL_WINDOW`] — a kill always hits a live
/// process, mid-flow. Unpaced, the producer and the processors finished within a second or
/// two while the join and the sink lagged, and about half the repetitions "killed" a worker
/// that had already ended.
const FPS: i64 = 60;
/// When the victim is killed, after every worker was started: well inside the 5 s of
/// production.
const KILL_WINDOW: (u64, u64) = (200, 4000);
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
        format!(
            "  - name: numbers\n    kind: producer\n    component: {{builtin: \
             videoflow.producers.basic.IntProducer}}\n    replayable: true\n    params: \
             {{start_value: 0, end_value: {}, fps: {FPS}}}\n",
            N - 1
        ),
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
        "  - name: sink\n    kind: consumer\n    parents: [pair]\n    component: {builtin: \
         videoflow.rs.consumers.KeyedJsonSink}\n    params: {dir: \"{{DIR}}/effects\", \
         idempotent: true}\n"
            .to_owned(),
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
    /// When the victim is killed, after every worker was started.
    at: Duration,
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
        Plan {
            seed,
            ledger,
            victim,
            at: Duration::from_millis(rng.range(KILL_WINDOW.0, KILL_WINDOW.1)),
            restart_after: Duration::from_millis(rng.range(0, 1000)),
        }
    }
}

/// The sink's effects: one record per file `effects/<input_key>.json` (files still being
/// written have a temporary name starting with `.`).
fn effects(h: &FlowHarness) -> Vec<(String, serde_json::Value)> {
    let Ok(entries) = std::fs::read_dir(h.dir.join("effects")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(key) = name
            .strip_suffix(".json")
            .filter(|_| !name.starts_with('.'))
        else {
            continue;
        };
        let text =
            std::fs::read_to_string(entry.path()).unwrap_or_else(|e| panic!("effect {name}: {e}"));
        let record: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("effect {name}: {e}: {text}"));
        assert_eq!(
            record["input_key"].as_str(),
            Some(key),
            "an effect's file is named by its input key"
        );
        out.push((key.to_owned(), record));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The sink's effects by value: each must be `[v, v]` (the join of `left` and `right` for
/// input `v`); returns, per `v`, the (`input_key`, `trace_id`) of each effect.
fn joined_values(h: &FlowHarness) -> BTreeMap<i64, Vec<(String, String)>> {
    let mut arrivals: BTreeMap<i64, Vec<(String, String)>> = BTreeMap::new();
    for (key, r) in effects(h) {
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
    std::thread::sleep(plan.at.saturating_sub(t0.elapsed()));
    let at_kill = effects(&h).len();
    let (node, replica) = plan.victim;
    // No worker can end before the producer's EOS, which comes after 5 s of production.
    let killed = h.kill(node, replica);
    assert!(
        killed,
        "{replay}: the victim had ended before the kill; logs:\n{}",
        h.all_logs()
    );
    std::thread::sleep(plan.restart_after);
    h.spawn(node, replica, &[]);
    let exits = h.wait_all(Duration::from_secs(180));
    // The victim was killed (or had already ended cleanly); every other process ended 0.
    let bad: Vec<&Exit> = exits
        .iter()
        .filter(|e| e.code != Some(0) && !(e.node == node && e.replica == replica))
        .collect();
    assert!(
        bad.is_empty(),
        "{replay}: abnormal exits {bad:?}; logs:\n{}",
        h.all_logs()
    );
    let arrivals = joined_values(&h);
    let lost: Vec<i64> = (0..N).filter(|v| !arrivals.contains_key(v)).collect();
    let duplicated: Vec<(i64, Vec<(String, String)>)> = arrivals
        .iter()
        .filter(|(_, a)| a.len() > 1)
        .map(|(v, a)| (*v, a.clone()))
        .collect();
    // MSGID-6: value v is item v + 1 of the source, under the same id in every process.
    let foreign: Vec<(i64, String)> = arrivals
        .iter()
        .flat_map(|(v, a)| a.iter().map(move |(_, t)| (*v, t.clone())))
        .filter(|(v, t)| *t != format!("numbers:{}", v + 1))
        .collect();
    assert!(
        foreign.is_empty(),
        "{replay}: trace ids other than numbers:<offset> {:?}",
        &foreign[..foreign.len().min(5)]
    );
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
    let effects_held = effects(&h).len();
    let line = format!(
        "seed {} ledger={} killed {node}.{replica} {:?} after the start, at {at_kill} effects: \
         {N} values, 0 lost, {effects_held} effects at the sink, 0 duplicated, 0 dead \
         letters, run {:?}",
        plan.seed,
        plan.ledger,
        plan.at,
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
