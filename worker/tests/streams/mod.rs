//! Reading what a flow left on the broker, for end-to-end tests: every message of a stream
//! (data, terminators, dead letters) with its subject, headers and raw bytes.

#![allow(dead_code)]

use std::collections::BTreeMap;

use bytes::Bytes;
use videoflow_worker::broker;

/// One stored message.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Its stream sequence.
    pub seq: u64,
    /// Its subject.
    pub subject: String,
    /// Its headers (first value of each).
    pub headers: BTreeMap<String, String>,
    /// Its raw payload.
    pub payload: Bytes,
}

/// The run identity a node's environment carries: (`VF_FLOW_ID`, `VF_RUN_ID`).
pub fn ids(vars: &BTreeMap<String, String>) -> (String, String) {
    (
        vars.get("VF_FLOW_ID").cloned().expect("VF_FLOW_ID"),
        vars.get("VF_RUN_ID").cloned().expect("VF_RUN_ID"),
    )
}

/// Every message of stream `name`, in stream order (empty if the stream does not exist).
pub async fn read_stream(url: &str, name: &str) -> Vec<Stored> {
    let b = broker::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let Ok(mut stream) = b.jetstream().get_stream(name).await else {
        return Vec::new();
    };
    let state = stream.info().await.expect("stream info").state.clone();
    let mut out = Vec::new();
    if state.messages == 0 {
        return out;
    }
    for seq in state.first_sequence..=state.last_sequence {
        let Ok(m) = stream.get_raw_message(seq).await else {
            continue; // deleted
        };
        out.push(Stored {
            seq,
            subject: m.subject.to_string(),
            headers: m
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        v.first().map(|v| v.as_str().to_owned()).unwrap_or_default(),
                    )
                })
                .collect(),
            payload: m.payload,
        });
    }
    out
}

/// Adds a durable pull consumer `witness` on stream `name` that never fetches: under interest
/// retention (BATCH node streams) it keeps every message stored after the flow's own consumers
/// acked or TERMed it, so a test can read the originals back with [`read_stream`].
pub async fn add_witness(url: &str, name: &str) {
    use async_nats::jetstream::consumer::pull;
    let b = broker::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let stream = b.jetstream().get_stream(name).await.expect("stream");
    stream
        .create_consumer(pull::Config {
            durable_name: Some("witness".into()),
            ..pull::Config::default()
        })
        .await
        .expect("witness consumer");
}
