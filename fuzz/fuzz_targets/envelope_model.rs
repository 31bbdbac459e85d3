//! Envelopes generated from a model (every message type, nested values and tensors,
//! consistent or not, every payload kind, error records): the native encoder against the
//! generated types, then the bytes through every decoder path.
#![no_main]

use libfuzzer_sys::fuzz_target;
use videoflow_fuzz::{EnvelopeModel, emit};

fuzz_target!(|model: EnvelopeModel| {
    let env = model.to_envelope();
    if let Ok(bytes) = videoflow_core::envelope::encode(&env) {
        emit(&bytes);
    }
    videoflow_core::fuzz::envelope_model(&env);
});
