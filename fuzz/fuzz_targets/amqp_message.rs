#![no_main]
//! See `ironbus_fuzz::amqp_message`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ironbus_fuzz::amqp_message(data));
