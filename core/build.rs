//! Compiles the wire schema (`proto/videoflow/v1/*.proto`) into Rust types at build time.
//!
//! Why protox: it is a pure-Rust protobuf compiler, so building this crate never needs a
//! system `protoc` (issue #2). prost-build then turns the descriptors into prost structs.
//! Maps are generated as `BTreeMap` so encoding is deterministic (sorted keys) and decoded
//! maps iterate in a canonical order.

use std::error::Error;

/// The schema files, relative to the `proto` include root (their import paths).
const PROTOS: [&str; 4] = [
    "videoflow/v1/payloads.proto",
    "videoflow/v1/value.proto",
    "videoflow/v1/error.proto",
    "videoflow/v1/envelope.proto",
];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    for proto in PROTOS {
        println!("cargo:rerun-if-changed=proto/{proto}");
    }
    let fds = protox::compile(PROTOS, ["proto"])?;
    prost_build::Config::new()
        .btree_map(["."])
        .compile_fds(fds)?;
    Ok(())
}
