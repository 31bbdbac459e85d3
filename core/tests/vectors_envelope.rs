//! Golden envelope and reject vectors (`shared/vectors/envelope`, `shared/vectors/reject`),
//! replayed exactly as `shared/vectors/README.md` prescribes: every manifest entry is its own
//! named test (`envelope::<name>`, `reject::<name>`), compared field by field after decoding,
//! never by re-encoded bytes. The `spec::*` tests pin the worked bytes of protocol §4.4/§4.5.

mod support;

use std::collections::BTreeMap;

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value as Json;
use videoflow_core::envelope::{
    self, Envelope, MsgType, Payload, TENSOR_TYPE, VALUE_TYPE, WireError, is_legacy_msgpack,
};
use videoflow_core::errors::Disposition;
use videoflow_core::msgid::{MsgKind, msgid};
use videoflow_core::value::Value;

/// `abort` (177 bytes), protocol §4.4.
const ABORT_HEX: &str = "080410031a086465746563746f722206666c6f772d412a0572756e2d31320861626f72742d7232380b58027a83010a0956465f444556494345121e43554441206f7574206f66206d656d6f7279206f6e2064657669636520301a324c6f776572207468652062617463682073697a652c206f72206772616e7420746865206e6f6465206d6f7265205652414d2e20032a086465746563746f72320663616d3a34313802420c0a077265706c696361120132";
/// `abort_minimal` (63 bytes), protocol §4.4.
const ABORT_MINIMAL_HEX: &str = "080410031a0363616d2206666c6f772d412a0572756e2d31320861626f72742d72307a1b0a0a56465f554e4b4e4f574e120d70726f64756365722064696564";
/// `eos.bin` (34 bytes), protocol §4.4: `08 04 10 02 1a 03 "cam" 22 06 "flow-A" 2a 05 "run-1"
/// 32 06 "eos-r0" 38 09`.
const EOS_HEX: &str = "080410021a0363616d2206666c6f772d412a0572756e2d313206656f732d72303809";

type Check = Result<(), Failed>;

fn ensure(cond: bool, what: impl FnOnce() -> String) -> Check {
    if cond { Ok(()) } else { Err(what().into()) }
}

fn ensure_eq<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Check {
    ensure(got == want, || {
        format!("{what}: got {got:?}, want {want:?}")
    })
}

fn str_field<'a>(entry: &'a Json, key: &str) -> Result<&'a str, Failed> {
    entry[key]
        .as_str()
        .ok_or_else(|| format!("manifest field {key:?} is not a string").into())
}

fn manifest(rel: &str) -> Result<Vec<Json>, Failed> {
    support::read_json(rel)
        .as_array()
        .cloned()
        .ok_or_else(|| format!("{rel} is not a JSON array").into())
}

fn hex_bytes(s: &str) -> Result<Vec<u8>, Failed> {
    hex::decode(s).map_err(|e| format!("bad hex: {e}").into())
}

/// README "envelope/" steps 1–4 for one manifest entry.
fn check_envelope(entry: &Json) -> Check {
    let file = str_field(entry, "file")?;
    let bytes = support::read_bytes(&format!("envelope/{file}"));

    // 1. Not a msgpack map header.
    let first = *bytes.first().ok_or("empty vector file")?;
    ensure(!is_legacy_msgpack(first), || {
        format!("first byte {first:#04x} is a msgpack map header")
    })?;
    ensure_eq("version", entry["version"].as_u64(), Some(4))?;

    // 2. Decode (and peek, to see the raw payload_type the payload came from).
    let env = envelope::decode(&bytes).map_err(|e| format!("decode failed: {e}"))?;
    let peeked = envelope::peek(&bytes).map_err(|e| format!("peek failed: {e}"))?;

    // 3. Field by field.
    let ty = str_field(entry, "type")?;
    ensure_eq("type", env.msg_type.as_str(), ty)?;
    ensure_eq(
        "producer_name",
        env.producer_name.as_str(),
        str_field(entry, "producer_name")?,
    )?;
    ensure_eq(
        "flow_id",
        env.flow_id.as_str(),
        str_field(entry, "flow_id")?,
    )?;
    ensure_eq("run_id", env.run_id.as_str(), str_field(entry, "run_id")?)?;
    ensure_eq(
        "trace_id",
        env.trace_id.as_str(),
        str_field(entry, "trace_id")?,
    )?;
    ensure_eq(
        "replica_id",
        Some(u64::from(env.replica_id)),
        entry["replica_id"].as_u64(),
    )?;
    ensure_eq("seq", Some(env.seq), entry["seq"].as_u64())?;
    match &entry["event_ts"] {
        Json::Null => ensure_eq("event_ts", env.event_ts, None)?,
        ts => {
            let want = ts.as_f64().ok_or("event_ts is not a number")?;
            ensure_eq(
                "event_ts bits",
                env.event_ts.map(f64::to_bits),
                Some(want.to_bits()),
            )?;
        }
    }
    let want_meta = support::typed(&entry["metadata"]);
    let got_meta = Value::Map(env.metadata.clone());
    ensure(support::same(&got_meta, &want_meta), || {
        format!("metadata: got {got_meta:?}, want {want_meta:?}")
    })?;
    check_payload(&entry["payload"], &env, &peeked)?;
    ensure_eq("is_stop_signal", env.is_stop_signal(), ty != "data")?;
    ensure_eq("is_abort", env.is_abort(), ty == "abort")?;
    check_error(entry.get("error"), env.error.as_ref())?;

    // 4. Message id from the decoded fields.
    if let Some(want) = entry.get("msg_id") {
        let kind = match env.msg_type {
            MsgType::Data => MsgKind::Data,
            MsgType::Eos => MsgKind::Eos,
            MsgType::Abort => MsgKind::Abort,
        };
        let got = msgid(
            &env.flow_id,
            &env.run_id,
            &env.producer_name,
            &env.trace_id,
            env.seq,
            kind,
        );
        ensure_eq("msg_id", Some(got.as_str()), want.as_str())?;
        ensure_eq("Envelope::msg_id", env.msg_id(), got)?;
    }
    Ok(())
}

fn check_payload(desc: &Json, env: &Envelope, peeked: &envelope::Peeked) -> Check {
    if desc.get("none").is_some() {
        ensure_eq("payload", &env.payload, &Payload::None)?;
        ensure_eq("payload_type on the wire", peeked.payload_type.as_str(), "")?;
        return ensure_eq("payload bytes on the wire", peeked.payload.len(), 0);
    }
    if let Some(t) = desc.get("tensor") {
        ensure_eq("payload_type", peeked.payload_type.as_str(), TENSOR_TYPE)?;
        let want = support::tensor(t);
        let Payload::Tensor(got) = &env.payload else {
            return Err(format!("payload is not a tensor: {:?}", env.payload).into());
        };
        ensure_eq("tensor dtype", &got.dtype, &want.dtype)?;
        ensure_eq("tensor shape", &got.shape, &want.shape)?;
        return ensure_eq("tensor data", &got.data, &want.data);
    }
    if let Some(v) = desc.get("value") {
        ensure_eq("payload_type", peeked.payload_type.as_str(), VALUE_TYPE)?;
        let want = support::typed(v);
        let Payload::Value(got) = &env.payload else {
            return Err(format!("payload is not a value: {:?}", env.payload).into());
        };
        return ensure(support::same(got, &want), || {
            format!("payload value: got {got:?}, want {want:?}")
        });
    }
    Err(format!("unknown payload descriptor {desc}").into())
}

/// README: `code`/`message` always present; other keys present exactly when listed.
fn check_error(want: Option<&Json>, got: Option<&WireError>) -> Check {
    let (want, got) = match (want, got) {
        (None, None) => return Ok(()),
        (Some(w), Some(g)) => (w, g),
        (w, g) => return Err(format!("error record: got {g:?}, want {w:?}").into()),
    };
    let opt_str = |key: &str| want.get(key).and_then(Json::as_str);
    ensure_eq("error.code", Some(got.code.as_str()), opt_str("code"))?;
    ensure_eq(
        "error.message",
        Some(got.message.as_str()),
        opt_str("message"),
    )?;
    ensure_eq("error.remedy", got.remedy.as_deref(), opt_str("remedy"))?;
    let want_disposition = match opt_str("disposition") {
        Some(d) => Some(Disposition::parse(d).ok_or_else(|| format!("bad disposition {d}"))?),
        None => None,
    };
    ensure_eq("error.disposition", got.disposition, want_disposition)?;
    ensure_eq("error.node", got.node.as_deref(), opt_str("node"))?;
    ensure_eq(
        "error.trace_id",
        got.trace_id.as_deref(),
        opt_str("trace_id"),
    )?;
    ensure_eq(
        "error.num_delivered",
        got.num_delivered.map(u64::from),
        want.get("num_delivered").and_then(Json::as_u64),
    )?;
    let want_context: BTreeMap<String, String> = match want.get("context") {
        None => BTreeMap::new(),
        Some(c) => c
            .as_object()
            .ok_or("error.context is not an object")?
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.clone(), s.to_owned()))
                    .ok_or_else(|| format!("context value {k} is not a string"))
            })
            .collect::<Result<_, _>>()?,
    };
    ensure_eq("error.context", &got.context, &want_context)
}

/// README "reject/": refusal with a needle, or opaque passthrough.
fn check_reject(entry: &Json) -> Check {
    let file = str_field(entry, "file")?;
    let bytes = support::read_bytes(&format!("reject/{file}"));
    let expect = &entry["expect"];
    if let Some(reject) = expect.get("reject") {
        let needle = str_field(reject, "message_contains")?;
        let err = match envelope::decode(&bytes) {
            Ok(env) => return Err(format!("decoded, but must be refused: {env:?}").into()),
            Err(e) => e,
        };
        ensure(err.to_string().contains(needle), || {
            format!("error {err:?} does not contain {needle:?}")
        })?;
        return ensure_eq("code", err.code(), "VF_POISON_DECODE");
    }
    if let Some(opaque) = expect.get("opaque") {
        let want_type = str_field(opaque, "payload_type")?;
        let want_data = support::b64(str_field(opaque, "data_b64")?);
        let env = envelope::decode(&bytes).map_err(|e| format!("decode failed: {e}"))?;
        let want = Payload::Opaque {
            payload_type: want_type.to_owned(),
            data: want_data.clone(),
        };
        ensure_eq("payload", &env.payload, &want)?;
        // Re-encoding reproduces the same type and bytes, at both levels.
        let (ty, data) =
            envelope::encode_payload(&env.payload).map_err(|e| format!("encode_payload: {e}"))?;
        ensure_eq("re-encoded payload_type", ty.as_str(), want_type)?;
        ensure_eq("re-encoded payload", &data, &want_data)?;
        let again = envelope::encode(&env).map_err(|e| format!("encode: {e}"))?;
        let peeked = envelope::peek(&again).map_err(|e| format!("peek: {e}"))?;
        ensure_eq(
            "republished payload_type",
            peeked.payload_type.as_str(),
            want_type,
        )?;
        return ensure_eq("republished payload", &peeked.payload[..], &want_data[..]);
    }
    Err(format!("unknown expectation {expect}").into())
}

fn abort_values() -> Envelope {
    let mut error = WireError::new("VF_DEVICE", "CUDA out of memory on device 0");
    error.remedy = Some("Lower the batch size, or grant the node more VRAM.".to_owned());
    error.disposition = Some(Disposition::WorkerFatal);
    error.node = Some("detector".to_owned());
    error.trace_id = Some("cam:41".to_owned());
    error.num_delivered = Some(2);
    error.context.insert("replica".to_owned(), "2".to_owned());
    Envelope {
        producer_name: "detector".to_owned(),
        flow_id: "flow-A".to_owned(),
        run_id: "run-1".to_owned(),
        trace_id: "abort-r2".to_owned(),
        seq: 11,
        msg_type: MsgType::Abort,
        replica_id: 2,
        error: Some(error),
        ..Envelope::default()
    }
}

fn abort_minimal_values() -> Envelope {
    Envelope {
        producer_name: "cam".to_owned(),
        flow_id: "flow-A".to_owned(),
        run_id: "run-1".to_owned(),
        trace_id: "abort-r0".to_owned(),
        seq: 0,
        msg_type: MsgType::Abort,
        replica_id: 0,
        error: Some(WireError::new("VF_UNKNOWN", "producer died")),
        ..Envelope::default()
    }
}

fn eos_values() -> Envelope {
    Envelope {
        producer_name: "cam".to_owned(),
        flow_id: "flow-A".to_owned(),
        run_id: "run-1".to_owned(),
        trace_id: "eos-r0".to_owned(),
        seq: 9,
        msg_type: MsgType::Eos,
        ..Envelope::default()
    }
}

/// The shipped file equals the §4.4 hex, and encoding the §4.5 values reproduces it.
fn check_worked_bytes(file: &str, hex: &str, len: usize, values: Envelope) -> Check {
    let want = hex_bytes(hex)?;
    ensure_eq("§4.4 length", want.len(), len)?;
    let shipped = support::read_bytes(&format!("envelope/{file}"));
    ensure_eq(
        "shipped bytes vs §4.4",
        hex::encode(&shipped),
        hex.to_owned(),
    )?;
    let encoded = envelope::encode(&values).map_err(|e| format!("encode: {e}"))?;
    ensure_eq(
        "encoded bytes vs §4.4",
        hex::encode(&encoded),
        hex.to_owned(),
    )
}

/// ABORT-1 on the encode side: lengthening the cut fields of the decoded `abort_truncated`
/// record and encoding it again must cut them back to exactly the vector's values; encoding
/// the decoded record as is (a relay, ABORT-5) must not change it.
fn check_truncation_reencodes() -> Check {
    let bytes = support::read_bytes("envelope/abort_truncated.bin");
    let decoded = envelope::decode(&bytes).map_err(|e| format!("decode: {e}"))?;
    let original = decoded
        .error
        .clone()
        .ok_or("abort_truncated has no error")?;
    ensure_eq(
        "message length in code points",
        original.message.chars().count(),
        envelope::MAX_ERROR_TEXT_CHARS,
    )?;
    let mut longer = original.clone();
    longer.message.push_str(&"é".repeat(100));
    longer.remedy = longer.remedy.map(|r| r + "RRRR");
    for v in longer.context.values_mut() {
        if v.chars().count() == envelope::MAX_ERROR_TEXT_CHARS {
            v.push_str("üü");
        }
    }
    for error in [longer, original.clone()] {
        let env = Envelope {
            error: Some(error),
            ..decoded.clone()
        };
        let again = envelope::encode(&env)
            .and_then(|b| envelope::decode(&b))
            .map_err(|e| format!("round trip: {e}"))?;
        ensure_eq("re-encoded error", again.error.as_ref(), Some(&original))?;
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = Vec::new();

    for (folder, check) in [
        ("envelope", check_envelope as fn(&Json) -> Check),
        ("reject", check_reject),
    ] {
        let rel = format!("{folder}/manifest.json");
        let entries = manifest(&rel);
        let count = entries.as_ref().map(Vec::len).unwrap_or(0);
        // A moved or emptied folder must not turn into a green run with zero vectors.
        trials.push(Trial::test(
            format!("{folder}::manifest_not_empty"),
            move || ensure(count > 0, || format!("{rel} has no entries")),
        ));
        for entry in entries.unwrap_or_default() {
            let name = entry["name"].as_str().unwrap_or("<unnamed>").to_owned();
            trials.push(Trial::test(format!("{folder}::{name}"), move || {
                check(&entry)
            }));
        }
    }

    trials.push(Trial::test("spec::abort_worked_bytes", || {
        check_worked_bytes("abort.bin", ABORT_HEX, 177, abort_values())
    }));
    trials.push(Trial::test("spec::abort_minimal_worked_bytes", || {
        check_worked_bytes(
            "abort_minimal.bin",
            ABORT_MINIMAL_HEX,
            63,
            abort_minimal_values(),
        )
    }));
    trials.push(Trial::test("spec::eos_worked_bytes", || {
        check_worked_bytes("eos.bin", EOS_HEX, 34, eos_values())
    }));

    trials.push(Trial::test(
        "spec::abort_truncated_reencodes",
        check_truncation_reencodes,
    ));

    libtest_mimic::run(&args, trials).exit();
}
