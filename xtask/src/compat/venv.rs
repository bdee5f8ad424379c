//! The Python venvs of the suites (`compat/python/.venv`, `compat/mssuite/.venv`): created with
//! `python3 -m venv` (or `$PYTHON`) where missing, and given the suite's `requirements.txt` when
//! it changed since the last install (a stamp file inside the venv remembers it).
//!
//! `cargo xtask cluster` runs its driver (`compat/cluster/driver.py`) with the official SDK of
//! the Python suite's venv ([`python_sdk`]).

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};

use super::{read, run_step};
use crate::workspace_root;

/// Installs the requirements of the suite in `dir` into its venv, unless already there.
pub(super) fn prepare(dir: &Path) -> Result<()> {
    let requirements = read(&dir.join("requirements.txt"))?;
    let venv = dir.join(".venv");
    let stamp = venv.join(".ironbus-requirements.txt");
    if fs::read_to_string(&stamp).ok().as_deref() == Some(requirements.as_str()) {
        return Ok(());
    }
    if !python(dir).is_file() {
        let python = env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
        let mut venv_cmd = Command::new(python);
        venv_cmd.args(["-m", "venv", ".venv"]);
        run_step("creating the Python venv", dir, venv_cmd)?;
    }
    let mut pip = Command::new(python(dir));
    pip.args(["-m", "pip", "install", "--disable-pip-version-check", "-q", "-r"]);
    pip.arg("requirements.txt");
    run_step("installing the Python SDK and test tools", dir, pip)?;
    fs::write(&stamp, requirements).with_context(|| format!("writing {}", stamp.display()))
}

/// The venv's interpreter of the suite in `dir`.
pub(super) fn python(dir: &Path) -> PathBuf {
    dir.join(".venv").join("bin").join("python")
}

/// The Python suite's venv, with the official `azure-servicebus` installed: its interpreter.
pub(crate) fn python_sdk() -> Result<PathBuf> {
    let dir = workspace_root().join("compat/python");
    prepare(&dir)?;
    Ok(python(&dir))
}
