//! Differential tests against the Python reference, videoflow 1.0.4.
//!
//! Each test generates a few thousand cases from a seeded generator, asks the reference's own
//! functions for their answers in one batch (`tests/conformance/refhelper.py`, started once per
//! test binary) and compares them with the Rust core. A failure prints the seed; rerun with
//! `VF_DIFF_SEED=<seed>` to reproduce it. Differences that are deliberate are asserted as such
//! (the difference itself, not a skip) and listed in `docs/COMPATIBILITY.md`; anything else
//! fails.
//!
//! A missing reference fails every test here with the remedy (`./scripts/install-deps`).

mod diff_support;

use std::collections::BTreeMap;

use diff_support::{
    Rng, decoded_desc, desc, envelope_desc, f2h, h2f, has_multi_entry_map, norm, opt_f2h,
    reference, reference_batch, report,
};
use serde_json::{Map, Value as Json, json};
use videoflow_core::envelope::{self, Envelope, MsgType, Payload, WireError, tensor};
use videoflow_core::errors::Disposition;
use videoflow_core::join::identity::{SyncMember, round_half_even_micros, time_group_trace_id};
use videoflow_core::join::policy::JoinPolicy;
use videoflow_core::model::FlowType;
use videoflow_core::msgid::{MsgKind, msgid};
use videoflow_core::partition::{self, KeyPolicy};
use videoflow_core::scaling::{
    self, ClaimObservation, CounterReading, NodeScaleFacts, Observation, RateObjective,
    ScalingError, SubscriptionObservation, ThroughputSample,
};
use videoflow_core::value::{Tensor, Value};

// -- generators ------------------------------------------------------------------------------

/// Opaque (non-native) dtypes numpy understands, with their item sizes, so the reference can
/// decode them too.
const OPAQUE_DTYPES: [(&str, usize); 5] = [
    (">i4", 4),
    (">f8", 8),
    ("complex128", 16),
    ("<U3", 12),
    (">u2", 2),
];

fn gen_tensor(rng: &mut Rng) -> Tensor {
    let (dtype, itemsize) = if rng.chance(85) {
        *rng.pick(&tensor::NATIVE_DTYPES)
    } else {
        *rng.pick(&OPAQUE_DTYPES)
    };
    let dims = rng.below(4) as usize;
    let shape: Vec<i64> = (0..dims).map(|_| rng.range(0, 3)).collect();
    let elements: usize = shape.iter().map(|&d| d as usize).product();
    let data = (0..elements * itemsize).map(|_| rng.u64() as u8).collect();
    Tensor {
        shape,
        dtype: dtype.to_owned(),
        data,
    }
}

fn gen_int(rng: &mut Rng) -> i64 {
    match rng.below(4) {
        0 => rng.u64() as i64,
        1 => *rng.pick(&[0, 1, -1, i64::MAX, i64::MIN, 1 << 53, (1 << 53) + 1]),
        _ => rng.range(-1000, 100_000),
    }
}

/// A value nested at most `depth` more levels; tensors only where `tensors` allows.
fn gen_value(rng: &mut Rng, depth: u32, tensors: bool) -> Value {
    let kinds = if depth == 0 { 6 } else { 9 };
    match rng.below(kinds) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(50)),
        2 => Value::Int(gen_int(rng)),
        3 => Value::Double(rng.double()),
        4 => Value::String(rng.text(12)),
        5 => Value::Bytes((0..rng.below(8)).map(|_| rng.u64() as u8).collect()),
        6 => Value::List(
            (0..rng.below(4))
                .map(|_| gen_value(rng, depth - 1, tensors))
                .collect(),
        ),
        7 => Value::Map(
            (0..rng.below(4))
                .map(|_| (rng.text(6), gen_value(rng, depth - 1, tensors)))
                .collect(),
        ),
        _ if tensors => Value::Tensor(gen_tensor(rng)),
        _ => Value::String(rng.text(4)),
    }
}

fn gen_error(rng: &mut Rng) -> Option<WireError> {
    if rng.chance(15) {
        return None;
    }
    let text = |rng: &mut Rng| {
        if rng.chance(8) {
            // Over the ABORT-1 bound, multi-byte, so the cut is by code point.
            rng.text(3).repeat(1200) + &"é".repeat(rng.below(900) as usize)
        } else {
            rng.text(20)
        }
    };
    let code = if rng.chance(4) {
        String::new()
    } else {
        rng.pick(&["VF_POISON", "VF_DEVICE", "VF_TRANSIENT", "VF_UNKNOWN", "X"])
            .to_string()
    };
    let opt = |rng: &mut Rng, s: String| (rng.chance(60)).then_some(s);
    let remedy = text(rng);
    let node = rng.name();
    let trace = rng.text(10);
    Some(WireError {
        code,
        message: text(rng),
        remedy: opt(rng, remedy).filter(|s| !s.is_empty()),
        disposition: match rng.below(4) {
            0 => None,
            1 => Some(Disposition::Poison),
            2 => Some(Disposition::Transient),
            _ => Some(Disposition::WorkerFatal),
        },
        node: opt(rng, node).filter(|s| !s.is_empty()),
        trace_id: opt(rng, trace).filter(|s| !s.is_empty()),
        num_delivered: rng
            .chance(50)
            .then(|| rng.range(1, i64::from(u32::MAX)) as u32),
        context: (0..rng.below(3))
            .map(|_| (rng.text(5), text(rng)))
            .collect(),
    })
}

fn gen_envelope(rng: &mut Rng, metadata_tensor: bool) -> Envelope {
    let msg_type = match rng.below(10) {
        0..=6 => MsgType::Data,
        7 => MsgType::Eos,
        _ => MsgType::Abort,
    };
    let mut metadata: BTreeMap<String, Value> = (0..rng.below(4))
        .map(|_| (rng.text(6), gen_value(rng, 2, false)))
        .collect();
    if metadata_tensor {
        metadata.insert(rng.text(4), Value::Tensor(gen_tensor(rng)));
    }
    let payload = match msg_type {
        MsgType::Data if rng.chance(25) => Payload::Tensor(gen_tensor(rng)),
        MsgType::Data => {
            // A bare tensor travels as a Tensor payload in both runtimes; inside a Value it
            // is nested in a list or map.
            let v = gen_value(rng, 3, true);
            Payload::Value(match v {
                Value::Tensor(t) => Value::List(vec![Value::Tensor(t)]),
                v => v,
            })
        }
        _ => Payload::None,
    };
    Envelope {
        producer_name: rng.name(),
        flow_id: rng.name(),
        run_id: rng.name(),
        trace_id: rng.text(16),
        seq: if rng.chance(50) {
            rng.u64()
        } else {
            rng.below(1000)
        },
        event_ts: rng.chance(60).then(|| rng.double()),
        msg_type,
        span_id: if rng.chance(70) {
            String::new()
        } else {
            rng.text(8)
        },
        parent_span_id: if rng.chance(70) {
            String::new()
        } else {
            rng.text(8)
        },
        replica_id: if rng.chance(50) {
            rng.below(4) as u32
        } else {
            rng.u64() as u32
        },
        metadata,
        payload,
        error: if msg_type == MsgType::Abort {
            gen_error(rng)
        } else {
            None
        },
    }
}

/// What one side did with one case: an answer, or the class and message it refused with.
fn refused(answer: &Json) -> Option<(&str, &str)> {
    answer
        .get("raised")
        .and_then(Json::as_str)
        .map(|class| (class, answer["message"].as_str().unwrap_or_default()))
}

// -- message ids (MSGID-1) -------------------------------------------------------------------

#[test]
fn msgid_1_message_ids_match_the_reference() {
    let mut rng = Rng::for_test("msgid_1_message_ids_match_the_reference");
    let kinds = [MsgKind::Data, MsgKind::Eos, MsgKind::Abort];
    let cases: Vec<(String, String, String, String, u64, MsgKind)> = (0..4000)
        .map(|_| {
            let seq = match rng.below(3) {
                0 => rng.u64(),
                1 => rng.below(100),
                _ => (1 << 53) + rng.below(1000),
            };
            (
                rng.name(),
                rng.name(),
                rng.name(),
                rng.text(20),
                seq,
                *rng.pick(&kinds),
            )
        })
        .collect();
    let args: Vec<Json> = cases
        .iter()
        .map(|(f, r, p, t, s, k)| json!([f, r, p, t, s, k.as_str()]))
        .collect();
    let answers = reference_batch("msgid", &args);
    let failures: Vec<String> = cases
        .iter()
        .zip(&answers)
        .filter_map(|((f, r, p, t, s, k), want)| {
            let got = msgid(f, r, p, t, *s, *k);
            (json!(got) != *want).then(|| {
                format!(
                    "msgid{:?}: rust {got}, reference {want}",
                    (f, r, p, t, s, k)
                )
            })
        })
        .collect();
    report(&rng, cases.len(), &failures);
}

// -- partition keys (PART-3) -----------------------------------------------------------------

/// A key of any type the wire carries, with the hashed scalars most likely.
fn gen_key(rng: &mut Rng) -> Value {
    match rng.below(12) {
        0..=2 => Value::Double(rng.double()),
        3 | 4 => Value::Int(gen_int(rng)),
        5 => Value::Bool(rng.chance(50)),
        6 | 7 => Value::String(rng.text(10)),
        8 => Value::Null,
        _ => gen_value(rng, 2, false),
    }
}

#[test]
fn part_3_py_str_of_every_key_type_matches_python_str() {
    let mut rng = Rng::for_test("part_3_py_str_of_every_key_type_matches_python_str");
    let keys: Vec<Value> = (0..6000).map(|_| gen_key(&mut rng)).collect();
    let args: Vec<Json> = keys.iter().map(desc).collect();
    let answers = reference_batch("py_str", &args);
    let failures: Vec<String> = keys
        .iter()
        .zip(&answers)
        .filter_map(|(k, want)| {
            let got = partition::py_str(k);
            (json!(got) != *want)
                .then(|| format!("py_str({k:?}): rust {got:?}, python str() {want}"))
        })
        .collect();
    report(&rng, keys.len(), &failures);
}

#[test]
fn part_3_owners_agree_over_keys_decoded_from_rust_envelopes() {
    let mut rng = Rng::for_test("part_3_owners_agree_over_keys_decoded_from_rust_envelopes");
    struct Case {
        bytes: Vec<u8>,
        partition_by: String,
        nb_tasks: u32,
        policy: KeyPolicy,
    }
    let mut cases = Vec::new();
    while cases.len() < 4000 {
        let by_trace = rng.chance(15);
        let partition_by = if by_trace {
            "trace_id".to_owned()
        } else {
            "key".to_owned()
        };
        let mut metadata = BTreeMap::new();
        if !rng.chance(5) {
            metadata.insert("key".to_owned(), gen_key(&mut rng));
        }
        let trace_id = if rng.chance(10) {
            String::new()
        } else {
            rng.text(12)
        };
        let env = Envelope {
            producer_name: "p".into(),
            flow_id: "f".into(),
            run_id: "r".into(),
            trace_id,
            seq: 1,
            metadata,
            payload: Payload::Value(Value::Int(1)),
            ..Envelope::default()
        };
        let bytes = envelope::encode(&env).expect("encodes");
        let nb_tasks = rng.range(2, 9) as u32;
        let policy = if rng.chance(60) {
            KeyPolicy::Reject
        } else {
            KeyPolicy::Fallback {
                partition: rng.range(0, 10) as u32,
            }
        };
        cases.push(Case {
            bytes,
            partition_by,
            nb_tasks,
            policy,
        });
    }
    let args: Vec<Json> = cases
        .iter()
        .map(|c| {
            let (invalid, fallback) = match c.policy {
                KeyPolicy::Reject => ("reject", 0),
                KeyPolicy::Fallback { partition } => ("fallback", partition),
            };
            json!({"envelope": hex::encode(&c.bytes), "partition_by": c.partition_by,
                   "nb_tasks": c.nb_tasks, "invalid": invalid, "fallback_partition": fallback})
        })
        .collect();
    let answers = reference_batch("partition", &args);
    let failures: Vec<String> = cases
        .iter()
        .zip(&answers)
        .filter_map(|(c, want)| {
            // What a Rust replica sees: the decoded envelope, as in the worker.
            let env = envelope::decode(&c.bytes).expect("decodes");
            let key = partition::partition_key(&c.partition_by, &env.trace_id, Some(&env.metadata));
            let got = partition::owner(key.as_deref(), c.nb_tasks, c.policy);
            let got = json!([got.replica, got.invalid_key]);
            (got != *want).then(|| {
                format!(
                    "owner of {:?} (by {}, nb_tasks {}, {:?}): rust {got}, reference {want}",
                    key, c.partition_by, c.nb_tasks, c.policy
                )
            })
        })
        .collect();
    report(&rng, cases.len(), &failures);
}

/// `repr` escapes exactly the characters `str.isprintable()` refuses. Rust's table must agree
/// on every assigned code point; unassigned ones (Cn) are the documented difference
/// (docs/COMPATIBILITY.md D5) and only reach error texts, never a hashed key.
#[test]
fn part_3_repr_printability_agrees_on_every_assigned_code_point() {
    let rng = Rng::for_test("part_3_repr_printability_agrees_on_every_assigned_code_point");
    let table = reference("printable", Json::Null);
    let mut python_nonprintable: BTreeMap<u32, bool> = BTreeMap::new();
    for r in table["ranges"].as_array().expect("ranges") {
        let (lo, hi, cn) = (
            r[0].as_u64().expect("lo") as u32,
            r[1].as_u64().expect("hi") as u32,
            r[2].as_bool().expect("cn"),
        );
        for cp in lo..=hi {
            python_nonprintable.insert(cp, cn);
        }
    }
    let mut failures = Vec::new();
    let mut unassigned_differences = 0usize;
    let mut checked = 0usize;
    for cp in 0..=0x10_ffff_u32 {
        let Some(c) = char::from_u32(cp) else {
            continue;
        };
        checked += 1;
        let py_printable = !python_nonprintable.contains_key(&cp);
        if partition::is_py_printable(c) == py_printable {
            continue;
        }
        match python_nonprintable.get(&cp) {
            Some(true) if partition::is_py_printable(c) => unassigned_differences += 1,
            _ => failures.push(format!(
                "U+{cp:04X}: rust printable={}, python printable={py_printable}",
                partition::is_py_printable(c)
            )),
        }
    }
    eprintln!(
        "unicode {}: {unassigned_differences} unassigned code points Rust keeps unescaped (D5)",
        table["unidata_version"]
    );
    report(&rng, checked, &failures);
}

// -- time-group identity (JOIN-20, JOIN-23) ---------------------------------------------------

fn gen_ts(rng: &mut Rng) -> f64 {
    match rng.below(8) {
        // Exact ties of ts × 1e6: a/2^k for k in 7..=12 multiplied by 1e6 is a multiple of 1/2.
        0 | 1 => rng.range(-(1 << 40), 1 << 40) as f64 / f64::from(1u32 << rng.range(7, 12)),
        2 => 1.7e9 + rng.below(10_000_000) as f64 / 1e6 + rng.double().abs().fract() * 1e-6,
        3 => *rng.pick(&[
            1.5e-06,
            2.5e-06,
            3.5e-06,
            5e-07,
            1_700_000_000.5,
            1_700_000_000.000_002_5,
            -1.5e-06,
            -0.25,
            0.0,
            -0.0,
        ]),
        4 => rng.double(),
        _ => 1.7e9 + rng.double().abs().fract() * 1e6,
    }
}

#[test]
fn join_20_23_time_group_ids_and_half_even_seqs_match_the_reference_assembler() {
    let mut rng =
        Rng::for_test("join_20_23_time_group_ids_and_half_even_seqs_match_the_reference_assembler");
    struct Member {
        parent: String,
        producer: String,
        trace_id: String,
        seq: u64,
        ts: f64,
    }
    let mut cases: Vec<Vec<Member>> = Vec::new();
    while cases.len() < 3000 {
        let base = gen_ts(&mut rng);
        let n = if base.is_finite() { rng.range(1, 4) } else { 1 };
        let mut parents: Vec<String> = Vec::new();
        while parents.len() < n as usize {
            let p = rng.name();
            if !parents.contains(&p) {
                parents.push(p);
            }
        }
        let members = parents
            .into_iter()
            .enumerate()
            .map(|(i, parent)| Member {
                producer: rng.name(),
                trace_id: rng.text(14),
                seq: if rng.chance(30) {
                    rng.u64()
                } else {
                    rng.below(10_000)
                },
                // Within 10 ms of the first member (tolerance 50 ms), so one group forms.
                ts: if i == 0 || base.abs() > 1e12 {
                    base
                } else {
                    base + rng.below(10_000) as f64 * 1e-6
                },
                parent,
            })
            .collect();
        cases.push(members);
    }
    let args: Vec<Json> = cases
        .iter()
        .map(|members| {
            json!({"node": "fuse", "tolerance_ms": f2h(50.0),
                   "members": members.iter().map(|m| json!([m.parent, m.producer, m.trace_id, m.seq, f2h(m.ts)])).collect::<Vec<_>>()})
        })
        .collect();
    let answers = reference_batch("time_group", &args);
    let mut failures = Vec::new();
    let mut out_of_range = 0usize;
    for (members, want) in cases.iter().zip(&answers) {
        // The group's time as 1.0.4 keeps it: `min(group.ts, ts)` in arrival order.
        let ts = members
            .iter()
            .skip(1)
            .fold(members[0].ts, |acc, m| if m.ts < acc { m.ts } else { acc });
        let sync: Vec<SyncMember<'_>> = members
            .iter()
            .map(|m| SyncMember {
                parent: &m.parent,
                producer_name: &m.producer,
                trace_id: &m.trace_id,
                seq: m.seq,
            })
            .collect();
        let described = || {
            members
                .iter()
                .map(|m| format!("{}@{:e}", m.parent, m.ts))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match (round_half_even_micros(ts), refused(want)) {
            (Some(rounded), None) => {
                let got = json!({"trace_id": time_group_trace_id(rounded, None, &sync),
                                 "seq": rounded.to_string(), "event_ts": f2h(ts)});
                if got != *want {
                    failures.push(format!(
                        "group [{}]: rust {got}, reference {want}",
                        described()
                    ));
                }
            }
            // A non-finite ts (or ts × 1e6 overflowing to inf): 1.0.4's emission raises
            // (JOIN-20), Rust has no seq.
            (None, Some(_)) if !(ts * 1e6).is_finite() => {}
            // D6: a finite ts beyond ±2^63 µs (≈ ±292 000 years): 1.0.4 mints a >64-bit seq
            // that no envelope can carry; Rust has none.
            (None, None)
                if want["seq"]
                    .as_str()
                    .is_some_and(|s| s.parse::<i64>().is_err()) =>
            {
                out_of_range += 1;
            }
            (got, _) => failures.push(format!(
                "group [{}]: rust seq {got:?}, reference {want}",
                described()
            )),
        }
    }
    eprintln!("{out_of_range} cases beyond the i64 seq range (documented difference D6)");
    report(&rng, cases.len(), &failures);
}

// -- envelopes both ways (WIRE-1..15, ABORT-1) ------------------------------------------------

#[test]
fn wire_3_envelopes_cross_decode_both_ways_and_encode_identically() {
    let mut rng = Rng::for_test("wire_3_envelopes_cross_decode_both_ways_and_encode_identically");
    let envs: Vec<Envelope> = (0..2500)
        .map(|_| {
            let tensor_in_metadata = rng.chance(3);
            gen_envelope(&mut rng, tensor_in_metadata)
        })
        .collect();
    let rust_bytes: Vec<Result<Vec<u8>, envelope::EnvelopeError>> =
        envs.iter().map(envelope::encode).collect();
    let py_encoded = reference_batch(
        "encode",
        &envs.iter().map(envelope_desc).collect::<Vec<_>>(),
    );
    // Decode every encoding on both sides.
    let mut to_decode: Vec<Json> = Vec::new();
    for (rb, pe) in rust_bytes.iter().zip(&py_encoded) {
        to_decode.push(json!(rb.as_ref().map(hex::encode).unwrap_or_default()));
        to_decode.push(pe.get("bytes").cloned().unwrap_or(json!("")));
    }
    let py_decoded = reference_batch("decode", &to_decode);

    let mut failures = Vec::new();
    let mut byte_identical = 0usize;
    let mut empty_codes = 0usize;
    for (i, env) in envs.iter().enumerate() {
        let fail = |what: String| format!("envelope #{i} {what}\n  input: {env:?}");
        let (rb, pe) = (&rust_bytes[i], &py_encoded[i]);
        let (p_of_r, p_of_p) = (&py_decoded[2 * i], &py_decoded[2 * i + 1]);
        let pb = match (rb, pe.get("bytes").and_then(Json::as_str)) {
            (Err(e), None) => {
                // Both refuse: a tensor in metadata (WIRE-15).
                if !matches!(e, envelope::EnvelopeError::MetadataTensor { .. }) {
                    failures.push(fail(format!("both refused, rust with {e}, reference {pe}")));
                }
                continue;
            }
            (Ok(_), Some(pb)) => hex::decode(pb).expect("hex"),
            (rb, _) => {
                failures.push(fail(format!(
                    "one side refused to encode: rust {:?}, reference {pe}",
                    rb.as_ref().map(|_| "ok")
                )));
                continue;
            }
        };
        let rb = rb.as_ref().expect("checked above");
        let decode = |b: &[u8]| envelope::decode(b).map(|e| norm(&decoded_desc(&e)));
        let (r_of_r, r_of_p) = match (decode(rb), decode(&pb)) {
            (Ok(a), Ok(b)) => (a, b),
            other => {
                failures.push(fail(format!("rust cannot decode: {other:?}")));
                continue;
            }
        };
        let (p_of_r, mut p_of_p) = (norm(p_of_r), norm(p_of_p));
        let (r_of_r, mut r_of_p) = (r_of_r, r_of_p);
        // D3: an ABORT record whose code is explicitly empty — 1.0.4 writes "", Rust writes
        // VF_UNKNOWN (ABORT-1's degradation). Assert exactly that, then compare the rest.
        let code_differs = env.error.as_ref().is_some_and(|e| e.code.is_empty());
        if code_differs {
            empty_codes += 1;
            let codes = [
                &r_of_r["error"]["code"],
                &p_of_r["error"]["code"],
                &r_of_p["error"]["code"],
                &p_of_p["error"]["code"],
            ];
            if codes
                != [
                    &json!("VF_UNKNOWN"),
                    &json!("VF_UNKNOWN"),
                    &json!(""),
                    &json!(""),
                ]
            {
                failures.push(fail(format!("empty code: {codes:?}")));
            }
            p_of_p["error"]["code"] = json!("VF_UNKNOWN");
            r_of_p["error"]["code"] = json!("VF_UNKNOWN");
        }
        if p_of_r != r_of_r {
            failures.push(fail(format!(
                "Rust bytes decode differently:\n  rust      {r_of_r}\n  reference {p_of_r}"
            )));
        }
        if p_of_p != r_of_p {
            failures.push(fail(format!(
                "reference bytes decode differently:\n  rust      {r_of_p}\n  reference {p_of_p}"
            )));
        }
        // D12: numpy's ascontiguousarray makes a 0-d array 1-d, so 1.0.4 sends shape [1]
        // for a 0-d tensor; assert exactly that.
        let zero_d = has_zero_d_tensor(&r_of_r);
        let expected = promote_zero_d(&r_of_r);
        if expected != r_of_p {
            failures.push(fail(format!(
                "the two encoders said different things:\n  rust      {r_of_r}\n  reference {r_of_p}"
            )));
        }
        // D13: prost leaves a map entry's empty key / default value out, upb writes it; the
        // decoded maps are equal, only those entries' bytes differ.
        if !has_multi_entry_map(env) && !code_differs && !zero_d && !has_default_map_entry(env) {
            if *rb == pb {
                byte_identical += 1;
            } else {
                failures.push(fail(format!(
                    "bytes differ:\n  rust      {}\n  reference {}",
                    hex::encode(rb),
                    hex::encode(&pb)
                )));
            }
        }
    }
    eprintln!(
        "{byte_identical} byte-identical encodings; {empty_codes} ABORTs with an empty code (D3)"
    );
    report(&rng, envs.len(), &failures);
}

/// Mutated encodings: both decoders must refuse the same inputs and agree on what they accept.
#[test]
fn wire_3_mutated_bytes_get_the_same_decode_outcome() {
    let mut rng = Rng::for_test("wire_3_mutated_bytes_get_the_same_decode_outcome");
    let mut inputs: Vec<Vec<u8>> = Vec::new();
    while inputs.len() < 3000 {
        let env = gen_envelope(&mut rng, false);
        let Ok(mut b) = envelope::encode(&env) else {
            continue;
        };
        for _ in 0..rng.range(1, 3) {
            if b.is_empty() {
                break;
            }
            let at = rng.below(b.len() as u64) as usize;
            match rng.below(5) {
                0 => b[at] ^= 1 << rng.below(8),
                1 => b[at] = rng.u64() as u8,
                2 => b.truncate(at),
                3 => b.insert(at, rng.u64() as u8),
                _ => {
                    b.remove(at);
                }
            };
        }
        inputs.push(b);
    }
    let answers = reference_batch(
        "decode",
        &inputs
            .iter()
            .map(|b| json!(hex::encode(b)))
            .collect::<Vec<_>>(),
    );
    let mut failures = Vec::new();
    let (mut both_refuse, mut both_accept, mut opaque) = (0usize, 0usize, 0usize);
    let mut known: BTreeMap<&str, usize> = BTreeMap::new();
    for (b, want) in inputs.iter().zip(&answers) {
        let got = envelope::decode(b);
        match (&got, refused(want)) {
            (Err(_), Some(_)) => both_refuse += 1,
            (Ok(env), None) => {
                let (g, w) = (norm(&decoded_desc(env)), norm(want));
                if g == w {
                    both_accept += 1;
                } else if map_entries(&w) < map_entries(&g) || strip_maps(&g) == strip_maps(&w) {
                    // D11: upb drops a map entry that carries an unknown field; prost keeps
                    // its key and value (which may then replace an earlier entry's).
                    *known.entry("D11").or_default() += 1;
                } else {
                    failures.push(format!(
                        "{}: decoded differently:\n  rust      {g}\n  reference {w}",
                        hex::encode(b)
                    ));
                }
            }
            // D4: a tensor whose dtype is not one of the twelve native names is kept opaque
            // by Rust (its length unchecked); numpy refuses what it cannot reshape or parse.
            (Ok(env), Some(_)) if has_opaque_tensor(env) => opaque += 1,
            // D10: malformed protobuf that upb tolerates (a known field with the wrong wire
            // type is skipped as unknown, an over-long varint is truncated) and prost refuses.
            (
                Err(
                    envelope::EnvelopeError::Protobuf(_)
                    | envelope::EnvelopeError::BadPayload { .. },
                ),
                None,
            ) => {
                *known.entry("D10").or_default() += 1;
            }
            (got, _) => failures.push(format!(
                "{}: rust {:?}, reference {want}",
                hex::encode(b),
                got.as_ref().map(|_| "accepted")
            )),
        }
    }
    eprintln!(
        "{both_refuse} refused by both, {both_accept} accepted alike, {opaque} opaque-dtype tensors only Rust accepts (D4), other known: {known:?}"
    );
    report(&rng, inputs.len(), &failures);
}

/// Whether a decoded description holds a 0-d tensor anywhere.
fn has_zero_d_tensor(j: &Json) -> bool {
    match j {
        Json::Object(o) if o.get("t") == Some(&json!("tensor")) => o["shape"] == json!([]),
        Json::Object(o) => o.values().any(has_zero_d_tensor),
        Json::Array(a) => a.iter().any(has_zero_d_tensor),
        _ => false,
    }
}

/// The description with every 0-d tensor given shape [1] (what 1.0.4 re-encodes it as).
fn promote_zero_d(j: &Json) -> Json {
    match j {
        Json::Object(o) if o.get("t") == Some(&json!("tensor")) && o["shape"] == json!([]) => {
            let mut o = o.clone();
            o.insert("shape".into(), json!([1]));
            Json::Object(o)
        }
        Json::Object(o) => Json::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), promote_zero_d(v)))
                .collect(),
        ),
        Json::Array(a) => Json::Array(a.iter().map(promote_zero_d).collect()),
        other => other.clone(),
    }
}

/// Whether some map entry has an empty key or a default value (an empty map, an empty
/// context text): the entries prost and upb encode differently (D13).
fn has_default_map_entry(env: &Envelope) -> bool {
    fn in_value(v: &Value) -> bool {
        match v {
            Value::List(items) => items.iter().any(in_value),
            Value::Map(m) => m.iter().any(|(k, v)| {
                k.is_empty() || matches!(v, Value::Map(e) if e.is_empty()) || in_value(v)
            }),
            _ => false,
        }
    }
    env.metadata
        .iter()
        .any(|(k, v)| k.is_empty() || matches!(v, Value::Map(e) if e.is_empty()) || in_value(v))
        || matches!(&env.payload, Payload::Value(v) if in_value(v))
        || env
            .error
            .as_ref()
            .is_some_and(|e| e.context.iter().any(|(k, v)| k.is_empty() || v.is_empty()))
}

/// The description with every map emptied: what must still agree when only map entries
/// differ (D11).
fn strip_maps(j: &Json) -> Json {
    match j {
        Json::Object(o) if o.get("t") == Some(&json!("map")) => json!({"t": "map", "v": []}),
        Json::Object(o) => Json::Object(
            o.iter()
                .map(|(k, v)| match k.as_str() {
                    "metadata" => (k.clone(), json!([])),
                    "context" => (k.clone(), json!({})),
                    _ => (k.clone(), strip_maps(v)),
                })
                .collect(),
        ),
        Json::Array(a) => Json::Array(a.iter().map(strip_maps).collect()),
        other => other.clone(),
    }
}

/// Map entries anywhere in a decoded description (metadata, nested maps, error context).
fn map_entries(j: &Json) -> usize {
    match j {
        Json::Object(o) if o.get("t") == Some(&json!("map")) => {
            let pairs = o["v"].as_array().map_or(0, Vec::len);
            pairs
                + o["v"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| map_entries(&p[1]))
                    .sum::<usize>()
        }
        Json::Object(o) => {
            let own = match (o.get("metadata"), o.get("context")) {
                (Some(Json::Array(m)), _) => m.len(),
                (_, Some(Json::Object(c))) => c.len(),
                _ => 0,
            };
            own + o.values().map(map_entries).sum::<usize>()
        }
        Json::Array(a) => a.iter().map(map_entries).sum(),
        _ => 0,
    }
}

fn has_opaque_tensor(env: &Envelope) -> bool {
    fn in_value(v: &Value) -> bool {
        match v {
            Value::Tensor(t) => tensor::dtype_itemsize(&t.dtype).is_none(),
            Value::List(items) => items.iter().any(in_value),
            Value::Map(m) => m.values().any(in_value),
            _ => false,
        }
    }
    match &env.payload {
        Payload::Tensor(t) => tensor::dtype_itemsize(&t.dtype).is_none(),
        Payload::Value(v) => in_value(v),
        _ => false,
    }
}

// -- join policies (JOIN-1, JOIN-10) ---------------------------------------------------------

/// One generated key of a reference dict: a JSON value, or a float JSON cannot carry.
#[derive(Clone, Debug)]
enum Field {
    Json(Json),
    NonFinite(f64),
}

fn gen_number(rng: &mut Rng) -> Field {
    match rng.below(12) {
        0 => Field::NonFinite(*rng.pick(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY])),
        1 => Field::Json(json!(0)),
        2 => Field::Json(json!(0.0)),
        3 => Field::Json(json!(-(rng.below(100) as i64))),
        4 => Field::Json(json!(rng.range(1, 100))),
        _ => Field::Json(json!(rng.below(100_000) as f64 / 1000.0 - 5.0)),
    }
}

#[test]
fn join_1_10_policy_validation_outcomes_match_the_reference() {
    let mut rng = Rng::for_test("join_1_10_policy_validation_outcomes_match_the_reference");
    const NAMES: [&str; 6] = ["cam", "imu", "lidar", "it's", "a\\b", "é"];
    struct Case {
        dict: Vec<(&'static str, Field)>,
        parents: Vec<String>,
    }
    let mut cases = Vec::new();
    while cases.len() < 4000 {
        let mut dict: Vec<(&'static str, Field)> = Vec::new();
        let j = Field::Json;
        let mode_time = rng.chance(60);
        if rng.chance(90) {
            dict.push((
                "mode",
                match rng.below(20) {
                    0 => j(Json::Null),
                    1 => j(json!("bogus")),
                    2 => j(json!(1)),
                    _ => j(json!(if mode_time { "time" } else { "trace" })),
                },
            ));
        }
        if rng.chance(70) {
            dict.push((
                "missing",
                match rng.below(20) {
                    0 => j(Json::Null),
                    1 => j(json!("skip")),
                    n => j(json!(["drop", "wait", "error"][n as usize % 3])),
                },
            ));
        }
        if rng.chance(60) {
            dict.push((
                "timeout_seconds",
                if rng.chance(20) {
                    j(Json::Null)
                } else {
                    gen_number(&mut rng)
                },
            ));
        }
        if rng.chance(30) {
            dict.push(("max_pending", j(json!(*rng.pick(&[0, 1, -3, 256, 1000])))));
        }
        if rng.chance(if mode_time { 85 } else { 20 }) {
            dict.push((
                "tolerance_ms",
                if rng.chance(10) {
                    j(Json::Null)
                } else {
                    gen_number(&mut rng)
                },
            ));
        }
        if rng.chance(40) {
            dict.push((
                "quorum",
                match rng.below(12) {
                    0 => j(Json::Null),
                    1 => j(json!(2.0)),
                    2 => j(json!(true)),
                    _ => j(json!(rng.range(-1, 4))),
                },
            ));
        }
        if rng.chance(40) {
            let mut collect = Vec::new();
            for _ in 0..rng.below(3) {
                let window = gen_number(&mut rng);
                collect.push((rng.pick(&NAMES).to_string(), window));
            }
            collect.sort_by(|a, b| a.0.cmp(&b.0));
            collect.dedup_by(|a, b| a.0 == b.0);
            dict.push((
                "collect",
                Field::Json(json!({"__collect__": collect.len()})),
            ));
            // The windows are carried separately so non-finite ones survive.
            for (parent, window) in collect {
                dict.push((
                    Box::leak(format!("collect.{parent}").into_boxed_str()),
                    window,
                ));
            }
        }
        let n = rng.range(1, 4) as usize;
        let mut parents: Vec<String> = Vec::new();
        while parents.len() < n {
            let p = rng.pick(&NAMES).to_string();
            if !parents.contains(&p) {
                parents.push(p);
            }
        }
        cases.push(Case { dict, parents });
    }

    // The dict each side reads: Rust gets finite placeholders (1.5) where JSON cannot carry the
    // value and patches the parsed policy; the reference gets {"$f": bits}.
    let to_json = |dict: &[(&str, Field)], for_python: bool| -> Map<String, Json> {
        let mut out = Map::new();
        let mut collect = Map::new();
        for (k, f) in dict {
            let v = match f {
                Field::Json(v) => v.clone(),
                Field::NonFinite(x) if for_python => json!({"$f": f2h(*x)}),
                Field::NonFinite(_) => json!(1.5),
            };
            if let Some(parent) = k.strip_prefix("collect.") {
                collect.insert(parent.to_owned(), v);
            } else if *k == "collect" {
                continue;
            } else {
                out.insert((*k).to_owned(), v);
            }
        }
        if dict.iter().any(|(k, _)| *k == "collect") {
            out.insert("collect".into(), Json::Object(collect));
        }
        out
    };
    let args: Vec<Json> = cases
        .iter()
        .map(|c| json!({"dict": to_json(&c.dict, true), "node": "fuse", "parents": c.parents}))
        .collect();
    let answers = reference_batch("join_policy", &args);

    let mut failures = Vec::new();
    let mut known: BTreeMap<&str, usize> = BTreeMap::new();
    for (c, want) in cases.iter().zip(&answers) {
        let parsed = JoinPolicy::from_reference_json(&to_json(&c.dict, false)).map(|mut p| {
            for (k, f) in &c.dict {
                if let Field::NonFinite(x) = f {
                    match *k {
                        "timeout_seconds" if p.timeout_seconds.is_some() => {
                            p.timeout_seconds = Some(*x)
                        }
                        "tolerance_ms" => p.tolerance_ms = Some(*x),
                        _ => {
                            if let Some(parent) = k.strip_prefix("collect.") {
                                p.collect.insert(parent.to_owned(), *x);
                            }
                        }
                    }
                }
            }
            p
        });
        let rust = match &parsed {
            Err(bad) => Err(format!("type:{}", bad.field)),
            Ok(p) => match p.problems("fuse", &c.parents).into_iter().next() {
                Some(problem) => Err(problem.message),
                None => Ok(()),
            },
        };
        let python = match refused(want) {
            None => Ok(()),
            Some((class, message)) => Err((class, message)),
        };
        let nan_in = |pred: &dyn Fn(&str) -> bool| {
            c.dict
                .iter()
                .any(|(k, f)| pred(k) && matches!(f, Field::NonFinite(x) if x.is_nan()))
        };
        let non_integer_quorum = c.dict.iter().any(|(k, f)| {
            *k == "quorum" && matches!(f, Field::Json(v) if v.is_boolean() || v.is_f64())
        });
        let verdict = match (&rust, &python) {
            (Ok(()), Ok(())) => None,
            (Err(r), Err((_, p))) if r == p => None,
            // Both refuse; Rust checks every field's type before the rules (§21.1 item 3).
            (Err(r), Err(_)) if r.starts_with("type:") => Some("both refuse (types first)"),
            // D8: Rust refuses a non-integer quorum (2.0, true) that 1.0.4 takes as a number.
            (Err(r), _) if r == "type:quorum" && non_integer_quorum => Some("D8"),
            // D7: a NaN tolerance or window passes 1.0.4's `not x or x <= 0`; Rust refuses it.
            (Err(r), Ok(())) | (Err(r), Err(_))
                if (r.contains("tolerance_ms") && nan_in(&|k| k == "tolerance_ms"))
                    || (r.starts_with("collect window")
                        && nan_in(&|k| k.starts_with("collect."))) =>
            {
                Some("D7")
            }
            // D9: an integer window is quoted as `0` by 1.0.4 and `0.0` by Rust.
            (Err(r), Err((_, p)))
                if r.starts_with("collect window") && r.trim_end_matches(".0") == *p =>
            {
                Some("D9")
            }
            _ => {
                failures.push(format!(
                    "policy {:?} parents {:?}: rust {rust:?}, reference {python:?}",
                    c.dict, c.parents
                ));
                None
            }
        };
        if let Some(v) = verdict {
            *known.entry(v).or_default() += 1;
        }
    }
    eprintln!("known differences: {known:?}");
    report(&rng, cases.len(), &failures);
}

// -- scaling decisions (SCALE-1..6) ----------------------------------------------------------

/// Compares a Rust refusal with the reference's: class, message and remedy.
fn same_refusal(e: &ScalingError, want: &Json) -> bool {
    let class = match e.code() {
        "VF_CAPABILITY" => "CapabilityError",
        _ => "ConfigError",
    };
    want["raised"] == class && want["message"] == e.to_string() && want["remedy"] == e.remedy()
}

fn gen_count(rng: &mut Rng) -> i64 {
    match rng.below(6) {
        0 => 0,
        1 => rng.range(0, 1 << 60),
        2 => rng.range((1 << 53) - 5, (1 << 53) + 1_000_000),
        _ => rng.range(0, 200),
    }
}

fn gen_observation<T>(rng: &mut Rng, make: impl FnOnce(&mut Rng) -> T) -> Observation<T> {
    if rng.chance(12) {
        Observation::unknown(*rng.pick(&["timeout", "auth", "unreachable"]), "x")
    } else {
        Observation::Known(make(rng))
    }
}

fn observation_json<T>(o: Option<&Observation<T>>, f: impl Fn(&T) -> Json) -> Json {
    match o {
        None => Json::Null,
        Some(Observation::Known(v)) => json!({"known": f(v)}),
        Some(Observation::Unknown { reason, .. }) => json!({"unknown": reason}),
    }
}

#[test]
fn scale_1_2_demand_decisions_match_the_reference() {
    let mut rng = Rng::for_test("scale_1_2_demand_decisions_match_the_reference");
    type Obs = BTreeMap<String, Observation<SubscriptionObservation>>;
    // (observations, required parents, target, min, max)
    type Case = (Obs, Option<Vec<String>>, i64, i64, i64);
    let cases: Vec<Case> = (0..4000)
        .map(|_| {
            let names = ["a", "b", "c", "d"];
            let obs: Obs = (0..rng.below(4))
                .map(|_| {
                    let o = gen_observation(&mut rng, |r| SubscriptionObservation {
                        available: gen_count(r) / 2,
                        leased: gen_count(r) / 2,
                        unresolved: gen_count(r),
                        dropped: gen_count(r),
                        rejected_publications: gen_count(r),
                    });
                    (rng.pick(&names).to_string(), o)
                })
                .collect();
            let required = rng.chance(40).then(|| {
                (0..rng.below(4))
                    .map(|_| rng.pick(&names).to_string())
                    .collect()
            });
            let target = if rng.chance(5) {
                rng.range(-1, 0)
            } else {
                rng.range(1, 30)
            };
            let min = if rng.chance(5) {
                rng.range(-1, 0)
            } else {
                rng.range(1, 4)
            };
            let max = rng.range(0, 15);
            (obs, required, target, min, max)
        })
        .collect();
    let args: Vec<Json> = cases
        .iter()
        .map(|(obs, required, target, min, max)| {
            json!({"observations": obs.iter().map(|(k, o)| json!([k, observation_json(Some(o), |s: &SubscriptionObservation| json!({
                        "available": s.available, "leased": s.leased, "unresolved": s.unresolved,
                        "dropped": s.dropped, "rejected_publications": s.rejected_publications}))])).collect::<Vec<_>>(),
                   "required": required, "target": target, "min": min, "max": max})
        })
        .collect();
    let answers = reference_batch("observe_demand", &args);
    let failures: Vec<String> = cases
        .iter()
        .zip(&answers)
        .filter_map(|((obs, required, target, min, max), want)| {
            let got = scaling::observe_demand(obs, required.as_deref(), *target, *min, *max);
            let same = match &got {
                Err(e) => same_refusal(e, want),
                Ok(d) => {
                    json!({"replicas": d.replicas, "diagnosis": d.diagnosis.as_str(),
                           "parents": d.parents.iter().map(|p| json!([p.parent, p.lag, p.replicas, p.unknown_reason])).collect::<Vec<_>>(),
                           "unknown_parents": d.unknown_parents, "starved_parents": d.starved_parents})
                        == *want
                }
            };
            (!same).then(|| format!("observe_demand({obs:?}, {required:?}, {target}, {min}, {max}): rust {got:?}, reference {want}"))
        })
        .collect();
    report(&rng, cases.len(), &failures);
}

fn sample_json(s: &ThroughputSample) -> Json {
    json!({"offered": s.offered, "processed": s.processed, "dropped": s.dropped,
           "window_seconds": f2h(s.window_seconds)})
}

#[test]
fn scale_4_throughput_samples_match_the_reference() {
    let mut rng = Rng::for_test("scale_4_throughput_samples_match_the_reference");
    let reading = |rng: &mut Rng| CounterReading {
        offered: gen_count(rng),
        processed: gen_count(rng),
        dropped: gen_count(rng),
        evicted: gen_count(rng),
    };
    let cases: Vec<(CounterReading, CounterReading, f64)> = (0..3000)
        .map(|_| (reading(&mut rng), reading(&mut rng), rng.double().abs()))
        .collect();
    let args: Vec<Json> = cases
        .iter()
        .map(|(b, a, w)| {
            json!([
                [b.offered, b.processed, b.dropped, b.evicted],
                [a.offered, a.processed, a.dropped, a.evicted],
                f2h(*w)
            ])
        })
        .collect();
    let answers = reference_batch("throughput_sample", &args);
    let failures: Vec<String> = cases
        .iter()
        .zip(&answers)
        .filter_map(|((b, a, w), want)| {
            let got = sample_json(&scaling::throughput_sample(*b, *a, *w));
            (got != *want)
                .then(|| format!("throughput_sample({b:?}, {a:?}): rust {got}, reference {want}"))
        })
        .collect();
    report(&rng, cases.len(), &failures);
}

#[test]
fn scale_3_rate_decisions_match_the_reference() {
    let mut rng = Rng::for_test("scale_3_rate_decisions_match_the_reference");
    struct Case {
        sample: Option<Observation<ThroughputSample>>,
        objective: RateObjective,
        current: i64,
        min: i64,
        max: i64,
        last_change_at: Option<f64>,
        now: f64,
    }
    let cases: Vec<Case> = (0..4000)
        .map(|_| {
            let sample = (!rng.chance(5)).then(|| {
                gen_observation(&mut rng, |r| {
                    let offered = gen_count(r);
                    ThroughputSample {
                        offered,
                        processed: if r.chance(50) && offered > 0 {
                            r.range(0, offered)
                        } else {
                            gen_count(r)
                        },
                        dropped: gen_count(r),
                        window_seconds: r.range(0, 40) as f64 / 2.0,
                    }
                })
            });
            let objective = RateObjective {
                min_delivered_fraction: if rng.chance(10) {
                    rng.double()
                } else {
                    rng.range(1, 100) as f64 / 100.0
                },
                control_window_seconds: if rng.chance(5) {
                    rng.range(-2, 0) as f64
                } else {
                    rng.range(1, 20) as f64 / 2.0
                },
                stabilization_seconds: if rng.chance(5) {
                    -1.0
                } else {
                    rng.range(0, 60) as f64
                },
            };
            Case {
                sample,
                objective,
                current: if rng.chance(5) { 0 } else { rng.range(1, 20) },
                min: if rng.chance(3) { 0 } else { rng.range(1, 3) },
                max: rng.range(1, 30),
                last_change_at: rng.chance(50).then(|| rng.range(0, 100) as f64),
                now: rng.range(0, 160) as f64,
            }
        })
        .collect();
    let args: Vec<Json> = cases
        .iter()
        .map(|c| {
            json!({"sample": observation_json(c.sample.as_ref(), sample_json),
                   "objective": {"min_delivered_fraction": f2h(c.objective.min_delivered_fraction),
                                 "control_window_seconds": f2h(c.objective.control_window_seconds),
                                 "stabilization_seconds": f2h(c.objective.stabilization_seconds)},
                   "current": c.current, "min": c.min, "max": c.max,
                   "last_change_at": opt_f2h(c.last_change_at), "now": f2h(c.now)})
        })
        .collect();
    let answers = reference_batch("observe_rate_demand", &args);
    let failures: Vec<String> = cases
        .iter()
        .zip(&answers)
        .filter_map(|(c, want)| {
            let got = scaling::observe_rate_demand(
                c.sample.as_ref(),
                &c.objective,
                c.current,
                c.min,
                c.max,
                c.last_change_at,
                c.now,
            );
            let same = match &got {
                Err(e) => same_refusal(e, want),
                Ok(d) => {
                    json!({"replicas": d.replicas, "diagnosis": d.diagnosis.as_str(),
                           "delivered_fraction": opt_f2h(d.delivered_fraction),
                           "sample": d.sample.as_ref().map(sample_json),
                           "unknown_reason": d.unknown_reason})
                        == *want
                }
            };
            (!same).then(|| {
                format!(
                    "observe_rate_demand({:?}, {:?}, current {}, [{}, {}], {:?}, {}): rust {got:?}, reference {want}",
                    c.sample, c.objective, c.current, c.min, c.max, c.last_change_at, c.now
                )
            })
        })
        .collect();
    report(&rng, cases.len(), &failures);
}

#[test]
fn scale_5_capacity_decisions_match_the_reference() {
    let mut rng = Rng::for_test("scale_5_capacity_decisions_match_the_reference");
    type Claims = BTreeMap<String, Observation<ClaimObservation>>;
    let statuses = [
        "pending",
        "allocated",
        "prepared",
        "ready",
        "failed",
        "releasing",
    ];
    let cases: Vec<(i64, Claims)> = (0..3000)
        .map(|_| {
            let claims = (0..rng.below(7))
                .map(|_| {
                    let o = gen_observation(&mut rng, |r| ClaimObservation {
                        status: r.pick(&statuses).to_string(),
                        grant_devices: r.range(0, 2),
                    });
                    (rng.name(), o)
                })
                .collect();
            (rng.range(-2, 9), claims)
        })
        .collect();
    let args: Vec<Json> = cases
        .iter()
        .map(|(desired, claims)| {
            json!({"desired": desired,
                   "claims": claims.iter().map(|(k, o)| json!([k, observation_json(Some(o), |c: &ClaimObservation| json!({"status": c.status, "grant_devices": c.grant_devices}))])).collect::<Vec<_>>()})
        })
        .collect();
    let answers = reference_batch("reconcile_capacity", &args);
    let failures: Vec<String> = cases
        .iter()
        .zip(&answers)
        .filter_map(|((desired, claims), want)| {
            let got = scaling::reconcile_capacity(*desired, claims);
            let same = match &got {
                Err(e) => same_refusal(e, want),
                Ok(d) => {
                    json!({"desired": d.desired, "granted": d.granted, "ready": d.ready,
                           "admitted": d.admitted, "diagnosis": d.diagnosis.as_str(),
                           "reason": d.reason, "unknown_claims": d.unknown_claims})
                        == *want
                }
            };
            (!same).then(|| {
                format!("reconcile_capacity({desired}, {claims:?}): rust {got:?}, reference {want}")
            })
        })
        .collect();
    report(&rng, cases.len(), &failures);
}

#[test]
fn scale_6_autoscaling_admission_matches_the_reference() {
    let mut rng = Rng::for_test("scale_6_autoscaling_admission_matches_the_reference");
    struct Case {
        node: String,
        flow_type: FlowType,
        kind: &'static str,
        parents: usize,
        nb_tasks: i64,
        partition_by: Option<&'static str>,
        is_job: bool,
        uses_gpu: bool,
        gpu_autoscaling: bool,
    }
    let cases: Vec<Case> = (0..3000)
        .map(|_| Case {
            node: rng.text(8),
            flow_type: if rng.chance(50) {
                FlowType::Batch
            } else {
                FlowType::Realtime
            },
            kind: ["producer", "processor", "processor", "consumer"][rng.below(4) as usize],
            parents: rng.range(0, 3) as usize,
            nb_tasks: rng.range(1, 4),
            partition_by: *rng.pick(&[None, Some(""), Some("key"), Some("trace_id")]),
            is_job: rng.chance(30),
            uses_gpu: rng.chance(30),
            gpu_autoscaling: rng.chance(50),
        })
        .collect();
    let args: Vec<Json> = cases
        .iter()
        .map(|c| {
            json!({"node": c.node, "flow_type": c.flow_type.as_str(), "kind": c.kind,
                   "parents": c.parents, "nb_tasks": c.nb_tasks, "partition_by": c.partition_by,
                   "is_job": c.is_job, "uses_gpu": c.uses_gpu, "gpu_autoscaling": c.gpu_autoscaling})
        })
        .collect();
    let answers = reference_batch("admit_autoscaling", &args);
    let failures: Vec<String> = cases
        .iter()
        .zip(&answers)
        .filter_map(|(c, want)| {
            let facts = NodeScaleFacts {
                kind: c.kind,
                parents: c.parents,
                nb_tasks: c.nb_tasks,
                partition_by: c.partition_by,
                renders_as_job: c.is_job,
                uses_gpu: c.uses_gpu,
                gpu_autoscaling: c.gpu_autoscaling,
            };
            let got = scaling::admit_autoscaling(&c.node, c.flow_type, &facts);
            let same = match &got {
                Err(e) => same_refusal(e, want),
                Ok(reasons) => {
                    json!({"reasons": reasons.iter().map(ToString::to_string).collect::<Vec<_>>()})
                        == *want
                }
            };
            (!same).then(|| {
                format!(
                    "admit_autoscaling({:?}, {facts:?}): rust {got:?}, reference {want}",
                    c.node
                )
            })
        })
        .collect();
    report(&rng, cases.len(), &failures);
}

#[test]
fn diff_seed_is_reported_and_reproducible() {
    // The same seed gives the same cases: what makes a printed seed a reproduction.
    let mut a = Rng::for_test("x");
    let mut b = Rng::for_test("x");
    assert_eq!(
        (0..16).map(|_| a.u64()).collect::<Vec<_>>(),
        (0..16).map(|_| b.u64()).collect::<Vec<_>>()
    );
    let _ = h2f(&json!(f2h(1.5)));
}
