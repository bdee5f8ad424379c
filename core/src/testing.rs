//! Test support for store implementations (feature `testing`).
