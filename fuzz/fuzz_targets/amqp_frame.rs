#![no_main]
//! See `ironbus_fuzz::amqp_frame`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ironbus_fuzz::amqp_frame(data));
