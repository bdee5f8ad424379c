//! The database of `cargo xtask compat|crash --store postgres`: a throwaway PostgreSQL, started
//! before the first server and stopped, its directory removed, when the task ends (on every
//! path: [`Database`]'s `Drop`, and the harness's watchdog when xtask itself dies).
//!
//! The harness is the PostgreSQL store's own (`store-postgres/src/testing.rs`), compiled into
//! xtask as a module: `initdb` and `postgres` from Debian's `postgresql` package (installed first
//! where missing, as `cargo xtask ci` does) in a temporary directory, run as `nobody` when xtask
//! runs as root, on a free port of 127.0.0.1. The file uses `std` alone, so xtask gains no
//! dependency.
//!
//! Invariant: only ironbus is ever killed; the database outlives every server of the task (the
//! crash test checks after each restart that it still runs).

use anyhow::{anyhow, bail, Context, Result};

#[allow(dead_code, unreachable_pub, reason = "the tests' harness: its public items are for them")]
#[path = "../../store-postgres/src/testing.rs"]
mod harness;

/// The harness's superuser (trust authentication, loopback only).
pub(crate) const USER: &str = harness::USER;

/// Where PostgreSQL's `initdb` and `postgres` are, searched as the store's test harness does.
pub(crate) fn bin_dir() -> std::result::Result<std::path::PathBuf, String> {
    harness::bin_dir()
}

/// Which store the server under test runs on: `--store rocksdb|postgres` of `compat` and
/// `crash` (`crash` also takes `memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreKind {
    Rocksdb,
    Postgres,
    Memory,
}

impl StoreKind {
    /// Parses `--store`'s value, refusing what `task` does not offer.
    pub(crate) fn parse(text: &str, offered: &[StoreKind]) -> Result<StoreKind> {
        let kind = match text {
            "rocksdb" => Some(StoreKind::Rocksdb),
            "postgres" => Some(StoreKind::Postgres),
            "memory" => Some(StoreKind::Memory),
            _ => None,
        };
        match kind {
            Some(kind) if offered.contains(&kind) => Ok(kind),
            _ => {
                let names: Vec<&str> = offered.iter().map(|kind| kind.name()).collect();
                let names = match names.split_last() {
                    Some((last, [])) => (*last).to_owned(),
                    Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                    None => "nothing".to_owned(),
                };
                bail!("--store must be {names}, got `{text}`")
            }
        }
    }

    /// The value of the server's `--store`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            StoreKind::Rocksdb => "rocksdb",
            StoreKind::Postgres => "postgres",
            StoreKind::Memory => "memory",
        }
    }
}

/// Takes `--store KIND` (or `--store=KIND`) out of `args`: the store (`default` without the
/// flag) and the other arguments, in order.
pub(crate) fn take_store_flag(
    args: &[String],
    default: StoreKind,
    offered: &[StoreKind],
) -> Result<(StoreKind, Vec<String>)> {
    let mut store = default;
    let mut rest = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if let Some(value) = arg.strip_prefix("--store=") {
            store = StoreKind::parse(value, offered)?;
        } else if arg == "--store" {
            let value = args.next().context("--store needs a value")?;
            store = StoreKind::parse(value, offered)?;
        } else {
            rest.push(arg.clone());
        }
    }
    Ok((store, rest))
}

/// How long [`Database::delay_commits`] makes each commit wait, in microseconds: PostgreSQL's
/// largest `commit_delay`.
const COMMIT_DELAY_US: u32 = 100_000;

/// A running throwaway PostgreSQL; stopped and removed when dropped.
#[derive(Debug)]
pub(crate) struct Database {
    server: harness::PostgresServer,
}

impl Database {
    /// Finds (or installs) PostgreSQL and starts a server of its own.
    pub(crate) fn start() -> Result<Database> {
        crate::native::ensure_postgres()?;
        eprintln!("xtask: starting a throwaway PostgreSQL for --store postgres");
        let server = harness::PostgresServer::try_start()
            .map_err(|message| anyhow!("starting PostgreSQL: {message}"))?;
        eprintln!(
            "xtask: PostgreSQL listening on 127.0.0.1:{} (directory {})",
            server.port(),
            server.dir().display()
        );
        Ok(Database { server })
    }

    /// Makes every commit wait [`COMMIT_DELAY_US`] before it flushes (`commit_delay`, for all
    /// commits: `commit_siblings` 0). A SIGKILL of the server then often leaves a commit still
    /// landing while its successor starts: what the successor reads first must include it.
    pub(crate) fn delay_commits(&self) -> Result<()> {
        eprintln!("xtask: PostgreSQL delays every commit by {COMMIT_DELAY_US} µs (commit_delay)");
        for sql in [
            format!("ALTER SYSTEM SET commit_delay = {COMMIT_DELAY_US}"),
            "ALTER SYSTEM SET commit_siblings = 0".to_owned(),
            "SELECT pg_reload_conf()".to_owned(),
        ] {
            self.server.psql(&sql).map_err(|message| anyhow!("slowing commits: {message}"))?;
        }
        Ok(())
    }

    /// The server's `--postgres-url`: the harness's database and superuser, as a URL (no spaces,
    /// so the echoed server command can be pasted into a shell).
    pub(crate) fn url(&self) -> String {
        format!("postgresql://{}@127.0.0.1:{}/postgres", harness::USER, self.server.port())
    }

    /// Starts a synchronous standby of this database, named `name` (the harness's
    /// [`harness::PostgresServer::try_start_standby`]): every commit here is then acknowledged
    /// only once the standby has it.
    pub(crate) fn start_standby(&self, name: &str) -> Result<Database> {
        eprintln!("xtask: starting a synchronous standby `{name}` of PostgreSQL");
        let server = self
            .server
            .try_start_standby(name)
            .map_err(|message| anyhow!("starting the standby: {message}"))?;
        eprintln!(
            "xtask: standby `{name}` listening on 127.0.0.1:{} (directory {}), synchronous",
            server.port(),
            server.dir().display()
        );
        Ok(Database { server })
    }

    pub(crate) fn port(&self) -> u16 {
        self.server.port()
    }

    /// Runs one SQL statement with `psql`; its output, unaligned, without headers.
    pub(crate) fn psql(&self, sql: &str) -> Result<String> {
        self.server.psql(sql).map_err(|message| anyhow!(message))
    }

    /// SIGKILLs the database's postmaster, as a crash would.
    pub(crate) fn kill(&self) -> Result<()> {
        self.server.kill().map_err(|message| anyhow!("killing PostgreSQL: {message}"))
    }

    /// Fails when the database is no longer running.
    pub(crate) fn check_running(&self) -> Result<()> {
        if self.server.exited() {
            bail!(
                "PostgreSQL exited (its log was {})",
                self.server.dir().join("postgres.log").display()
            );
        }
        Ok(())
    }

    /// The process id of the server's postmaster (the parent of every PostgreSQL process), from
    /// its `postmaster.pid`; `None` when that cannot be read.
    pub(crate) fn postmaster_pid(&self) -> Option<u32> {
        let file = self.server.dir().join("data").join("postmaster.pid");
        std::fs::read_to_string(file).ok()?.lines().next()?.trim().parse().ok()
    }
}

/// Starts the database `kind` needs: PostgreSQL's, or none.
pub(crate) fn start_for(kind: StoreKind) -> Result<Option<Database>> {
    match kind {
        StoreKind::Postgres => Database::start().map(Some),
        StoreKind::Rocksdb | StoreKind::Memory => Ok(None),
    }
}

/// The server arguments that select the store: `--store <kind>`, and for PostgreSQL
/// `--postgres-url` of `database`.
pub(crate) fn server_args(kind: StoreKind, database: Option<&Database>) -> Result<Vec<String>> {
    let mut args = vec!["--store".to_owned(), kind.name().to_owned()];
    match (kind, database) {
        (StoreKind::Postgres, Some(database)) => {
            args.extend(["--postgres-url".to_owned(), database.url()]);
        }
        (StoreKind::Postgres, None) => bail!("--store postgres without a database"),
        _ => {}
    }
    Ok(args)
}

impl Drop for Database {
    fn drop(&mut self) {
        eprintln!("xtask: stopping PostgreSQL");
        self.server.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_kinds_are_refused_where_not_offered() {
        let both = [StoreKind::Rocksdb, StoreKind::Postgres];
        assert_eq!(StoreKind::parse("postgres", &both).unwrap(), StoreKind::Postgres);
        let refused = StoreKind::parse("memory", &both).unwrap_err().to_string();
        assert_eq!(refused, "--store must be rocksdb or postgres, got `memory`");
        let all = [StoreKind::Rocksdb, StoreKind::Postgres, StoreKind::Memory];
        let refused = StoreKind::parse("ram", &all).unwrap_err().to_string();
        assert_eq!(refused, "--store must be rocksdb, postgres or memory, got `ram`");
    }

    #[test]
    fn the_store_flag_is_taken_out_of_the_arguments() {
        let args = |text: &str| text.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let offered = [StoreKind::Rocksdb, StoreKind::Postgres];
        let take = |text: &str| take_store_flag(&args(text), StoreKind::Rocksdb, &offered);
        assert_eq!(take("python").unwrap(), (StoreKind::Rocksdb, args("python")));
        assert_eq!(take("python --store postgres").unwrap(), (StoreKind::Postgres, args("python")));
        assert_eq!(take("--store=postgres").unwrap(), (StoreKind::Postgres, vec![]));
        assert!(take("python --store").is_err());
        assert!(take("--store memory").is_err());
    }

    #[test]
    fn postgres_is_found_in_the_newest_complete_version_directory() {
        let root = std::env::temp_dir().join(format!("xtask-postgres-{}", std::process::id()));
        let bin = |version: &str| root.join(version).join("bin");
        for (version, programs) in [
            ("13", &["initdb", "postgres"][..]),
            ("15", &["initdb", "postgres"]),
            ("16", &["psql"]),
        ] {
            std::fs::create_dir_all(bin(version)).unwrap();
            for program in programs {
                std::fs::write(bin(version).join(program), b"").unwrap();
            }
        }
        std::fs::create_dir_all(bin("latest")).unwrap();
        let holds =
            |dir: &std::path::Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
        assert_eq!(
            harness::newest_version_bin(&root, holds),
            Some(bin("15")),
            "16 has no server, `latest` no number"
        );
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(harness::newest_version_bin(&root, holds), None);
    }

    #[test]
    fn only_postgres_gets_a_url() {
        let args = server_args(StoreKind::Rocksdb, None).unwrap();
        assert_eq!(args, ["--store", "rocksdb"]);
        assert!(server_args(StoreKind::Postgres, None).is_err());
    }
}
