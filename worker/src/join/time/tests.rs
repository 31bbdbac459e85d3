//! Time-mode rules, one test per requirement, on a manual clock.

use std::collections::BTreeMap;

use super::*;
use crate::join::clock::ManualClock;

type Asm = TimeAssembler<u32, &'static str>;

struct Pol {
    tolerance_ms: Option<f64>,
    timeout: Option<f64>,
    missing: MissingPolicy,
    quorum: Option<i64>,
    collect: &'static [(&'static str, f64)],
    max_pending: i64,
}

impl Default for Pol {
    fn default() -> Self {
        Pol {
            tolerance_ms: Some(300.0),
            timeout: None,
            missing: MissingPolicy::Drop,
            quorum: None,
            collect: &[],
            max_pending: 256,
        }
    }
}

impl Pol {
    fn build(&self) -> JoinPolicy {
        JoinPolicy {
            timeout_seconds: self.timeout,
            missing: self.missing,
            max_pending: self.max_pending,
            mode: JoinMode::Time,
            tolerance_ms: self.tolerance_ms,
            quorum: self.quorum,
            collect: self
                .collect
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<BTreeMap<_, _>>(),
        }
    }
}

fn names(ps: &[&str]) -> Vec<String> {
    ps.iter().map(|s| s.to_string()).collect()
}

fn build(parents: &[&str], pol: Pol, cap: Option<usize>) -> (Asm, ManualClock) {
    let clock = ManualClock::new(100.0, 1_000.0);
    let a = TimeAssembler::new("fuse", &names(parents), &pol.build(), cap, clock.shared())
        .expect("valid time assembler");
    (a, clock)
}

fn e(parent: &str, seq: u64, ts: Option<f64>) -> Entry<&'static str> {
    Entry {
        producer_name: parent.into(),
        trace_id: format!("{parent}:{seq}"),
        seq,
        event_ts: ts,
        payload: "m",
    }
}

fn add(a: &mut Asm, parent: &str, seq: u64, ts: f64, handle: u32) {
    a.add(parent, e(parent, seq, Some(ts)), handle)
        .expect("known parent");
}

fn pop(a: &mut Asm) -> ReadyGroup<u32, &'static str> {
    a.pop_ready().expect("emittable").expect("a ready group")
}

fn entry_seq(input: &GroupInput<&'static str>) -> Option<u64> {
    match input {
        GroupInput::Entry(e) => Some(e.seq),
        _ => None,
    }
}

#[test]
fn join_10_construction_errors_use_reference_texts() {
    let err = |parents: &[&str], pol: Pol| {
        let clock = ManualClock::default().shared();
        match Asm::new("fuse", &names(parents), &pol.build(), None, clock) {
            Err(JoinError::Policy(msg)) => msg,
            Err(other) => panic!("unexpected error {other:?}"),
            Ok(_) => panic!("construction should fail"),
        }
    };
    assert_eq!(
        err(
            &["cam", "imu"],
            Pol {
                collect: &[("x", 5.0), ("imu", 5.0)],
                ..Pol::default()
            }
        ),
        "fuse: collect parents ['x'] are not parents of this node (parents: ['cam', 'imu'])"
    );
    assert_eq!(
        err(
            &["imu"],
            Pol {
                collect: &[("imu", 5.0)],
                ..Pol::default()
            }
        ),
        "fuse: at least one parent must be synchronized (not in collect) to anchor time groups"
    );
    assert_eq!(
        err(
            &["cam", "imu"],
            Pol {
                collect: &[("imu", 5.0)],
                quorum: Some(2),
                timeout: Some(1.0),
                ..Pol::default()
            }
        ),
        "fuse: quorum=2 exceeds the number of synchronized parents (1)"
    );
    assert!(
        err(
            &["cam"],
            Pol {
                tolerance_ms: None,
                ..Pol::default()
            }
        )
        .starts_with("fuse: time-mode joins require a positive tolerance_ms")
    );
}

#[test]
fn join_11_missing_event_ts_uses_wall_clock() {
    let (mut a, clock) = build(&["cam"], Pol::default(), None);
    clock.set_wall(42.5);
    a.add("cam", e("cam", 1, None), 1).expect("known parent");
    let g = pop(&mut a);
    assert_eq!(g.event_ts, Some(42.5));
    assert_eq!(g.seq, 42_500_000);
}

#[test]
fn join_12_nearest_group_within_tolerance_ties_first() {
    let (mut a, _) = build(&["a", "b"], Pol::default(), None);
    add(&mut a, "a", 1, 1.0, 1);
    add(&mut a, "a", 2, 1.5, 2);
    // |1.0 − 1.25| = |1.5 − 1.25| = 0.25 ≤ 0.3: the first group wins the tie.
    add(&mut a, "b", 1, 1.25, 3);
    let g = pop(&mut a);
    assert_eq!(g.handles, vec![1, 3]);
    assert_eq!(g.event_ts, Some(1.0));
    // Nearest, not first: 1.45 is closer to 1.5 than to a new group.
    add(&mut a, "a", 3, 1.0, 4);
    add(&mut a, "b", 2, 1.45, 5);
    let g = pop(&mut a);
    assert_eq!(g.handles, vec![2, 5]);
    // Beyond tolerance seeds its own group.
    add(&mut a, "b", 3, 2.0, 6);
    assert!(a.pop_ready().expect("emittable").is_none());
    assert_eq!(a.pending_count(), 2);
}

#[test]
fn join_12_group_time_is_min_and_parent_is_never_doubled() {
    let (mut a, _) = build(&["a", "b"], Pol::default(), None);
    add(&mut a, "a", 1, 1.2, 1);
    // Same parent again within tolerance: that group already holds `a`, so a new group.
    add(&mut a, "a", 2, 1.25, 2);
    add(&mut a, "b", 1, 1.0, 3);
    let g = pop(&mut a);
    assert_eq!(g.event_ts, Some(1.0), "g.ts = min(g.ts, t)");
    assert_eq!(g.handles, vec![1, 3]);
    assert_eq!(a.pending_count(), 1);
}

#[test]
fn join_12e_cap_evicts_oldest_as_drop() {
    let pol = Pol {
        missing: MissingPolicy::Error,
        timeout: Some(5.0),
        ..Pol::default()
    };
    let (mut a, _) = build(&["a", "b"], pol, Some(2));
    add(&mut a, "a", 1, 1.0, 1);
    add(&mut a, "a", 2, 2.0, 2);
    add(&mut a, "a", 3, 3.0, 3);
    assert_eq!(a.take_resolutions(), vec![Resolution::Ack(1)]);
    assert_eq!(a.evicted(), 1);
}

#[test]
fn join_13_same_trace_and_seq_replaces_in_place() {
    let (mut a, _) = build(&["a", "b", "c"], Pol::default(), None);
    add(&mut a, "a", 1, 1.0, 1);
    add(&mut a, "b", 1, 1.1, 2);
    // Redelivery of a's message with a different event time: replaced, ts unchanged.
    add(&mut a, "a", 1, 0.5, 3);
    assert_eq!(a.take_resolutions(), vec![Resolution::Retire(1)]);
    add(&mut a, "c", 1, 1.2, 4);
    let g = pop(&mut a);
    assert_eq!(g.event_ts, Some(1.0));
    assert_eq!(g.handles, vec![3, 2, 4], "members keep their arrival place");
}

#[test]
fn join_14_collect_buffer_cap_acks_oldest() {
    let pol = Pol {
        collect: &[("imu", 10.0)],
        max_pending: 0,
        ..Pol::default()
    };
    let (mut a, _) = build(&["cam", "imu"], pol, None);
    for h in 0..1025 {
        add(&mut a, "imu", u64::from(h), 1.0, h);
    }
    assert_eq!(a.take_resolutions(), vec![Resolution::Ack(0)]);
    assert_eq!(a.evicted(), 0, "a dropped sample is not a group eviction");
}

#[test]
fn join_15_settle_holds_complete_group() {
    let pol = Pol {
        collect: &[("imu", 500.0)],
        ..Pol::default()
    };
    let (mut a, clock) = build(&["cam", "imu"], pol, None);
    add(&mut a, "cam", 1, 10.0, 1);
    clock.advance(0.25);
    assert!(
        a.pop_ready().expect("emittable").is_none(),
        "held for settle"
    );
    add(&mut a, "imu", 1, 10.4, 2);
    clock.advance(0.25);
    let g = pop(&mut a);
    assert_eq!(g.handles, vec![1, 2]);
}

#[test]
fn join_16_staged_first_fifo() {
    let pol = Pol {
        timeout: Some(1.0),
        quorum: Some(1),
        ..Pol::default()
    };
    let (mut a, clock) = build(&["a", "b"], pol, None);
    add(&mut a, "a", 1, 1.0, 1);
    add(&mut a, "a", 2, 2.0, 2);
    clock.advance(1.0);
    a.sweep();
    add(&mut a, "a", 3, 3.0, 3);
    add(&mut a, "b", 3, 3.0, 4);
    assert_eq!(pop(&mut a).handles, vec![1]);
    assert_eq!(pop(&mut a).handles, vec![2]);
    assert_eq!(pop(&mut a).handles, vec![3, 4]);
}

#[test]
fn join_17_quorum_stages_on_timeout() {
    let pol = Pol {
        timeout: Some(2.0),
        quorum: Some(2),
        ..Pol::default()
    };
    let (mut a, clock) = build(&["a", "b", "c"], pol, None);
    add(&mut a, "c", 7, 5.0, 1);
    add(&mut a, "a", 3, 5.1, 2);
    clock.advance(1.999);
    a.sweep();
    assert!(a.pop_ready().expect("emittable").is_none());
    clock.set_mono(102.0);
    a.sweep();
    let g = pop(&mut a);
    assert_eq!(g.handles, vec![1, 2]);
    assert_eq!(entry_seq(&g.inputs[0]), Some(3));
    assert_eq!(g.inputs[1], GroupInput::Missing);
    assert_eq!(entry_seq(&g.inputs[2]), Some(7));
    assert!(a.take_resolutions().is_empty());
}

#[test]
fn join_17_below_quorum_evicts_and_complete_stages() {
    let pol = Pol {
        timeout: Some(1.0),
        quorum: Some(2),
        ..Pol::default()
    };
    let (mut a, clock) = build(&["a", "b"], pol, None);
    add(&mut a, "a", 1, 1.0, 1);
    clock.advance(1.0);
    a.sweep();
    assert_eq!(a.take_resolutions(), vec![Resolution::Ack(1)]);
    assert_eq!(a.evicted(), 1);

    // A complete group still held for settle is staged by the timeout.
    let pol = Pol {
        timeout: Some(1.0),
        collect: &[("imu", 5000.0)],
        ..Pol::default()
    };
    let (mut a, clock) = build(&["cam", "imu"], pol, None);
    add(&mut a, "cam", 1, 1.0, 1);
    assert!(a.pop_ready().expect("emittable").is_none());
    clock.advance(1.0);
    a.sweep();
    assert_eq!(pop(&mut a).handles, vec![1]);
}

#[test]
fn join_18_collect_claims_inclusive_window() {
    let pol = Pol {
        collect: &[("imu", 250.0)],
        ..Pol::default()
    };
    let (mut a, clock) = build(&["cam", "imu"], pol, None);
    add(&mut a, "imu", 1, 10.25, 11);
    add(&mut a, "imu", 2, 9.7, 12);
    add(&mut a, "imu", 3, 9.75, 13);
    add(&mut a, "imu", 4, 10.5, 14);
    add(&mut a, "imu", 5, 10.0, 15);
    add(&mut a, "cam", 1, 10.0, 1);
    clock.advance(0.25);
    let g = pop(&mut a);
    let GroupInput::Window(w) = &g.inputs[1] else {
        panic!("collect window expected")
    };
    assert_eq!(w.times, vec![9.75, 10.0, 10.25]);
    let seqs: Vec<u64> = w.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![3, 5, 1]);
    assert_eq!(g.handles, vec![1, 13, 15, 11]);
    // Unclaimed samples stay for later groups.
    assert!(a.has_pending_from("imu"));
}

#[test]
fn join_18_empty_window_is_an_empty_list() {
    let pol = Pol {
        collect: &[("imu", 10.0)],
        ..Pol::default()
    };
    let (mut a, clock) = build(&["cam", "imu"], pol, None);
    add(&mut a, "cam", 1, 10.0, 1);
    clock.advance(0.01);
    let g = pop(&mut a);
    assert_eq!(
        g.inputs[1],
        GroupInput::Window(CollectWindow {
            entries: vec![],
            times: vec![]
        })
    );
}

#[test]
fn join_19_stale_collect_sample_acked_even_without_timeout() {
    let pol = Pol {
        collect: &[("imu", 500.0)],
        ..Pol::default()
    };
    let (mut a, clock) = build(&["cam", "imu"], pol, None);
    add(&mut a, "imu", 1, 1.0, 1);
    clock.advance(30.5);
    a.sweep();
    assert!(
        a.take_resolutions().is_empty(),
        "retention is strict: 30 + 0.5"
    );
    clock.advance(0.001);
    a.sweep();
    assert_eq!(a.take_resolutions(), vec![Resolution::Ack(1)]);
    assert!(!a.has_pending_from("imu"));
    assert_eq!(a.evicted(), 0);
}

#[test]
fn join_20_seq_half_even() {
    let (mut a, _) = build(&["cam"], Pol::default(), None);
    for (ts, want) in [(2.5e-06, 2), (3.5e-06, 4), (5e-07, 0), (-1.5e-06, -2)] {
        add(&mut a, "cam", 1, ts, 1);
        let g = pop(&mut a);
        assert_eq!((g.seq, g.event_ts), (want, Some(ts)), "ts={ts:e}");
    }
}

#[test]
fn join_20_non_finite_group_time_errs_instead_of_panicking() {
    let (mut a, _) = build(&["cam"], Pol::default(), None);
    for ts in [f64::NAN, f64::INFINITY] {
        add(&mut a, "cam", 1, ts, 1);
        assert!(matches!(a.pop_ready(), Err(JoinError::GroupTime { .. })));
        assert_eq!(a.pending_count(), 0, "the failed group is gone");
    }
}

#[test]
fn join_21_error_naks() {
    let pol = Pol {
        timeout: Some(1.0),
        missing: MissingPolicy::Error,
        ..Pol::default()
    };
    let (mut a, clock) = build(&["a", "b"], pol, None);
    add(&mut a, "a", 1, 1.0, 1);
    clock.advance(1.0);
    a.sweep();
    assert_eq!(a.take_resolutions(), vec![Resolution::Nak(1)]);
    assert_eq!(a.evicted(), 1);
}

#[test]
fn join_21_wait_never_times_out() {
    let pol = Pol {
        timeout: Some(1.0),
        missing: MissingPolicy::Wait,
        ..Pol::default()
    };
    let (mut a, clock) = build(&["a", "b"], pol, None);
    add(&mut a, "a", 1, 1.0, 1);
    clock.advance(1e6);
    a.sweep();
    assert!(a.take_resolutions().is_empty());
    assert_eq!(a.flush_all(), 1);
    assert_eq!(a.take_resolutions(), vec![Resolution::Ack(1)]);
}

#[test]
fn join_21a_flush_evicts_pending_not_staged() {
    let pol = Pol {
        timeout: Some(1.0),
        quorum: Some(1),
        missing: MissingPolicy::Error,
        ..Pol::default()
    };
    let (mut a, clock) = build(&["a", "b"], pol, None);
    add(&mut a, "a", 1, 1.0, 1);
    clock.advance(1.0);
    a.sweep();
    add(&mut a, "b", 2, 5.0, 2);
    assert_eq!(a.flush_all(), 1);
    assert_eq!(a.take_resolutions(), vec![Resolution::Nak(2)]);
    assert_eq!(pop(&mut a).handles, vec![1]);
}

#[test]
fn join_23_identity_from_sync_members_only() {
    let pol = Pol {
        collect: &[("acc", 1000.0)],
        ..Pol::default()
    };
    let (mut a, clock) = build(&["acc", "cam", "imu"], pol, None);
    let cam = Entry {
        producer_name: "cam".into(),
        trace_id: "cam:3f9c1a2b7d4e:5".into(),
        seq: 5,
        event_ts: Some(1_700_000_000.5),
        payload: "c",
    };
    let imu = Entry {
        producer_name: "imu".into(),
        trace_id: "imu:77e1b2c3d4f5:11".into(),
        seq: 11,
        event_ts: Some(1_700_000_000.6),
        payload: "i",
    };
    a.add("imu", imu, 1).expect("known parent");
    a.add("cam", cam, 2).expect("known parent");
    add(&mut a, "acc", 9, 1_700_000_000.5, 3);
    clock.advance(1.0);
    let g = pop(&mut a);
    assert_eq!(g.trace_id, "tw-1700000000500000-2604c79085f2");
    assert_eq!(g.seq, 1_700_000_000_500_000);
    assert_eq!(g.handles, vec![1, 2, 3]);
}

#[test]
fn eos_6_has_pending_from_time_mode() {
    let pol = Pol {
        timeout: Some(1.0),
        quorum: Some(1),
        collect: &[("imu", 100.0)],
        ..Pol::default()
    };
    let (mut a, clock) = build(&["a", "b", "imu"], pol, None);
    assert!(!a.has_pending_from("a") && !a.has_pending_from("imu"));
    add(&mut a, "imu", 1, 1.0, 1);
    assert!(a.has_pending_from("imu"), "non-empty collect buffer");
    add(&mut a, "a", 1, 1.0, 2);
    assert!(a.has_pending_from("a") && !a.has_pending_from("b"));
    clock.advance(1.0);
    a.sweep();
    // Staged: `a` as a member, `imu` as a non-empty claim; the buffer itself is empty now.
    assert!(a.has_pending_from("a") && a.has_pending_from("imu"));
    assert!(!a.has_pending_from("b"));
    let g = pop(&mut a);
    assert_eq!(g.handles, vec![2, 1]);
    assert!(!a.has_pending_from("a") && !a.has_pending_from("imu"));
    assert!(!a.has_pending_from("nope"));
}
