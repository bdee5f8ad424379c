#![no_main]
//! See `ironbus_fuzz::sas_token`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ironbus_fuzz::sas_token(data));
