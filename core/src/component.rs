//! The component protocol (design §5 "exec"): what an exec node's program and
//! `videoflow-worker` exchange over `VF_COMPONENT_SOCKET`.
//!
//! The schema is `core/proto/videoflow/component/v1/component.proto` (its header documents
//! the conversation and the framing); [`proto`] holds the prost types. This module adds the
//! conversions between the worker's native values and the protocol's: payloads stay
//! `(payload_type, bytes)` exactly as on the envelope wire, metadata and partition keys are
//! `videoflow.v1.Value`s.
//!
//! [`DESCRIPTOR_SET`] is the encoded `FileDescriptorSet` of the protocol and the payload
//! schemas it carries (payloads, value, component — dependencies first). SDKs build their
//! message classes from it at run time, so no SDK needs `protoc` or generated code; the Python
//! SDK ships a copy (`sdk/python/videoflow_sdk/component_v1.binpb`) that a worker test keeps
//! identical to this one.

use std::collections::BTreeMap;

use crate::envelope::proto as wire;
use crate::envelope::value_codec::{value_from_proto, value_to_proto};
use crate::envelope::{EnvelopeError, TensorError};
use crate::value::Value;

/// The prost-generated types of `videoflow.component.v1`.
pub mod proto {
    pub use self::videoflow::component::v1::*;

    /// The package tree prost's generated paths expect (`super::super::v1::Value`).
    #[allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]
    mod videoflow {
        pub mod v1 {
            pub use crate::envelope::proto::*;
        }
        pub mod component {
            pub mod v1 {
                include!(concat!(env!("OUT_DIR"), "/videoflow.component.v1.rs"));
            }
        }
    }
}

/// The protocol versions this build speaks, highest last.
pub const PROTOCOL_VERSIONS: &[u32] = &[1];

/// The encoded `FileDescriptorSet` of `videoflow/v1/payloads.proto`, `videoflow/v1/value.proto`
/// and `videoflow/component/v1/component.proto`, without source info.
pub const DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/component_v1.binpb"));

/// The highest version both sides speak; `None` when they share none.
pub fn negotiate(offered: &[u32]) -> Option<u32> {
    PROTOCOL_VERSIONS
        .iter()
        .rev()
        .find(|v| offered.contains(v))
        .copied()
}

/// A metadata value or partition key as a `videoflow.v1.Value` (tensors refused, as in
/// envelope metadata).
pub fn value_to_wire(v: &Value) -> Result<wire::Value, EnvelopeError> {
    value_to_proto(v, false).map_err(|e| e.in_metadata("partition_key"))
}

/// A `videoflow.v1.Value` from a component as a native value.
pub fn value_from_wire(v: wire::Value) -> Result<Value, TensorError> {
    value_from_proto(v)
}

/// A metadata map as the protocol's map (values that cannot be encoded become null: metadata
/// the worker already decoded from the wire always encodes).
pub fn metadata_to_wire(m: &BTreeMap<String, Value>) -> BTreeMap<String, wire::Value> {
    m.iter()
        .map(|(k, v)| {
            let w = value_to_proto(v, true).unwrap_or(wire::Value { kind: None });
            (k.clone(), w)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    #[test]
    fn negotiation_picks_the_highest_common_version() {
        assert_eq!(negotiate(&[1]), Some(1));
        assert_eq!(negotiate(&[1, 2, 7]), Some(1));
        assert_eq!(negotiate(&[2]), None);
        assert_eq!(negotiate(&[]), None);
    }

    #[test]
    fn descriptor_set_holds_the_protocol_and_its_dependencies_in_order() {
        let set = prost_types_free_names(DESCRIPTOR_SET);
        assert_eq!(
            set,
            [
                "videoflow/v1/payloads.proto",
                "videoflow/v1/value.proto",
                "videoflow/component/v1/component.proto"
            ]
        );
    }

    /// File names of an encoded FileDescriptorSet, read with a hand-written message so the
    /// test needs no prost-types dependency (field 1: repeated FileDescriptorProto; its
    /// field 1: name).
    fn prost_types_free_names(bytes: &[u8]) -> Vec<String> {
        #[derive(Clone, PartialEq, prost::Message)]
        struct File {
            #[prost(string, tag = "1")]
            name: String,
        }
        #[derive(Clone, PartialEq, prost::Message)]
        struct Set {
            #[prost(message, repeated, tag = "1")]
            file: Vec<File>,
        }
        Set::decode(bytes)
            .expect("descriptor set decodes")
            .file
            .into_iter()
            .map(|f| f.name)
            .collect()
    }

    #[test]
    fn values_round_trip_and_metadata_refuses_nothing_it_got() {
        let v = Value::from("cam-1");
        let w = value_to_wire(&v).expect("encodes");
        assert_eq!(value_from_wire(w).expect("decodes"), v);
        let mut m = BTreeMap::new();
        m.insert("k".to_owned(), Value::Int(3));
        let w = metadata_to_wire(&m);
        assert_eq!(
            value_from_wire(w["k"].clone()).expect("decodes"),
            Value::Int(3)
        );
        let _ = proto::WorkerMessage::default().encode_to_vec();
    }
}
