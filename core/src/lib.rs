//! ironbus-core: the broker engine.
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
