#![no_main]
//! See `ironbus_fuzz::atom_description`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ironbus_fuzz::atom_description(data));
