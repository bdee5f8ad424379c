//! A throwaway PostgreSQL server for tests (feature `testing`): this crate's and those of any
//! crate that needs a real database (the cluster's).
//!
//! [`PostgresServer::start`] runs `initdb` and `postgres` from the machine's PostgreSQL
//! (Debian's `postgresql` package: `/usr/lib/postgresql/<version>/bin`, or the directory in
//! `IRONBUS_POSTGRES_BIN`) in a fresh temporary directory, listening on a free port of
//! 127.0.0.1 and on a unix socket inside that directory, and waits until it accepts
//! connections. PostgreSQL refuses to run as root, so as root both run as `nobody` (through
//! `runuser`, else `setpriv`). A small shell watchdog owns the server: when the server value
//! is dropped, or the test process exits however it exits, the watchdog's standard input
//! closes, and it stops the server (fast shutdown) and removes the directory.
//!
//! Without PostgreSQL installed, starting panics with a message that says how to install it:
//! a test that needs a database fails rather than passing without one.
//! [`PostgresServer::try_start`] returns that message instead.
//!
//! **Invariant:** this file uses `std` alone. `cargo xtask compat|crash --store postgres`
//! compiles it into xtask (`#[path]`), so that xtask starts its database with this very harness
//! without depending on this crate (tokio-postgres and the core would slow xtask's build).

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// The environment variable naming the directory of `initdb` and `postgres`.
pub const BIN_ENV: &str = "IRONBUS_POSTGRES_BIN";

/// The superuser of a test server (trust authentication, loopback only).
pub const USER: &str = "ironbus";

/// What to do when PostgreSQL is not installed.
pub const INSTALL_HINT: &str = "PostgreSQL is not installed: the PostgreSQL store's tests run \
     a real server. Install it with `apt-get install -y postgresql` (Debian/Ubuntu; `cargo \
     xtask ci` does so itself), or set IRONBUS_POSTGRES_BIN to the directory holding `initdb` \
     and `postgres`";

/// A running PostgreSQL server in a temporary directory; stopped, and the directory removed,
/// when dropped or when the process exits.
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    dir: PathBuf,
    /// The watchdog and its standard input: closing it stops the server.
    watchdog: Mutex<Option<(Child, ChildStdin)>>,
}

impl PostgresServer {
    /// Starts a server of its own.
    ///
    /// # Panics
    /// When PostgreSQL is not installed (with [`INSTALL_HINT`]) or does not start (with its
    /// log).
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|message| panic!("{message}"))
    }

    /// [`PostgresServer::start`], with what went wrong as the error instead of a panic: the
    /// install hint when PostgreSQL is missing, the server's log when it did not start.
    pub fn try_start() -> Result<Self, String> {
        let bin = bin_dir().map_err(|searched| format!("{INSTALL_HINT} (searched {searched})"))?;
        let runner = Runner::new();
        let dir = scratch_dir()?;
        let started = Self::start_in(&bin, &runner, &dir);
        if started.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        started
    }

    /// Runs `initdb` in `dir`, starts the watchdog and waits until the server is ready.
    fn start_in(bin: &Path, runner: &Runner, dir: &Path) -> Result<Self, String> {
        runner.give(dir)?;
        let data = dir.join("data");
        let mut initdb = runner.command(&bin.join("initdb"));
        initdb.arg("-D").arg(&data).args(["-U", USER, "-A", "trust", "-E", "UTF8"]);
        initdb.args(["--locale=C", "--no-sync"]);
        let out = initdb.output().map_err(|e| format!("cannot run initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Self::serve(bin, runner, dir, &data)
    }

    /// Starts the watchdog on the initialised `data` and waits until the server is ready.
    fn serve(bin: &Path, runner: &Runner, dir: &Path, data: &Path) -> Result<Self, String> {
        let port = free_port()?;
        let mut watchdog = runner.command(Path::new("sh"));
        watchdog
            .arg("-c")
            .arg(WATCHDOG)
            .arg("watchdog")
            .arg(bin)
            .arg(data)
            .arg(port.to_string())
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = watchdog.spawn().map_err(|e| format!("cannot start postgres: {e}"))?;
        let Some(stdin) = child.stdin.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the watchdog has no standard input".to_owned());
        };
        let server = Self { port, dir: dir.to_owned(), watchdog: Mutex::new(Some((child, stdin))) };
        server.wait_until_ready(bin)?;
        Ok(server)
    }

    /// Starts a **synchronous standby** of this server, named `name`: `pg_basebackup` from
    /// this server with a replication slot `name` (`-R` writes `standby.signal`; the standby's
    /// `primary_conninfo` carries `application_name=name`), started like this server in a
    /// temporary directory of its own, on a free port; then this server's
    /// `synchronous_standby_names` becomes `FIRST 1 (name)` and the standby must report
    /// `sync_state = sync` within a minute. From then on every commit here is acknowledged
    /// only once the standby has flushed it.
    pub fn try_start_standby(&self, name: &str) -> Result<Self, String> {
        let bin = bin_dir().map_err(|searched| format!("{INSTALL_HINT} (searched {searched})"))?;
        let runner = Runner::new();
        let dir = scratch_dir()?;
        let started = self.start_standby_in(&bin, &runner, &dir, name);
        if started.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        started
    }

    fn start_standby_in(
        &self,
        bin: &Path,
        runner: &Runner,
        dir: &Path,
        name: &str,
    ) -> Result<Self, String> {
        runner.give(dir)?;
        let data = dir.join("data");
        let primary =
            format!("host=127.0.0.1 port={} user={USER} application_name={name}", self.port);
        let mut backup = runner.command(&bin.join("pg_basebackup"));
        backup.arg("-d").arg(&primary).arg("-D").arg(&data);
        backup.args(["-R", "-C", "-S", name, "-X", "stream", "--no-sync"]);
        let out = backup.output().map_err(|e| format!("cannot run pg_basebackup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg_basebackup failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // The last setting of a key in postgresql.auto.conf wins.
        let conf = data.join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&conf)
            .map_err(|e| format!("cannot read {}: {e}", conf.display()))?;
        text.push_str(&format!("primary_conninfo = '{primary}'\nprimary_slot_name = '{name}'\n"));
        std::fs::write(&conf, text).map_err(|e| format!("cannot write {}: {e}", conf.display()))?;
        let standby = Self::serve(bin, runner, dir, &data)?;
        self.psql(&format!("ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 ({name})'"))?;
        self.psql("SELECT pg_reload_conf()")?;
        let started = Instant::now();
        let query =
            format!("SELECT sync_state FROM pg_stat_replication WHERE application_name = '{name}'");
        while self.psql(&query)? != "sync" {
            if started.elapsed() > Duration::from_secs(60) {
                return Err(format!("the standby {name} did not become synchronous within 60 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(standby)
    }

    /// Runs one SQL statement with `psql` as the superuser on database `postgres`; returns its
    /// output, unaligned and without headers (`psql -At`), trimmed.
    pub fn psql(&self, sql: &str) -> Result<String, String> {
        let bin = bin_dir().map_err(|searched| format!("{INSTALL_HINT} (searched {searched})"))?;
        let out = Command::new(bin.join("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER, "-d", "postgres"])
            .args(["-At", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .map_err(|e| format!("cannot run psql: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "psql `{sql}` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// SIGKILLs the server's postmaster (its pid from `postmaster.pid`), as a crash would: no
    /// shutdown checkpoint, its backends end when they notice. The watchdog still removes the
    /// directory when the value is dropped.
    pub fn kill(&self) -> Result<(), String> {
        let pid_file = self.dir.join("data").join("postmaster.pid");
        let text = std::fs::read_to_string(&pid_file)
            .map_err(|e| format!("cannot read {}: {e}", pid_file.display()))?;
        let pid = text.lines().next().unwrap_or_default().trim().to_owned();
        let killed = Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .map_err(|e| format!("cannot run kill: {e}"))?;
        if !killed.success() {
            return Err(format!("kill -KILL {pid} failed ({killed})"));
        }
        Ok(())
    }

    /// One server for the whole test process, started on first use and stopped when the
    /// process exits.
    pub fn shared() -> &'static PostgresServer {
        static SHARED: OnceLock<PostgresServer> = OnceLock::new();
        SHARED.get_or_init(PostgresServer::start)
    }

    /// A connection string for database `postgres` as the superuser, over TCP.
    pub fn url(&self) -> String {
        format!("host=127.0.0.1 port={} user={USER} dbname=postgres", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server (fast shutdown) and removes its directory; waits for both.
    pub fn stop(&self) {
        let watchdog = self.watchdog.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((mut child, stdin)) = watchdog {
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// The directory of the server's data, socket and log (`postgres.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the server (its watchdog) has exited or been stopped.
    pub fn exited(&self) -> bool {
        self.watchdog
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            .is_none_or(|(child, _)| !matches!(child.try_wait(), Ok(None)))
    }

    fn wait_until_ready(&self, bin: &Path) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
                .status()
                .is_ok_and(|status| status.success());
            if ready {
                return Ok(());
            }
            if self.exited() || started.elapsed() > Duration::from_secs(60) {
                let mut log = String::new();
                if let Ok(mut file) = std::fs::File::open(self.dir.join("postgres.log")) {
                    let _ = file.read_to_string(&mut log);
                }
                self.stop();
                return Err(format!(
                    "postgres did not start on port {}; its log:\n{log}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A table name no other caller in this process gets: `<label>_<n>` (`label`: lowercase
/// letters, digits, `_`).
pub fn unique_table(label: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{label}_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Runs the server until its standard input closes, then stops it and removes the directory.
/// Arguments: the bin directory, the data directory, the port, the scratch directory (which
/// also holds the socket and the log).
const WATCHDOG: &str = r#"
"$1/postgres" -D "$2" -p "$3" -k "$4" -c listen_addresses=127.0.0.1 -c max_connections=300 \
    </dev/null >>"$4/postgres.log" 2>&1 &
pid=$!
read -r _ignored || true
kill -INT "$pid" 2>/dev/null
wait "$pid"
rm -rf "$4"
"#;

/// The directory holding `initdb` and `postgres`: [`BIN_ENV`], else the newest
/// `/usr/lib/postgresql/<version>/bin`, else `pg_config --bindir`. Err: where it looked.
pub fn bin_dir() -> Result<PathBuf, String> {
    let holds = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os(BIN_ENV) {
        let dir = PathBuf::from(dir);
        return if holds(&dir) {
            Ok(dir)
        } else {
            Err(format!("{BIN_ENV}={}, which holds no initdb and postgres", dir.display()))
        };
    }
    if let Some(dir) = newest_version_bin(Path::new("/usr/lib/postgresql"), holds) {
        return Ok(dir);
    }
    let configured = Command::new("pg_config")
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    match configured {
        Some(dir) if holds(&dir) => Ok(dir),
        _ => Err(format!("{BIN_ENV}, /usr/lib/postgresql/*/bin and `pg_config --bindir`")),
    }
}

/// `<root>/<version>/bin` of the highest numeric version whose `bin` satisfies `holds`.
pub fn newest_version_bin(root: &Path, holds: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let entries = std::fs::read_dir(root).ok()?;
    entries
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            holds(&bin).then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version)
        .map(|(_, bin)| bin)
}

fn scratch_dir() -> Result<PathBuf, String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ironbus-postgres-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// How the server's commands run: as this user, or as root as `nobody`.
enum Runner {
    Myself,
    Nobody { uid: u32, gid: u32 },
}

impl Runner {
    fn new() -> Self {
        let root = std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0);
        if !root {
            return Runner::Myself;
        }
        let id = |flag: &str| -> u32 {
            Command::new("id")
                .args([flag, "nobody"])
                .output()
                .ok()
                .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
                .unwrap_or(65534)
        };
        Runner::Nobody { uid: id("-u"), gid: id("-g") }
    }

    /// Hands `dir` to the user the server runs as.
    fn give(&self, dir: &Path) -> Result<(), String> {
        if let Runner::Nobody { uid, gid } = self {
            std::os::unix::fs::chown(dir, Some(*uid), Some(*gid))
                .map_err(|e| format!("cannot hand {} to nobody: {e}", dir.display()))?;
        }
        Ok(())
    }

    /// `program`, run as the server's user from `/` (which that user can enter).
    fn command(&self, program: &Path) -> Command {
        let mut command = self.command_in_place(program);
        command.current_dir("/");
        command
    }

    fn command_in_place(&self, program: &Path) -> Command {
        match self {
            Runner::Myself => Command::new(program),
            Runner::Nobody { uid, gid } => {
                if Path::new("/usr/sbin/runuser").is_file() || Path::new("/sbin/runuser").is_file()
                {
                    let mut command = Command::new("runuser");
                    command.args(["-u", "nobody", "--"]).arg(program);
                    command
                } else {
                    let mut command = Command::new("setpriv");
                    command
                        .arg(format!("--reuid={uid}"))
                        .arg(format!("--regid={gid}"))
                        .arg("--clear-groups")
                        .arg(program);
                    command
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_numbered_version_with_both_programs_is_chosen() {
        let root = scratch_dir().unwrap();
        for version in ["9", "15", "16", "latest"] {
            std::fs::create_dir_all(root.join(version).join("bin")).unwrap();
        }
        let holds = |dir: &Path| !dir.starts_with(root.join("16"));
        assert_eq!(newest_version_bin(&root, holds), Some(root.join("15").join("bin")));
        assert_eq!(newest_version_bin(&root.join("none"), holds), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
