//! Raw envelope bytes through every decoder path (WIRE-3), seeded from the golden vectors.
#![no_main]

use libfuzzer_sys::fuzz_target;
// The allocation guard (`videoflow_fuzz::Guarded`) is this binary's global allocator.
use videoflow_fuzz as _;

fuzz_target!(|data: &[u8]| videoflow_core::fuzz::envelope(data));
