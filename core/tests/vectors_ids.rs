//! Golden message-id, join and partition vectors, replayed exactly as
//! `shared/vectors/README.md` prescribes. Every vector case is its own named test
//! (`message_id::01_data_cam`, `join::case_1`, `partition::str_cam1`), so a failure names the
//! case and `cargo test -- partition::` runs one family.

mod support;

use std::collections::BTreeMap;

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value as J;
use support::{read_json, same, typed};
use videoflow_core::join::identity::{
    SyncMember, round_half_even_micros, time_group_hash_input, time_group_trace_id,
};
use videoflow_core::msgid::{MsgKind, msgid, sha256hex};
use videoflow_core::partition::{
    KeyPolicy, Owner, is_valid_key, owner, partition_hash, partition_key, py_str,
};
use videoflow_core::value::Value;

/// The fallback policy the partition vectors were generated with (`fallback_partition: 5`).
const VECTOR_FALLBACK: KeyPolicy = KeyPolicy::Fallback { partition: 5 };

fn main() {
    let args = Arguments::from_args();
    let mut trials = Vec::new();
    trials.extend(family(
        "message_id",
        "message_id/vectors.json",
        |i, case| {
            let kind = case["msg_type"].as_str().unwrap_or("?");
            let producer = case["producer_name"].as_str().unwrap_or("?");
            format!("{:02}_{kind}_{}", i + 1, ascii_name(producer))
        },
        message_id_case,
    ));
    trials.extend(family(
        "join",
        "join/group_identity.json",
        |i, _| format!("case_{}", i + 1),
        join_case,
    ));
    trials.extend(family(
        "partition",
        "partition/owners.json",
        |i, case| {
            case["name"]
                .as_str()
                .map_or_else(|| format!("case_{}", i + 1), str::to_owned)
        },
        partition_case,
    ));
    libtest_mimic::run(&args, trials).exit();
}

/// One trial per case of a vector file, plus `<family>::nonempty` so an empty or missing
/// array fails loudly instead of yielding zero tests.
fn family(
    prefix: &str,
    file: &str,
    name: impl Fn(usize, &J) -> String,
    check: fn(&J) -> Result<(), Failed>,
) -> Vec<Trial> {
    let cases = read_json(file).as_array().cloned().unwrap_or_default();
    let count = cases.len();
    let file_name = file.to_owned();
    let mut trials = vec![Trial::test(format!("{prefix}::nonempty"), move || {
        ensure(count > 0, || format!("{file_name} holds no cases"))
    })];
    for (i, case) in cases.into_iter().enumerate() {
        let title = format!("{prefix}::{}", name(i, &case));
        trials.push(Trial::test(title, move || check(&case)));
    }
    trials
}

/// README "message_id/": the first 32 hex of sha256 of the colon-joined fields.
fn message_id_case(case: &J) -> Result<(), Failed> {
    let kind = match field_str(case, "msg_type")? {
        "data" => MsgKind::Data,
        "eos" => MsgKind::Eos,
        "abort" => MsgKind::Abort,
        other => return Err(format!("unknown msg_type {other:?}").into()),
    };
    let seq = case["seq"].as_u64().ok_or("seq is not a u64")?;
    let got = msgid(
        field_str(case, "flow_id")?,
        field_str(case, "run_id")?,
        field_str(case, "producer_name")?,
        field_str(case, "trace_id")?,
        seq,
        kind,
    );
    ensure(got.len() == 32, || {
        format!("id {got:?} is not 32 characters")
    })?;
    expect_eq("expected_id", got.as_str(), field_str(case, "expected_id")?)
}

/// README "join/": rounded micros, hash input and trace id, each checked.
fn join_case(case: &J) -> Result<(), Failed> {
    let ts = case["group_ts"]
        .as_f64()
        .ok_or("group_ts is not a number")?;
    let want_micros = case["rounded_micros"].as_i64().ok_or("rounded_micros")?;
    let micros = round_half_even_micros(ts).ok_or("group_ts has no integer micros")?;
    expect_eq("rounded_micros", &micros, &want_micros)?;

    let members_json = case["members"]
        .as_object()
        .ok_or("members is not an object")?;
    let mut members = Vec::new();
    for (parent, m) in members_json {
        members.push(SyncMember {
            parent,
            producer_name: field_str(m, "producer_name")?,
            trace_id: field_str(m, "trace_id")?,
            seq: m["seq"].as_u64().ok_or("member seq is not a u64")?,
        });
    }
    // Present the members in reverse so the test proves the function sorts them itself.
    members.reverse();
    let window_id = case["window_id"].as_str();
    let input = time_group_hash_input(window_id, &members);
    expect_eq("hash_input", input.as_str(), field_str(case, "hash_input")?)?;
    let trace_id = time_group_trace_id(micros, window_id, &members);
    expect_eq(
        "expected_trace_id",
        trace_id.as_str(),
        field_str(case, "expected_trace_id")?,
    )
}

/// README "partition/": key extraction, validity, `py_str`, hash, and the owner decision
/// under both policies for every `nb_tasks` listed.
fn partition_case(case: &J) -> Result<(), Failed> {
    let partition_by = field_str(case, "partition_by")?;
    let raw_key = (!case["key"].is_null()).then(|| typed(&case["key"]));

    // Deliver the key where PART-2 looks for it: the trace id, or metadata[partition_by].
    let mut metadata = BTreeMap::new();
    let mut trace_id = String::new();
    match (&raw_key, partition_by) {
        (Some(Value::String(s)), "trace_id") => trace_id.clone_from(s),
        (Some(k), "trace_id") => return Err(format!("trace-id key must be a string: {k:?}").into()),
        (Some(k), by) => {
            metadata.insert(by.to_owned(), k.clone());
        }
        (None, _) => {}
    }
    let key = partition_key(partition_by, &trace_id, Some(&metadata));
    let key = key.as_deref();
    let same_key = match (key, raw_key.as_ref()) {
        (Some(a), Some(b)) => same(a, b),
        (a, b) => a.is_none() && b.is_none(),
    };
    ensure(same_key, || {
        format!("extracted {key:?}, expected {raw_key:?}")
    })?;

    let valid = case["valid"].as_bool().ok_or("valid is not a bool")?;
    expect_eq("valid", &key.is_some_and(is_valid_key), &valid)?;

    // py_str and the hash: decisive for valid keys, and exact for the informational rows too.
    let text = key.map_or_else(|| "None".to_owned(), py_str);
    expect_eq("py_str", text.as_str(), field_str(case, "py_str")?)?;
    expect_eq(
        "sha256_prefix",
        &sha256hex(&text)[..8],
        field_str(case, "sha256_prefix")?,
    )?;
    let h = partition_hash(&text);
    expect_eq(
        "h",
        &u64::from(h),
        &case["h"].as_u64().ok_or("h is not a number")?,
    )?;

    for (n, want) in per_nb_tasks(case, "hash_owner")? {
        expect_eq(&format!("hash_owner[{n}]"), &(h % n), &want)?;
    }
    for (field, policy) in [
        ("owner", KeyPolicy::Reject),
        ("fallback_owner", VECTOR_FALLBACK),
    ] {
        for (n, want) in per_nb_tasks(case, field)? {
            let got = owner(key, n, policy);
            let expected = Owner {
                replica: want,
                invalid_key: !valid,
            };
            expect_eq(&format!("{field}[{n}]"), &got, &expected)?;
        }
    }
    Ok(())
}

/// `{"2": 0, "3": 2, …}` as `(nb_tasks, replica)` pairs; an empty object is an error.
fn per_nb_tasks(case: &J, field: &str) -> Result<Vec<(u32, u32)>, Failed> {
    let obj = case[field]
        .as_object()
        .ok_or_else(|| format!("{field} is not an object"))?;
    let mut out = Vec::new();
    for (n, replica) in obj {
        let n: u32 = n.parse().map_err(|e| format!("{field} key {n:?}: {e}"))?;
        let replica = replica.as_u64().and_then(|r| u32::try_from(r).ok());
        out.push((
            n,
            replica.ok_or_else(|| format!("{field}[{n}] is not a replica id"))?,
        ));
    }
    ensure(!out.is_empty(), || format!("{field} lists no nb_tasks"))?;
    Ok(out)
}

fn field_str<'a>(case: &'a J, key: &str) -> Result<&'a str, Failed> {
    case[key]
        .as_str()
        .ok_or_else(|| format!("{key} is not a string").into())
}

fn expect_eq<T: PartialEq + std::fmt::Debug + ?Sized>(
    what: &str,
    got: &T,
    want: &T,
) -> Result<(), Failed> {
    ensure(got == want, || {
        format!("{what}: got {got:?}, want {want:?}")
    })
}

fn ensure(ok: bool, msg: impl FnOnce() -> String) -> Result<(), Failed> {
    if ok { Ok(()) } else { Err(msg().into()) }
}

/// A test-name-friendly rendering of an id (`caméra-Ω` → `cam_ra-_`, the empty id → `empty`).
fn ascii_name(s: &str) -> String {
    if s.is_empty() {
        return "empty".to_owned();
    }
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
