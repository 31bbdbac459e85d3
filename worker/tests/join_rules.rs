//! Properties of the join assemblers (§8) through the public API, on a manual clock.
//!
//! - Trace mode: any arrival order of complete groups emits every group exactly once, with
//!   inputs and handles in parent order (JOIN-5, JOIN-6, ENV-3).
//! - Both modes, under arbitrary redeliveries, timeouts, caps and flushes: every handle ends
//!   exactly once as emitted, acked, NAKed or retired — nothing is both emitted and
//!   resolved, and nothing is lost (JOIN-5, JOIN-9, JOIN-13, JOIN-14, JOIN-19, JOIN-21).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use videoflow_core::join::policy::JoinPolicy;
use videoflow_core::model::{FlowType, JoinMode, MissingPolicy};
use videoflow_worker::join::{
    Entry, GroupInput, JoinAssembler, ManualClock, ReadyGroup, Resolution,
};

type Asm = JoinAssembler<u32, ()>;

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("p{i}")).collect()
}

fn entry(parent: &str, trace: &str, seq: u64, ts: Option<f64>) -> Entry<()> {
    Entry {
        producer_name: parent.to_owned(),
        trace_id: trace.to_owned(),
        seq,
        event_ts: ts,
        payload: (),
    }
}

/// A permutation of `0..n` driven by proptest-chosen sort keys.
fn permutation(keys: &[u32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| (keys[i], i));
    order
}

proptest! {
    #[test]
    fn trace_any_arrival_order_emits_each_group_once_in_parent_order(
        parent_count in 1usize..5,
        group_count in 1usize..25,
        keys in proptest::collection::vec(any::<u32>(), 100),
        pop_after in proptest::collection::vec(any::<bool>(), 100),
    ) {
        let parents = names(parent_count);
        let policy = JoinPolicy { max_pending: 64, ..JoinPolicy::default_for(FlowType::Batch) };
        let clock = ManualClock::new(0.0, 0.0);
        let mut asm: Asm = JoinAssembler::new("j", &parents, &policy, None, clock.shared())
            .expect("valid");
        let arrivals: Vec<(usize, usize)> = (0..group_count)
            .flat_map(|g| (0..parent_count).map(move |p| (g, p)))
            .collect();
        let order = permutation(&keys[..arrivals.len()]);
        let mut emitted: Vec<ReadyGroup<u32, ()>> = Vec::new();
        for (step, &i) in order.iter().enumerate() {
            let (g, p) = arrivals[i];
            let handle = u32::try_from(i).expect("small");
            asm.add(&parents[p], entry(&parents[p], &format!("t{g}"), (g * 10 + p) as u64, None), handle)
                .expect("known parent");
            if pop_after[step] {
                emitted.extend(asm.pop_ready().expect("trace never errs"));
            }
        }
        while let Some(g) = asm.pop_ready().expect("trace never errs") {
            emitted.push(g);
        }
        prop_assert!(asm.take_resolutions().is_empty());
        prop_assert_eq!(asm.pending_count(), 0);
        let ids: BTreeSet<String> = emitted.iter().map(|g| g.trace_id.clone()).collect();
        prop_assert_eq!(ids.len(), group_count);
        prop_assert_eq!(emitted.len(), group_count);
        for group in &emitted {
            let g: usize = group.trace_id[1..].parse().expect("t<n>");
            let want_handles: Vec<u32> = (0..parent_count)
                .map(|p| u32::try_from(g * parent_count + p).expect("small"))
                .collect();
            prop_assert_eq!(&group.handles, &want_handles);
            prop_assert_eq!(group.seq, (g * 10) as i128);
            for (p, input) in group.inputs.iter().enumerate() {
                match input {
                    GroupInput::Entry(e) => prop_assert_eq!(&e.producer_name, &parents[p]),
                    other => prop_assert!(false, "unexpected input {:?}", other),
                }
            }
        }
    }
}

/// One step of a random workload.
#[derive(Debug, Clone)]
enum Op {
    /// A delivery: parent index, group key (trace id / time slot), seq.
    Add(usize, u8, u8),
    Advance(u8),
    Sweep,
    Pop,
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..3, 0u8..6, 0u8..3).prop_map(|(p, g, s)| Op::Add(p, g, s)),
        2 => (0u8..40).prop_map(Op::Advance),
        2 => Just(Op::Sweep),
        3 => Just(Op::Pop),
        1 => Just(Op::Flush),
    ]
}

fn policy(mode: JoinMode, missing: MissingPolicy, timeout: Option<u8>, quorum: bool) -> JoinPolicy {
    let base = JoinPolicy {
        timeout_seconds: timeout.map(|t| f64::from(t) / 10.0),
        missing,
        max_pending: 1,
        ..JoinPolicy::default_for(FlowType::Realtime)
    };
    match mode {
        JoinMode::Trace => base,
        JoinMode::Time => JoinPolicy {
            mode,
            tolerance_ms: Some(150.0),
            quorum: (quorum && base.timeout_seconds.is_some()).then_some(1),
            collect: BTreeMap::from([("p2".to_owned(), 250.0)]),
            ..base
        },
    }
}

/// Drives `ops`, then settles everything left, and returns how each handle ended.
fn run(
    asm: &mut Asm,
    clock: &ManualClock,
    mode: JoinMode,
    ops: &[Op],
) -> (Vec<u32>, Vec<Resolution<u32>>) {
    let parents = names(3);
    let mut emitted = Vec::new();
    let mut next_handle = 0u32;
    fn pop(asm: &mut Asm, emitted: &mut Vec<u32>) -> bool {
        match asm.pop_ready().expect("finite times") {
            Some(g) => {
                emitted.extend(g.handles);
                true
            }
            None => false,
        }
    }
    for op in ops {
        match *op {
            Op::Add(p, g, s) => {
                let ts = match mode {
                    JoinMode::Trace => None,
                    JoinMode::Time => Some(f64::from(g) * 0.1),
                };
                asm.add(
                    &parents[p],
                    entry(&parents[p], &format!("t{g}"), u64::from(s), ts),
                    next_handle,
                )
                .expect("known parent");
                next_handle += 1;
            }
            Op::Advance(d) => clock.advance(f64::from(d) / 10.0),
            Op::Sweep => asm.sweep(),
            Op::Pop => {
                pop(asm, &mut emitted);
            }
            Op::Flush => {
                asm.flush_all();
            }
        }
    }
    // Settle everything left: flush pending groups, emit staged ones, expire collect samples.
    asm.flush_all();
    while pop(asm, &mut emitted) {}
    clock.advance(1e6);
    asm.sweep();
    while pop(asm, &mut emitted) {}
    let resolutions = asm.take_resolutions();
    assert_eq!(
        next_handle as usize,
        emitted.len() + resolutions.len(),
        "every handle ends once"
    );
    (emitted, resolutions)
}

proptest! {
    #[test]
    fn nothing_is_both_emitted_and_resolved(
        time in any::<bool>(),
        missing in prop_oneof![Just(MissingPolicy::Drop), Just(MissingPolicy::Wait), Just(MissingPolicy::Error)],
        timeout in proptest::option::of(0u8..30),
        quorum in any::<bool>(),
        cap in proptest::option::of(1usize..4),
        ops in proptest::collection::vec(op(), 0..80),
    ) {
        let mode = if time { JoinMode::Time } else { JoinMode::Trace };
        let clock = ManualClock::new(0.0, 0.0);
        let mut asm: Asm = JoinAssembler::new("j", &names(3), &policy(mode, missing, timeout, quorum), cap, clock.shared())
            .expect("valid");
        let (emitted, resolutions) = run(&mut asm, &clock, mode, &ops);
        let mut seen = BTreeSet::new();
        for h in emitted.iter().copied().chain(resolutions.iter().map(|r| match *r {
            Resolution::Ack(h) | Resolution::Nak(h) | Resolution::Retire(h) => h,
        })) {
            prop_assert!(seen.insert(h), "handle {} ended twice", h);
        }
        prop_assert_eq!(asm.pending_count(), 0);
        if missing != MissingPolicy::Error {
            prop_assert!(!resolutions.iter().any(|r| matches!(r, Resolution::Nak(_))));
        }
    }
}
