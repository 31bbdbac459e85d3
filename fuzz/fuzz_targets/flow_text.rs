//! A Flow file's raw text through the loader, validator, compiler, environment renderer and
//! the worker's and provision job's readings of what compiles; seeded from config/samples.
#![no_main]

use libfuzzer_sys::fuzz_target;
// The allocation guard (`videoflow_fuzz::Guarded`) is this binary's global allocator.
use videoflow_fuzz as _;

fuzz_target!(|data: &[u8]| {
    // A Flow file is text: the runner and `validate` read it as UTF-8 first.
    if let Ok(text) = std::str::from_utf8(data) {
        videoflow_worker::fuzz::flow(text);
    }
});
