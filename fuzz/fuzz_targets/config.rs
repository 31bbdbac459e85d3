//! A raw process environment (NUL-separated KEY=VALUE) through every VF_* parser.
#![no_main]

use libfuzzer_sys::fuzz_target;
// The allocation guard (`videoflow_fuzz::Guarded`) is this binary's global allocator.
use videoflow_fuzz as _;

fuzz_target!(|data: &[u8]| videoflow_worker::fuzz::config(data));
