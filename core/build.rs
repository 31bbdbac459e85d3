//! Compiles the wire schema (`proto/videoflow/v1/*.proto`) and the component protocol
//! (`proto/videoflow/component/v1/component.proto`) into Rust types at build time, and writes
//! the component protocol's descriptor set (`component_v1.binpb` in `OUT_DIR`) that SDKs
//! build their message classes from at run time (see `videoflow_core::component`).
//!
//! Why protox: it is a pure-Rust protobuf compiler, so building this crate never needs a
//! system `protoc`. prost-build then turns the descriptors into prost structs.
//! Maps are generated as `BTreeMap` so encoding is deterministic (sorted keys) and decoded
//! maps iterate in a canonical order.

use std::error::Error;

/// The schema files, relative to the `proto` include root (their import paths).
const PROTOS: [&str; 5] = [
    "videoflow/v1/payloads.proto",
    "videoflow/v1/value.proto",
    "videoflow/v1/error.proto",
    "videoflow/v1/envelope.proto",
    "videoflow/component/v1/component.proto",
];

/// What a component SDK needs: the protocol and the payload schemas it carries.
const COMPONENT_SET: [&str; 3] = [
    "videoflow/v1/payloads.proto",
    "videoflow/v1/value.proto",
    "videoflow/component/v1/component.proto",
];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    for proto in PROTOS {
        println!("cargo:rerun-if-changed=proto/{proto}");
    }
    let fds = protox::compile(PROTOS, ["proto"])?;
    // Dependencies first (payloads, value, component), no source info: small and stable.
    let mut set = fds.clone();
    set.file.retain(|f| COMPONENT_SET.contains(&f.name()));
    set.file
        .sort_by_key(|f| COMPONENT_SET.iter().position(|n| *n == f.name()));
    for f in &mut set.file {
        f.source_code_info = None;
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("component_v1.binpb"),
        prost::Message::encode_to_vec(&set),
    )?;
    // Tensor data as `bytes::Bytes`: a Frame / Detections / Tracks payload decoded from a
    // `Bytes` buffer slices its pixels instead of copying them.
    prost_build::Config::new()
        .btree_map(["."])
        .bytes([".videoflow.v1.Tensor.data"])
        .compile_fds(fds)?;
    Ok(())
}
