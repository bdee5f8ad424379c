#![no_main]
//! See `ironbus_fuzz::amqp_request`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ironbus_fuzz::amqp_request(data));
