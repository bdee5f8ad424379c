//! [`PostgresStore`]: the `Store` trait on one PostgreSQL table.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use ironbus_core::store::{
    Guard, KeyValue, Store, StoreError, StoreErrorKind, StoreHealth, WriteBatch, WriteLimits,
};
use tokio::time::Instant;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::Config;

use crate::error::{commit_is_ambiguous, describe, judge, store_error, Verdict};
use crate::options::{PostgresOptions, Table};
use crate::plan::Plan;
use crate::pool::{connect, Backend, Conn, Pool, BACKEND_STARTED};

/// A [`Store`] on one PostgreSQL table (`key bytea primary key, value bytea`): one transaction
/// per batch, a small pool of connections. See the crate docs for its promises.
pub struct PostgresStore {
    pool: Pool,
    table: Table,
    /// `host:port, …`, for messages (never the connection string: it may hold a password).
    server: String,
    options: PostgresOptions,
    /// A write, or a read, failed with `Unavailable`; cleared by the next success (a write
    /// clears both).
    writes_down: AtomicBool,
    reads_down: AtomicBool,
    /// The backends of write attempts whose outcome is unknown (abandoned after
    /// `attempt_timeout`, or cut off during `COMMIT`): their transactions may still commit.
    /// Every call first ends them ([`PostgresStore::settle_doubts`]); `doubtful` says whether
    /// there are any without taking the lock.
    in_doubt: Mutex<Vec<Backend>>,
    doubtful: AtomicBool,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("server", &self.server)
            .field("table", &self.table.name())
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database of `connection` (a `postgresql://` URL or `key=value` pairs,
    /// as libpq takes them: several hosts, `target_session_attrs=read-write`, …), creates the
    /// table if missing and returns the store, with `options.wait_for_writers` only once no
    /// transaction writes the table any more. Retries for `options.retry_for`; a server that
    /// cannot be reached is `Unavailable`, a connection string that does not parse or a bad
    /// table name `InvalidInput`, a refusal (a wrong password, no such database) `Other`.
    pub async fn connect(connection: &str, options: PostgresOptions) -> Result<Self, StoreError> {
        let table = Table::new(&options.table)?;
        let mut config: Config = connection.parse().map_err(|error| {
            StoreError::new(
                StoreErrorKind::InvalidInput,
                format!("postgres: the connection string does not parse: {error}"),
            )
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        if config.get_application_name().is_none() {
            config.application_name("ironbus");
        }
        let server = servers(&config);
        create_table(&config, &table, &server, options.retry_for).await?;
        let store = Self {
            pool: Pool::new(config, table.clone(), options.connections),
            table,
            server,
            options,
            writes_down: AtomicBool::new(false),
            reads_down: AtomicBool::new(false),
            in_doubt: Mutex::new(Vec::new()),
            doubtful: AtomicBool::new(false),
        };
        if store.options.wait_for_writers {
            store.wait_for_writers().await?;
        }
        Ok(store)
    }

    /// Returns once every transaction that was writing the table has ended: a `SHARE` lock on
    /// the table conflicts with the `ROW EXCLUSIVE` lock each writer holds until its commit or
    /// rollback is complete, so it is granted only after them. It is released at once. While
    /// it waits it says so, every [`WRITERS_WAIT`], naming the writers' backends (a client may
    /// hold a transaction open, and only its end or `pg_terminate_backend` ends the wait).
    async fn wait_for_writers(&self) -> Result<(), StoreError> {
        let started = Instant::now();
        loop {
            match self.run(&WaitForWriters { table: &self.table }).await? {
                Writers::Ended if started.elapsed() >= WRITERS_WAIT => {
                    tracing::info!(table = self.table.name(), "the earlier writers ended");
                    return Ok(());
                }
                Writers::Ended => return Ok(()),
                Writers::Writing(backends) => tracing::warn!(
                    table = self.table.name(),
                    backends = ?backends,
                    seconds = started.elapsed().as_secs(),
                    "postgres: waiting for transactions still writing the table to end before \
                     reading it (a writer killed a moment ago may still be committing, or a \
                     client holds a transaction open: end it, or pg_terminate_backend its backend)"
                ),
            }
        }
    }

    /// The store's table.
    pub fn table(&self) -> &str {
        self.table.name()
    }

    /// Ends the backends of the writes whose outcome is unknown and returns once they are gone:
    /// a transaction still committing has then committed or rolled back for good, so what the
    /// caller reads next (a partition's rebuild after the failed write) shows its fate. Without
    /// this a commit could land after that read, under keys the rebuild gave out again.
    async fn settle_doubts(&self) -> Result<(), StoreError> {
        let backends = self.in_doubt.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let started = Instant::now();
        let mut reported = started;
        loop {
            let alive =
                match tokio::time::timeout(self.options.attempt_timeout, self.end(&backends)).await
                {
                    Ok(alive) => alive.map_err(|error| describe(&error)),
                    Err(_) => Err(format!("no answer within {:?}", self.options.attempt_timeout)),
                };
            match alive {
                Ok(0) => break,
                Ok(_) => {
                    if reported.elapsed() >= WRITERS_WAIT {
                        reported = Instant::now();
                        tracing::warn!(
                            table = self.table.name(),
                            backends = ?backends.iter().map(|b| b.pid).collect::<Vec<_>>(),
                            seconds = started.elapsed().as_secs(),
                            "postgres: waiting for the backends of writes whose outcome is \
                             unknown to end"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                // Unreachable for now: tried again like any call, for `retry_for`.
                Err(_) if started.elapsed() < self.options.retry_for => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => {
                    let error = StoreError::unavailable(format!(
                        "postgres: cannot end the backends of writes whose outcome is unknown \
                         ({}): {error}",
                        self.server
                    ));
                    return Err(self.down(false, error));
                }
            }
        }
        let mut in_doubt = self.in_doubt.lock().unwrap_or_else(PoisonError::into_inner);
        in_doubt.retain(|backend| !backends.contains(backend));
        self.doubtful.store(!in_doubt.is_empty(), Ordering::Release);
        Ok(())
    }

    /// Asks each of `backends` still running to terminate (a transaction committing finishes
    /// its commit first); returns how many were still running.
    async fn end(&self, backends: &[Backend]) -> Result<usize, tokio_postgres::Error> {
        let lease = self.pool.get().await?;
        let pids: Vec<i32> = backends.iter().map(|b| b.pid).collect();
        let starts: Vec<i64> = backends.iter().map(|b| b.started).collect();
        let rows = lease
            .conn
            .client
            .query(
                &format!(
                    "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a \
                     JOIN unnest($1::int4[], $2::int8[]) AS d(pid, started) \
                     ON a.pid = d.pid AND {BACKEND_STARTED} = d.started"
                ),
                &[&pids, &starts],
            )
            .await?;
        lease.release();
        Ok(rows.len())
    }

    /// Runs `attempt` until it succeeds, fails for good, or `retry_for` has passed.
    async fn run<A: Attempt>(&self, attempt: &A) -> Result<A::Output, StoreError> {
        if self.doubtful.load(Ordering::Acquire) {
            self.settle_doubts().await?;
        }
        let deadline = Instant::now() + self.options.retry_for;
        let mut backoff = Duration::from_millis(5);
        // An earlier attempt's COMMIT may have landed: a guard that fails now may have been
        // moved by this very batch.
        let mut ambiguous = false;
        loop {
            let outcome = tokio::time::timeout(self.options.attempt_timeout, self.once(attempt))
                .await
                .unwrap_or(Err(Failure::TimedOut));
            let (error, committing) = match outcome {
                Ok(output) => {
                    self.recovered(A::WRITES);
                    return Ok(output);
                }
                Err(Failure::Conflict(conflict)) if ambiguous => {
                    return Err(StoreError::unavailable(format!(
                        "postgres {}: the outcome of an interrupted commit is unknown, and on \
                         retrying: {}",
                        A::OPERATION,
                        conflict.message
                    )));
                }
                Err(Failure::Conflict(conflict)) => return Err(conflict),
                Err(Failure::TimedOut) => {
                    ambiguous |= A::WRITES;
                    if Instant::now() + backoff > deadline {
                        return Err(self.down(
                            A::WRITES,
                            StoreError::unavailable(format!(
                                "postgres {}: no answer from {} within {:?}",
                                A::OPERATION,
                                self.server,
                                self.options.attempt_timeout
                            )),
                        ));
                    }
                    continue;
                }
                Err(Failure::Postgres { error, committing }) => (error, committing),
            };
            let verdict = judge(&error);
            let retry = match verdict {
                Verdict::Fail(kind) => return Err(store_error(kind, A::OPERATION, error)),
                Verdict::DiskFull => {
                    let error = store_error(StoreErrorKind::Unavailable, A::OPERATION, error);
                    return Err(self.down(true, error));
                }
                Verdict::Reconnect | Verdict::Retry | Verdict::ReadOnly => {
                    Instant::now() + backoff <= deadline
                }
            };
            ambiguous |= committing && commit_is_ambiguous(&error);
            if !retry {
                let error = store_error(StoreErrorKind::Unavailable, A::OPERATION, error);
                return Err(self.down(A::WRITES || verdict == Verdict::ReadOnly, error));
            }
            tracing::debug!(
                table = self.table.name(),
                operation = A::OPERATION,
                error = %describe(&error),
                "postgres retrying"
            );
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// One attempt on a pooled connection, handed back afterwards unless its state is unknown.
    async fn once<A: Attempt>(&self, attempt: &A) -> Result<A::Output, Failure> {
        let mut lease = self.pool.get().await?;
        // Dropped unsettled (the attempt abandoned, or its outcome unknown), it records the
        // backend as in doubt.
        let mut doubt =
            A::WRITES.then(|| Doubt { store: self, backend: lease.conn.backend, settled: false });
        let result = attempt.attempt(&mut lease.conn).await;
        let definite = match &result {
            Ok(_) | Err(Failure::Conflict(_)) => true,
            Err(Failure::Postgres { error, committing: true }) => !commit_is_ambiguous(error),
            // The server answered with an error: the transaction is rolled back.
            Err(Failure::Postgres { error, committing: false }) => error.code().is_some(),
            Err(Failure::TimedOut) => false,
        };
        if let Some(doubt) = doubt.as_mut() {
            doubt.settled = definite;
        }
        drop(doubt);
        let reusable = match &result {
            Ok(_) | Err(Failure::Conflict(_)) => true,
            Err(Failure::Postgres { error, .. }) => {
                matches!(judge(error), Verdict::Fail(_) | Verdict::Retry | Verdict::DiskFull)
            }
            Err(Failure::TimedOut) => false,
        };
        if reusable {
            lease.release();
        } else if matches!(result, Err(Failure::Postgres { .. })) {
            // A read-only or failing server: the next connection may find another host.
            self.pool.clear();
        }
        result
    }

    fn recovered(&self, writes: bool) {
        if writes {
            self.writes_down.store(false, Ordering::Relaxed);
        }
        self.reads_down.store(false, Ordering::Relaxed);
    }

    fn down(&self, writes: bool, error: StoreError) -> StoreError {
        tracing::warn!(table = self.table.name(), error = %error, "postgres store unavailable");
        if writes {
            self.writes_down.store(true, Ordering::Relaxed);
        } else {
            self.reads_down.store(true, Ordering::Relaxed);
        }
        error
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.run(&Get { key }).await
    }

    async fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        if limit == 0 || (!end.is_empty() && start >= end) {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run(&Scan { start, end, limit }).await
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if !self.options.limits.admits_batch(&batch) {
            return Err(self.options.limits.exceeded(&batch));
        }
        if batch.is_empty() {
            return Ok(());
        }
        let (guards, ops) = batch.into_parts();
        let guards = distinct_guards(guards)?;
        let mut plan = Plan::new(ops);
        for guard in guards.iter().filter(|guard| guard.expected.is_none()) {
            plan.remove_unless_put(&guard.key);
        }
        self.run(&Write { guards, plan }).await
    }

    fn limits(&self) -> WriteLimits {
        self.options.limits
    }

    fn health(&self) -> StoreHealth {
        if self.writes_down.load(Ordering::Relaxed) || self.reads_down.load(Ordering::Relaxed) {
            StoreHealth::Unavailable
        } else {
            StoreHealth::Healthy
        }
    }
}

/// The guards sorted by key (concurrent batches lock guard rows in one order), each key once;
/// two guards on one key that expect different values cannot both hold.
fn distinct_guards(mut guards: Vec<Guard>) -> Result<Vec<Guard>, StoreError> {
    guards.sort_by(|a, b| a.key.cmp(&b.key));
    let mut distinct: Vec<Guard> = Vec::with_capacity(guards.len());
    for guard in guards {
        match distinct.last() {
            Some(last) if last.key == guard.key => {
                if last.expected != guard.expected {
                    return Err(guard.conflict());
                }
            }
            _ => distinct.push(guard),
        }
    }
    Ok(distinct)
}

/// Why an attempt failed.
#[derive(Debug)]
enum Failure {
    /// PostgreSQL, the connection or the protocol failed; `committing`: on `COMMIT`.
    Postgres { error: tokio_postgres::Error, committing: bool },
    /// A guard did not hold; the transaction was rolled back.
    Conflict(StoreError),
    /// The attempt took longer than `attempt_timeout`.
    TimedOut,
}

impl From<tokio_postgres::Error> for Failure {
    fn from(error: tokio_postgres::Error) -> Self {
        Failure::Postgres { error, committing: false }
    }
}

/// One try of an operation on one connection.
trait Attempt: Sync {
    type Output: Send;
    /// For messages.
    const OPERATION: &'static str;
    /// Whether it writes (a failed read does not make writes unhealthy).
    const WRITES: bool;

    fn attempt<'c>(
        &'c self,
        conn: &'c mut Conn,
    ) -> impl Future<Output = Result<Self::Output, Failure>> + Send + 'c;
}

struct Get<'a> {
    key: &'a [u8],
}

impl Attempt for Get<'_> {
    type Output = Option<Bytes>;
    const OPERATION: &'static str = "get";
    const WRITES: bool = false;

    async fn attempt<'c>(&'c self, conn: &'c mut Conn) -> Result<Option<Bytes>, Failure> {
        let row = conn.client.query_opt(&conn.statements.get, &[&self.key]).await?;
        Ok(match row {
            Some(row) => Some(Bytes::copy_from_slice(row.try_get::<_, &[u8]>(0)?)),
            None => None,
        })
    }
}

struct Scan<'a> {
    start: &'a [u8],
    /// Empty: no upper bound.
    end: &'a [u8],
    limit: i64,
}

impl Attempt for Scan<'_> {
    type Output = Vec<KeyValue>;
    const OPERATION: &'static str = "scan";
    const WRITES: bool = false;

    async fn attempt<'c>(&'c self, conn: &'c mut Conn) -> Result<Vec<KeyValue>, Failure> {
        let s = &conn.statements;
        let rows = if self.end.is_empty() {
            conn.client.query(&s.scan_from, &[&self.start, &self.limit]).await?
        } else {
            conn.client.query(&s.scan_to, &[&self.start, &self.end, &self.limit]).await?
        };
        let mut pairs = Vec::with_capacity(rows.len());
        for row in rows {
            let key = Bytes::copy_from_slice(row.try_get::<_, &[u8]>(0)?);
            pairs.push((key, Bytes::copy_from_slice(row.try_get::<_, &[u8]>(1)?)));
        }
        Ok(pairs)
    }
}

/// A write attempt under way: dropped before its outcome is `settled` (abandoned), or with an
/// unknown outcome, it records its backend in [`PostgresStore::in_doubt`].
struct Doubt<'a> {
    store: &'a PostgresStore,
    backend: Backend,
    settled: bool,
}

impl Drop for Doubt<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut in_doubt = self.store.in_doubt.lock().unwrap_or_else(PoisonError::into_inner);
        if !in_doubt.contains(&self.backend) {
            in_doubt.push(self.backend);
        }
        self.store.doubtful.store(true, Ordering::Release);
    }
}

/// How long one attempt of [`PostgresStore::wait_for_writers`] waits for the table's lock.
const WRITERS_WAIT: Duration = Duration::from_secs(5);

/// Whether transactions were still writing the table.
enum Writers {
    Ended,
    /// Still writing after [`WRITERS_WAIT`]: their backends' process ids.
    Writing(Vec<i32>),
}

/// One wait for the writers of a table to end (see [`PostgresStore::wait_for_writers`]).
struct WaitForWriters<'a> {
    table: &'a Table,
}

impl Attempt for WaitForWriters<'_> {
    type Output = Writers;
    const OPERATION: &'static str = "wait for writers";
    const WRITES: bool = false;

    async fn attempt<'c>(&'c self, conn: &'c mut Conn) -> Result<Writers, Failure> {
        let client = &mut conn.client;
        let tx = client.transaction().await?;
        let lock = format!(
            "SET LOCAL lock_timeout = {}; LOCK TABLE {} IN SHARE MODE",
            WRITERS_WAIT.as_millis(),
            self.table
        );
        match tx.batch_execute(&lock).await {
            Ok(()) => {
                tx.commit().await?;
                Ok(Writers::Ended)
            }
            // No transaction writes on a server that takes no writes (a standby, which refuses
            // the lock): the store finds the primary when it writes.
            Err(error) if error.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) => {
                Ok(Writers::Ended)
            }
            Err(error) if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                tx.rollback().await?;
                let rows = client
                    .query(
                        "SELECT pid FROM pg_locks WHERE relation = $1::text::regclass \
                         AND mode = 'RowExclusiveLock' AND granted AND pid <> pg_backend_pid() \
                         ORDER BY pid",
                        &[&self.table.to_string()],
                    )
                    .await?;
                let backends = rows.iter().map(|row| row.try_get(0)).collect::<Result<_, _>>()?;
                Ok(Writers::Writing(backends))
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// A batch: its guards (distinct keys, sorted) and its statements.
struct Write {
    guards: Vec<Guard>,
    plan: Plan,
}

impl Attempt for Write {
    type Output = ();
    const OPERATION: &'static str = "write";
    const WRITES: bool = true;

    async fn attempt<'c>(&'c self, conn: &'c mut Conn) -> Result<(), Failure> {
        let Conn { client, statements: s, .. } = conn;
        // Dropped before `commit`, the transaction rolls back.
        let tx = client.transaction().await?;
        for guard in &self.guards {
            let key: &[u8] = &guard.key;
            let holds = match &guard.expected {
                // Locks the absent key: the placeholder's uniqueness makes any concurrent
                // writer of the key wait for this transaction (or this one for theirs).
                None => !tx.query(&s.claim_absent, &[&key]).await?.is_empty(),
                Some(_) => {
                    let row = tx.query_opt(&s.lock_row, &[&key]).await?;
                    let current = match &row {
                        Some(row) => Some(row.try_get::<_, &[u8]>(0)?),
                        None => None,
                    };
                    guard.holds(current)
                }
            };
            if !holds {
                return Err(Failure::Conflict(guard.conflict()));
            }
        }
        let plan = &self.plan;
        for (start, end) in &plan.ranges {
            let start: &[u8] = start;
            match end {
                Some(end) => tx.execute(&s.delete_to, &[&start, &&end[..]]).await?,
                None => tx.execute(&s.delete_from, &[&start]).await?,
            };
        }
        if !plan.deletes.is_empty() {
            let keys = slices(&plan.deletes);
            tx.execute(&s.delete_keys, &[&keys]).await?;
        }
        if !plan.keys.is_empty() {
            let (keys, values) = (slices(&plan.keys), slices(&plan.values));
            let params: [&(dyn ToSql + Sync); 2] = [&keys, &values];
            tx.execute(&s.upsert, &params).await?;
        }
        tx.commit().await.map_err(|error| Failure::Postgres { error, committing: true })
    }
}

fn slices(items: &[Bytes]) -> Vec<&[u8]> {
    items.iter().map(|item| &item[..]).collect()
}

/// Creates the table (once per table: concurrent stores on one database take turns), retrying
/// a server that cannot be reached for `retry_for`.
async fn create_table(
    config: &Config,
    table: &Table,
    server: &str,
    retry_for: Duration,
) -> Result<(), StoreError> {
    let deadline = Instant::now() + retry_for;
    let mut backoff = Duration::from_millis(20);
    loop {
        let error = match try_create_table(config, table).await {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        let kind = match judge(&error) {
            Verdict::Fail(kind) => kind,
            _ if Instant::now() + backoff <= deadline => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
                continue;
            }
            _ => StoreErrorKind::Unavailable,
        };
        return Err(StoreError::new(
            kind,
            format!(
                "postgres: cannot open table {} at {server}: {}",
                table.name(),
                describe(&error)
            ),
        )
        .caused_by(error));
    }
}

/// A lock key that serializes the stores' `CREATE TABLE IF NOT EXISTS` on one database
/// (concurrent ones may otherwise both try to create the table's type).
const CREATE_LOCK: i64 = 0x0069_726f_6e62_7573;

async fn try_create_table(config: &Config, table: &Table) -> Result<(), tokio_postgres::Error> {
    let mut client = connect(config).await?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CREATE_LOCK]).await?;
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (key bytea PRIMARY KEY, value bytea NOT NULL)"
    ))
    .await?;
    tx.commit().await?;
    let synchronous = client.query_one("SHOW synchronous_commit", &[]).await?;
    let setting: &str = synchronous.try_get(0)?;
    if setting == "off" {
        tracing::warn!(
            table = table.name(),
            "postgres synchronous_commit is off: a write acknowledged just before a crash of \
             the database server may be lost"
        );
    }
    Ok(())
}

/// The servers of a connection string, as `host:port, …`.
fn servers(config: &Config) -> String {
    let ports = config.get_ports();
    let port = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            Host::Tcp(name) => format!("{name}:{}", port(i)),
            Host::Unix(dir) => format!("{}/.s.PGSQL.{}", dir.display(), port(i)),
        })
        .collect();
    if hosts.is_empty() {
        "the default host".to_owned()
    } else {
        hosts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_on_one_key_are_checked_once_and_contradictions_conflict() {
        let guard = |key: &'static [u8], value: Option<&'static [u8]>| Guard {
            key: Bytes::from_static(key),
            expected: value.map(Bytes::from_static),
        };
        let distinct =
            distinct_guards(vec![guard(b"b", None), guard(b"a", Some(b"1")), guard(b"b", None)])
                .unwrap();
        assert_eq!(distinct, vec![guard(b"a", Some(b"1")), guard(b"b", None)]);
        let contradiction = distinct_guards(vec![guard(b"a", Some(b"1")), guard(b"a", None)]);
        assert_eq!(contradiction.unwrap_err().kind, StoreErrorKind::Conflict);
    }

    #[test]
    fn messages_name_hosts_and_ports_never_the_password() {
        let config: Config =
            "host=a,b port=5433 user=u password=secret dbname=d target_session_attrs=read-write"
                .parse()
                .unwrap();
        assert_eq!(servers(&config), "a:5433, b:5433");
        let config: Config = "postgresql://u:secret@db1:6000,db2:6001/d".parse().unwrap();
        assert_eq!(servers(&config), "db1:6000, db2:6001");
    }
}
