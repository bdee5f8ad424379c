//! `cargo xtask compat console [-- ARGS]`: the web console's browser tests
//! (`compat/console/test/`, node's test runner) in headless Chromium (Debian's
//! `/usr/bin/chromium`, or `CHROMIUM`), driven by `playwright-core` from npm; no browser is
//! downloaded. `cargo xtask bench console [-- ARGS]`: the dashboard's load with 1,000 entities
//! (`compat/console/bench.js`), a benchmark that reports figures and asserts none.
//!
//! Steps: build `ironbus` ([`super::build_release`]: release, or the dev profile with
//! `IRONBUS_XTASK_PROFILE=dev`); install `compat/console/node_modules` when its lock file
//! changed; run the script with `IRONBUS_SERVER` naming the binary. Each test file starts its own
//! server (memory store, free ports) and stops it; screenshots go to `compat/console/screenshots/`.

use std::fs;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::process::wait_at_most;
use crate::workspace_root;

const DIR: &str = "compat/console";
/// How long the browser tests may run before they are killed.
const TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// `compat console`: the browser tests.
pub(crate) fn run(runner_args: &[String]) -> Result<()> {
    let mut node = Command::new("node");
    node.args(["--test", "--test-force-exit", "--test-concurrency=1"]).args(runner_args);
    run_node("compat suite `console`", node)
}

/// `bench console`: the dashboard's load time with 1,000 entities.
pub(crate) fn bench(args: &[String]) -> Result<()> {
    let mut node = Command::new("node");
    node.arg("bench.js").args(args);
    run_node("bench `console`", node)
}

fn run_node(what: &str, mut command: Command) -> Result<()> {
    let chromium = crate::native::ensure_chromium()?;
    let server = super::build_release(&["ironbus"], &["ironbus"])?.remove(0);
    let dir = workspace_root().join(DIR);
    install(&dir)?;
    command.current_dir(&dir).env("IRONBUS_SERVER", &server).env("CHROMIUM", &chromium);
    eprintln!("$ (cd {DIR}) {}", super::shown(&command));
    let mut child =
        command.spawn().with_context(|| format!("could not start `{}`", super::shown(&command)))?;
    match wait_at_most(&mut child, TIMEOUT)? {
        Some(status) if status.success() => {
            eprintln!("xtask: {what} passed");
            Ok(())
        }
        Some(status) => bail!("{what} failed ({status})"),
        None => bail!("{what} still running after {TIMEOUT:?}: killed"),
    }
}

/// `npm ci` in `dir` unless its `node_modules` was installed from the same lock file.
fn install(dir: &std::path::Path) -> Result<()> {
    let lock = fs::read_to_string(dir.join("package-lock.json"))
        .context("reading compat/console/package-lock.json")?;
    let stamp = dir.join("node_modules").join(".ironbus-package-lock.json");
    if fs::read_to_string(&stamp).ok().as_deref() == Some(lock.as_str()) {
        return Ok(());
    }
    let mut npm = Command::new("npm");
    npm.args(["ci", "--no-audit", "--no-fund"]).current_dir(dir);
    eprintln!("$ (cd {DIR}) {}", super::shown(&npm));
    let status = npm.status().context("could not start npm")?;
    if !status.success() {
        bail!("npm ci in {DIR} failed ({status})");
    }
    fs::write(&stamp, lock).with_context(|| format!("writing {}", stamp.display()))
}
