//! Envelope v4 codec encode/decode : a scalar map, 20 detections
//! (a list of 20 maps, the reference's dict shape), 640×480×3 and 1920×1080×3 `uint8`
//! tensors inline. Run through `scripts/bench`, or `cargo bench -p videoflow-core --bench codec`.
//!
//! The Python reference's published v4 figures this is compared against: scalar map
//! 5.8 µs / 4.4 µs, 20 detections 107 / 60 µs, 1080p inline 3.99 / 1.64 ms (encode / decode).
//!
//! Cases per payload: `encode`; `decode` from a `Bytes` buffer (what the worker holds: the
//! NATS message payload), so tensor data is sliced, not copied; `decode_slice` from a borrowed
//! `&[u8]` (one copy of the payload). `memcpy_1920x1080x3` is one plain copy of a 1080p frame
//! into a fresh buffer: the floor of any encoder that returns contiguous bytes, so a reader can
//! tell the codec's cost from the machine's memory bandwidth.
//!
//! Profiling: `VF_CODEC_PROFILE=<case>/<op>:<iterations>` (e.g. `scalar_map/decode:200000`)
//! runs just that loop, a fixed number of times, without criterion — deterministic under
//! `valgrind --tool=callgrind`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::Criterion;
use videoflow_core::envelope::{self, Envelope, Payload};
use videoflow_core::value::{Tensor, Value};

fn envelope_with(payload: Payload) -> Envelope {
    Envelope {
        producer_name: "producer".into(),
        flow_id: "bench".into(),
        run_id: "r1".into(),
        trace_id: "0123456789abcdef0123456789abcdef".into(),
        seq: 42,
        event_ts: Some(1_700_000_000.25),
        replica_id: 0,
        metadata: BTreeMap::from([
            ("proctime".to_owned(), Value::Double(0.001)),
            ("actual_proctime".to_owned(), Value::Double(0.002)),
        ]),
        payload,
        ..Envelope::default()
    }
}

fn scalar_map() -> Payload {
    Payload::Value(Value::Map(BTreeMap::from([
        ("count".to_owned(), Value::Int(17)),
        ("mean".to_owned(), Value::Double(3.25)),
        ("label".to_owned(), Value::String("car".into())),
        ("ok".to_owned(), Value::Bool(true)),
    ])))
}

fn detections(n: usize) -> Payload {
    let one = |i: usize| {
        let f = i as f64;
        Value::Map(BTreeMap::from([
            (
                "box".to_owned(),
                Value::List(vec![
                    Value::Double(f),
                    Value::Double(f + 1.5),
                    Value::Double(f + 40.0),
                    Value::Double(f + 80.0),
                ]),
            ),
            ("score".to_owned(), Value::Double(0.5 + f / 100.0)),
            (
                "class_id".to_owned(),
                Value::Int(i64::try_from(i % 7).unwrap_or(0)),
            ),
            (
                "label".to_owned(),
                Value::String(format!("class-{}", i % 7)),
            ),
        ]))
    };
    Payload::Value(Value::List((0..n).map(one).collect()))
}

fn frame_bytes(w: usize, h: usize) -> Vec<u8> {
    (0..w * h * 3).map(|i| (i % 251) as u8).collect()
}

fn frame(w: usize, h: usize) -> Payload {
    Payload::Tensor(Tensor {
        shape: vec![h as i64, w as i64, 3],
        dtype: "uint8".into(),
        data: frame_bytes(w, h).into(),
    })
}

/// The cases, built lazily so a profile run pays only for its own.
const CASES: [&str; 4] = [
    "scalar_map",
    "detections_20",
    "tensor_640x480x3",
    "tensor_1920x1080x3",
];

fn payload(name: &str) -> Payload {
    match name {
        "scalar_map" => scalar_map(),
        "detections_20" => detections(20),
        "tensor_640x480x3" => frame(640, 480),
        _ => frame(1920, 1080),
    }
}

fn codec(c: &mut Criterion) {
    let mut group = c.benchmark_group("codec");
    for name in CASES {
        let env = envelope_with(payload(name));
        let bytes = Bytes::from(envelope::encode(&env).expect("encodes"));
        group.bench_function(format!("{name}/encode"), |b| {
            b.iter(|| envelope::encode(black_box(&env)).expect("encodes"));
        });
        group.bench_function(format!("{name}/decode"), |b| {
            b.iter(|| envelope::decode_bytes(black_box(bytes.clone())).expect("decodes"));
        });
        group.bench_function(format!("{name}/decode_slice"), |b| {
            b.iter(|| envelope::decode(black_box(&bytes[..])).expect("decodes"));
        });
    }
    let src = frame_bytes(1920, 1080);
    group.bench_function("memcpy_1920x1080x3", |b| {
        b.iter(|| black_box(black_box(&src[..]).to_vec()));
    });
    group.finish();
}

/// `VF_CODEC_PROFILE=<case>/<op>:<n>`: `n` iterations of one case, no statistics.
fn profile(spec: &str) {
    let (case, n) = spec.split_once(':').unwrap_or((spec, "10000"));
    let n: u64 = n
        .parse()
        .expect("VF_CODEC_PROFILE=<case>/<op>:<iterations>");
    let (name, op) = case
        .split_once('/')
        .expect("VF_CODEC_PROFILE=<case>/<op>:<iterations>");
    let env = envelope_with(payload(name));
    let bytes = Bytes::from(envelope::encode(&env).expect("encodes"));
    for _ in 0..n {
        match op {
            "encode" => drop(black_box(
                envelope::encode(black_box(&env)).expect("encodes"),
            )),
            "decode" => drop(black_box(
                envelope::decode_bytes(black_box(bytes.clone())).expect("decodes"),
            )),
            _ => drop(black_box(
                envelope::decode(black_box(&bytes[..])).expect("decodes"),
            )),
        }
    }
}

fn config() -> Criterion {
    // `VF_BENCH_QUICK=1` (scripts/bench --quick): short windows, still criterion's statistics.
    let quick = std::env::var("VF_BENCH_QUICK").is_ok_and(|v| v == "1");
    let (warm, measure, samples) = if quick {
        (Duration::from_millis(200), Duration::from_millis(600), 10)
    } else {
        (Duration::from_secs(1), Duration::from_secs(3), 30)
    };
    Criterion::default()
        .warm_up_time(warm)
        .measurement_time(measure)
        .sample_size(samples)
}

fn main() {
    if let Ok(spec) = std::env::var("VF_CODEC_PROFILE") {
        profile(&spec);
        return;
    }
    let mut c = config().configure_from_args();
    codec(&mut c);
    c.final_summary();
}
