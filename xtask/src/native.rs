//! What RocksDB's native build needs, found or installed before a task builds the server, and
//! the PostgreSQL server the tests of `--store postgres` start.
//!
//! `librocksdb-sys` compiles RocksDB's C++ with the machine's C++ compiler and generates its
//! Rust bindings with bindgen, which loads libclang at build time. A machine with Rust alone
//! (the README's starting point) has neither libclang nor, always, `c++`. `cargo xtask run` and
//! `cargo xtask ci` call [`ensure`] first: it looks for both, and when one is missing on a
//! Debian or Ubuntu machine it says so and installs the packages with `apt-get` (as root, or
//! through `sudo -n`); elsewhere it stops with the command to run. A plain `cargo build` keeps
//! working wherever the prerequisites already exist.
//!
//! `cargo xtask ci` also calls [`ensure_postgres`]: the PostgreSQL store's tests start a real
//! server from Debian's `postgresql` package (`/usr/lib/postgresql/<version>/bin`, or the
//! directory in `IRONBUS_POSTGRES_BIN`), and fail without one. `cargo xtask run` does not need
//! it. `cargo xtask compat console` calls [`ensure_chromium`]: the console's browser tests drive
//! Debian's `chromium` (or the executable in `CHROMIUM`).

use std::{
    env,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Result};

/// The Debian packages that provide what is missing.
const PACKAGES: &[&str] = &["g++", "libclang-dev"];

/// The Debian package of the PostgreSQL server the tests start.
const POSTGRES_PACKAGES: &[&str] = &["postgresql"];

/// Finds the C++ compiler and libclang, installing them with `apt-get` where that is possible.
pub(crate) fn ensure() -> Result<()> {
    let or_else = "or set LIBCLANG_PATH to the directory holding libclang.so";
    install_if_missing("RocksDB's build", PACKAGES, or_else, missing)
}

/// The Debian packages of the browser the console's tests drive, and a font for its pages
/// (installed without recommended packages, Chromium may have none).
const CHROMIUM_PACKAGES: &[&str] = &["chromium", "fonts-liberation"];

/// The Chromium executable the console's browser tests drive: `CHROMIUM`, or Debian's
/// `/usr/bin/chromium`, installed with `apt-get` where that is possible.
pub(crate) fn ensure_chromium() -> Result<PathBuf> {
    if let Some(chromium) = env::var_os("CHROMIUM") {
        return Ok(PathBuf::from(chromium));
    }
    let debian = Path::new("/usr/bin/chromium");
    let or_else = "or set CHROMIUM to a Chromium executable";
    install_if_missing("the web console's browser tests", CHROMIUM_PACKAGES, or_else, || {
        if debian.exists() {
            Vec::new()
        } else {
            vec!["Chromium"]
        }
    })?;
    Ok(debian.to_path_buf())
}

/// Finds PostgreSQL's server programs, installing Debian's `postgresql` where that is possible.
pub(crate) fn ensure_postgres() -> Result<()> {
    let or_else = "or set IRONBUS_POSTGRES_BIN to the directory holding initdb and postgres";
    install_if_missing("the PostgreSQL store's test harness", POSTGRES_PACKAGES, or_else, || {
        if crate::postgres::bin_dir().is_ok() {
            Vec::new()
        } else {
            vec!["a PostgreSQL server (initdb and postgres)"]
        }
    })
}

/// Installs `packages` with `apt-get` when `missing` names something `who` needs, and checks
/// again; `or_else` is the way round an install, for the message where none is possible.
fn install_if_missing(
    who: &str,
    packages: &[&str],
    or_else: &str,
    missing: impl Fn() -> Vec<&'static str>,
) -> Result<()> {
    let lacking = missing();
    if lacking.is_empty() {
        return Ok(());
    }
    let install = format!("apt-get install -y --no-install-recommends {}", packages.join(" "));
    if !succeeds(Command::new("apt-get").arg("--version")) {
        bail!(
            "{who} needs {}; install it (Debian/Ubuntu: `{install}`), {or_else}",
            lacking.join(" and ")
        );
    }
    let root = output_of(Command::new("id").arg("-u")).is_some_and(|uid| uid.trim() == "0");
    let elevate: &[&str] = if root {
        &[]
    } else if succeeds(Command::new("sudo").args(["-n", "true"])) {
        &["sudo", "-n"]
    } else {
        bail!(
            "{who} needs {}; run `sudo {install}` once, then this task again",
            lacking.join(" and ")
        );
    };
    eprintln!(
        "xtask: {who} needs {}, which this machine lacks; installing the Debian packages {} \
         (once)",
        lacking.join(" and "),
        packages.join(" ")
    );
    apt(elevate, &["update", "-qq"])?;
    let mut install_args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    install_args.extend_from_slice(packages);
    apt(elevate, &install_args)?;
    let still = missing();
    if !still.is_empty() {
        bail!(
            "installed {}, but {} still cannot be found",
            packages.join(" "),
            still.join(" and ")
        );
    }
    Ok(())
}

/// What the native build needs and this machine lacks, in words.
fn missing() -> Vec<&'static str> {
    let mut missing = Vec::new();
    let compiler = env::var_os("CXX").unwrap_or_else(|| "c++".into());
    if !succeeds(Command::new(compiler).arg("--version")) {
        missing.push("a C++ compiler");
    }
    if find_libclang().is_none() {
        missing.push("libclang");
    }
    missing
}

/// Where libclang is, searched as clang-sys searches (LIBCLANG_PATH, `llvm-config`, the usual
/// library directories).
fn find_libclang() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(path) = env::var_os("LIBCLANG_PATH") {
        dirs.push(path.into());
    }
    if let Some(libdir) = output_of(Command::new("llvm-config").arg("--libdir")) {
        dirs.push(libdir.trim().into());
    }
    for parent in ["/usr/lib", "/usr/local/lib", "/usr/lib64"] {
        dirs.push(parent.into());
        dirs.push(Path::new(parent).join(multiarch()));
        if let Ok(entries) = std::fs::read_dir(parent) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|entry| entry.file_name().to_string_lossy().starts_with("llvm"))
                    .map(|entry| entry.path().join("lib")),
            );
        }
    }
    dirs.into_iter().find(|dir| holds_libclang(dir))
}

/// Whether `dir` holds a shared libclang (`libclang.so`, `libclang.so.1`, `libclang-14.so.1`;
/// not `libclang-cpp`, a different library).
fn holds_libclang(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(rest) = name.strip_prefix("libclang") else { return false };
        let versioned = rest
            .strip_prefix('-')
            .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()));
        rest.starts_with(".so") || (versioned && rest.contains(".so"))
    })
}

fn multiarch() -> String {
    format!("{}-linux-gnu", env::consts::ARCH)
}

/// Runs `apt-get ARGS` (through `elevate`), echoed, non-interactively.
fn apt(elevate: &[&str], args: &[&str]) -> Result<()> {
    let mut words: Vec<&str> = elevate.to_vec();
    words.push("apt-get");
    words.extend_from_slice(args);
    let mut cmd = Command::new(words[0]);
    cmd.args(&words[1..]).env("DEBIAN_FRONTEND", "noninteractive");
    crate::run_shown("apt-get", &words.join(" "), &mut cmd)
}

fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

fn output_of(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libclang_is_told_from_libclang_cpp() {
        let dir = env::temp_dir().join(format!("xtask-native-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libclang-cpp.so.14"), b"").unwrap();
        assert!(!holds_libclang(&dir), "libclang-cpp is not libclang");
        std::fs::write(dir.join("libclang-14.so.1"), b"").unwrap();
        assert!(holds_libclang(&dir), "Debian's versioned name");
        std::fs::remove_file(dir.join("libclang-14.so.1")).unwrap();
        std::fs::write(dir.join("libclang.so"), b"").unwrap();
        assert!(holds_libclang(&dir), "the plain name");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
