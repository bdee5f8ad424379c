//! `cargo xtask ci`: the checks CI runs, in order, stopping at the first failure.

use anyhow::Result;

/// Each step: a name for messages, and the `cargo` arguments.
const STEPS: &[(&str, &[&str])] = &[
    ("fmt", &["fmt", "--all", "--", "--check"]),
    (
        "clippy",
        &["clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"],
    ),
    ("doc", &["doc", "--workspace", "--no-deps", "--all-features"]),
    ("test", TEST_ARGS),
];

/// The test step's `cargo` arguments; with `--no-run`, the dev-profile builds of the servers the
/// SDK suites and the crash tests run (`IRONBUS_XTASK_PROFILE=dev`) are these same binaries.
pub(crate) const TEST_ARGS: &[&str] = &["test", "--workspace", "--all-features"];

pub(crate) fn run(args: &[String]) -> Result<()> {
    crate::no_arguments("ci", args)?;
    crate::native::ensure()?;
    crate::native::ensure_postgres()?;
    for (index, (name, cargo_args)) in STEPS.iter().enumerate() {
        let step = format!("ci step {}/{} `{name}`", index + 1, STEPS.len());
        eprintln!("xtask: {step}");
        crate::run_cargo(&step, cargo_args)?;
    }
    eprintln!("xtask: ci passed ({} steps)", STEPS.len());
    Ok(())
}
