//! Flows generated from a model of the schema (real field names, builtin classes and their
//! parameters, node names that refer to each other, now and then a wrong type or an unknown
//! field), written as YAML: raw text rarely gets past the parser into validation and
//! compilation; these do.
#![no_main]

use libfuzzer_sys::fuzz_target;
use videoflow_fuzz::{FlowModel, emit};

fuzz_target!(|model: FlowModel| {
    let text = model.to_yaml();
    emit(text.as_bytes());
    videoflow_worker::fuzz::flow(&text);
});
