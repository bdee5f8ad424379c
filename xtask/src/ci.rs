//! `cargo xtask ci`: the checks CI runs, in order, stopping at the first failure.
//!
//! Clippy and rustdoc only check: nothing they build is linked, so they are told that RocksDB
//! is a prebuilt library (`ROCKSDB_LIB_DIR`, an empty directory) and `librocksdb-sys` skips
//! compiling its C++, which each of them would otherwise compile once more than the tests do
//! (cargo hashes their build scripts apart from the tests').

use anyhow::{Context, Result};

/// Each step: a name for messages, the `cargo` arguments, and whether it only checks.
const STEPS: &[(&str, &[&str], bool)] = &[
    ("fmt", &["fmt", "--all", "--", "--check"], true),
    (
        "clippy",
        &["clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"],
        true,
    ),
    ("doc", &["doc", "--workspace", "--no-deps", "--all-features"], true),
    ("test", TEST_ARGS, false),
];

/// The test step's `cargo` arguments; with `--no-run`, the dev-profile builds of the servers the
/// SDK suites and the crash tests run (`IRONBUS_XTASK_PROFILE=dev`) are these same binaries.
pub(crate) const TEST_ARGS: &[&str] = &["test", "--workspace", "--all-features"];

pub(crate) fn run(args: &[String]) -> Result<()> {
    crate::no_arguments("ci", args)?;
    crate::native::ensure()?;
    crate::native::ensure_postgres()?;
    let unlinked = crate::workspace_root().join("target").join("no-rocksdb-lib");
    std::fs::create_dir_all(&unlinked)
        .with_context(|| format!("creating {}", unlinked.display()))?;
    for (index, (name, cargo_args, check_only)) in STEPS.iter().enumerate() {
        let step = format!("ci step {}/{} `{name}`", index + 1, STEPS.len());
        eprintln!("xtask: {step}");
        let mut cargo = crate::cargo();
        cargo.args(*cargo_args);
        let mut shown = format!("cargo {}", cargo_args.join(" "));
        if *check_only {
            cargo.env("ROCKSDB_LIB_DIR", &unlinked);
            shown = format!("ROCKSDB_LIB_DIR={} {shown}", unlinked.display());
        }
        crate::run_shown(&step, &shown, &mut cargo)?;
    }
    eprintln!("xtask: ci passed ({} steps)", STEPS.len());
    Ok(())
}
