#![no_main]
//! See `ironbus_fuzz::rest_properties`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ironbus_fuzz::rest_properties(data));
