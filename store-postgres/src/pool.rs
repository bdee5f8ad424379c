//! A small pool of connections, each with the store's statements prepared: opened on demand up
//! to a bound, handed back after use, dropped when lost (the next use opens a new one, through
//! the connection string's hosts in turn, so a promoted standby is found).

use std::sync::{Mutex, PoisonError};

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::{Client, Config, NoTls, Statement};

use crate::options::Table;

/// The statements of one store's table, prepared on one connection.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) get: Statement,
    /// `start <= key < end`, ordered, limited.
    pub(crate) scan_to: Statement,
    /// `start <= key`, ordered, limited.
    pub(crate) scan_from: Statement,
    /// A multi-row upsert of two arrays: keys (each once) and values.
    pub(crate) upsert: Statement,
    pub(crate) delete_keys: Statement,
    pub(crate) delete_to: Statement,
    pub(crate) delete_from: Statement,
    /// A present guard row, locked until the transaction ends.
    pub(crate) lock_row: Statement,
    /// An absent guard key, locked by inserting a placeholder row the transaction removes
    /// again: returns a row only if the key was absent.
    pub(crate) claim_absent: Statement,
}

impl Statements {
    async fn prepare(client: &Client, t: &Table) -> Result<Self, tokio_postgres::Error> {
        Ok(Self {
            get: client.prepare(&format!("SELECT value FROM {t} WHERE key = $1")).await?,
            scan_to: client
                .prepare(&format!(
                    "SELECT key, value FROM {t} WHERE key >= $1 AND key < $2 ORDER BY key LIMIT $3"
                ))
                .await?,
            scan_from: client
                .prepare(&format!(
                    "SELECT key, value FROM {t} WHERE key >= $1 ORDER BY key LIMIT $2"
                ))
                .await?,
            upsert: client
                .prepare(&format!(
                    "INSERT INTO {t} (key, value) SELECT * FROM unnest($1::bytea[], $2::bytea[]) \
                     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                ))
                .await?,
            delete_keys: client
                .prepare(&format!("DELETE FROM {t} WHERE key = ANY($1::bytea[])"))
                .await?,
            delete_to: client
                .prepare(&format!("DELETE FROM {t} WHERE key >= $1 AND key < $2"))
                .await?,
            delete_from: client.prepare(&format!("DELETE FROM {t} WHERE key >= $1")).await?,
            lock_row: client
                .prepare(&format!("SELECT value FROM {t} WHERE key = $1 FOR UPDATE"))
                .await?,
            claim_absent: client
                .prepare(&format!(
                    "INSERT INTO {t} (key, value) VALUES ($1, ''::bytea) \
                     ON CONFLICT (key) DO NOTHING RETURNING key"
                ))
                .await?,
        })
    }
}

/// One connection and its statements.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) client: Client,
    pub(crate) statements: Statements,
    pub(crate) backend: Backend,
}

/// The server process of a connection: its pid, and when it started in microseconds since the
/// epoch (a pid alone may be taken again by a later process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backend {
    pub(crate) pid: i32,
    pub(crate) started: i64,
}

/// `backend_start` of `pg_stat_activity` as [`Backend::started`].
pub(crate) const BACKEND_STARTED: &str = "(extract(epoch FROM backend_start) * 1000000)::int8";

impl Backend {
    async fn of(client: &Client) -> Result<Self, tokio_postgres::Error> {
        let row = client
            .query_one(
                &format!(
                    "SELECT pid, {BACKEND_STARTED} FROM pg_stat_activity \
                     WHERE pid = pg_backend_pid()"
                ),
                &[],
            )
            .await?;
        Ok(Self { pid: row.try_get(0)?, started: row.try_get(1)? })
    }
}

/// Opens a connection (tokio-postgres tries the configured hosts in order, honouring
/// `target_session_attrs`) and runs its I/O on a task of its own, which ends when the client
/// is dropped.
pub(crate) async fn connect(config: &Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "postgres connection ended");
        }
    });
    Ok(client)
}

/// At most `size` connections; idle ones wait in a stack (the most recently used first).
#[derive(Debug)]
pub(crate) struct Pool {
    config: Config,
    table: Table,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
}

impl Pool {
    pub(crate) fn new(config: Config, table: Table, size: usize) -> Self {
        Self {
            config,
            table,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(size.clamp(1, Semaphore::MAX_PERMITS)),
        }
    }

    /// An open connection: an idle one, else a new one once fewer than `size` are in use.
    pub(crate) async fn get(&self) -> Result<Lease<'_>, tokio_postgres::Error> {
        // The semaphore is never closed, so `acquire` cannot fail; without a permit the
        // connection is opened all the same rather than failing the call.
        let permit = self.permits.acquire().await.ok();
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            idle.retain(|conn| !conn.client.is_closed());
            idle.pop()
        };
        let conn = match reused {
            Some(conn) => conn,
            None => {
                let client = connect(&self.config).await?;
                let statements = Statements::prepare(&client, &self.table).await?;
                let backend = Backend::of(&client).await?;
                Conn { client, statements, backend }
            }
        };
        Ok(Lease { pool: self, conn, _permit: permit })
    }

    /// Closes every idle connection (those in use close when they come back broken).
    pub(crate) fn clear(&self) {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

/// A connection taken from the pool. [`Lease::release`] hands it back; dropped otherwise, it
/// closes (after an error that leaves its state unknown, or a cancelled call).
#[derive(Debug)]
pub(crate) struct Lease<'a> {
    pool: &'a Pool,
    pub(crate) conn: Conn,
    _permit: Option<SemaphorePermit<'a>>,
}

impl Lease<'_> {
    /// Hands the connection back for the next call, unless it is closed.
    pub(crate) fn release(self) {
        if !self.conn.client.is_closed() {
            self.pool.idle.lock().unwrap_or_else(PoisonError::into_inner).push(self.conn);
        }
    }
}
