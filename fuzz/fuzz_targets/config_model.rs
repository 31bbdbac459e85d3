//! Process environments drawn from the variables the worker really reads, with values of the
//! shapes those variables take (numbers, seconds, JSON, URLs with a planted password, lists)
//! and now and then anything: a raw byte string rarely names one variable, let alone five.
#![no_main]

use libfuzzer_sys::fuzz_target;
use videoflow_fuzz::{EnvModel, emit};

fuzz_target!(|model: EnvModel| {
    let environ = model.to_environ();
    emit(&environ);
    videoflow_worker::fuzz::config(&environ);
});
