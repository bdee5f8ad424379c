//! ironbus-store-memory.
