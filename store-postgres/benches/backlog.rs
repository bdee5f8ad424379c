//! A large backlog on PostgreSQL: how much memory a queued message costs, how long a restart
//! takes to recover the backlog, and how fast the backlog drains with bodies read back from
//! the database.
//!
//! `cargo xtask bench backlog --store postgres [--messages N] [--size BYTES] [--partitions N] [--body-cache-mb N] [--stores N] [--set NAME=VALUE]`
//!
//! The steps (fill, recover, drain, each one JSON line) are the core's, shared with the other
//! stores: [`ironbus_core::testing::backlog`]. This file starts a throwaway PostgreSQL (the
//! tests' harness, [`PostgresServer`]), creates a fresh database in it, opens `--stores` tables
//! there as the server does (`ironbus_store_<i>`) and counts the heap. `--set NAME=VALUE` changes
//! a server setting for the run. A last line reports the settings that matter for the figures
//! and the WAL the run wrote (the fill's inserts and the drain's deletes).

#![allow(clippy::print_stdout, reason = "the benchmark reports on stdout")]

use std::sync::Arc;

use cap::Cap;
use clap::Parser;
use ironbus_core::testing::backlog::{self, BacklogOptions};
use ironbus_core::Store;
use ironbus_store_postgres::testing::{PostgresServer, USER};
use ironbus_store_postgres::{PostgresOptions, PostgresStore};

#[global_allocator]
static ALLOCATOR: Cap<std::alloc::System> = Cap::new(std::alloc::System, usize::MAX);

/// The database the benchmark creates in its server.
const DATABASE: &str = "backlog";

/// A large backlog on PostgreSQL: memory per message, recovery time, drain rate.
#[derive(Debug, Parser)]
struct Options {
    #[command(flatten)]
    backlog: BacklogOptions,
    /// Tables (stores) the queue's partitions are spread over; useful with `--partitions`.
    #[arg(long, default_value_t = 1)]
    stores: usize,
    /// A server setting for the run (`ALTER SYSTEM`, then a reload: only settings a reload
    /// changes, such as `max_wal_size=8GB` or `synchronous_commit=off`); repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = setting)]
    settings: Vec<(String, String)>,
}

/// Settings the last line reports, besides those of `--set`.
const REPORTED: [&str; 4] =
    ["server_version", "shared_buffers", "synchronous_commit", "max_wal_size"];

fn main() {
    let o = Options::parse();
    let server = PostgresServer::start();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let admin = connect(&server.url()).await;
        admin.batch_execute(&format!("CREATE DATABASE {DATABASE}")).await.expect("create");
        for (name, value) in &o.settings {
            let value = value.replace('\'', "''");
            admin
                .batch_execute(&format!("ALTER SYSTEM SET {name} = '{value}'"))
                .await
                .expect("set");
        }
        admin.batch_execute("SELECT pg_reload_conf()").await.expect("reload");
        let url = format!("host=127.0.0.1 port={} user={USER} dbname={DATABASE}", server.port());
        let open = || async {
            let mut stores: Vec<Arc<dyn Store>> = Vec::with_capacity(o.stores);
            for i in 0..o.stores {
                let options = PostgresOptions::with_table(format!("ironbus_store_{i}"));
                let store = PostgresStore::connect(&url, options).await.expect("open the store");
                stores.push(Arc::new(store));
            }
            stores
        };
        let wal_before = wal_bytes(&admin).await;
        backlog::run(&o.backlog, open, || ALLOCATOR.allocated(), &mut std::io::stdout()).await;
        let wal = wal_bytes(&admin).await - wal_before;
        let mut settings = serde_json::Map::new();
        settings.insert("step".to_owned(), "postgres".into());
        let set = o.settings.iter().map(|(name, _)| name.as_str());
        for name in REPORTED.into_iter().chain(set) {
            let row = admin.query_one(&format!("SHOW {name}"), &[]).await.expect("show");
            settings.insert(name.to_owned(), row.get::<_, String>(0).into());
        }
        settings.insert("stores".to_owned(), o.stores.into());
        settings.insert("wal_bytes".to_owned(), wal.into());
        println!("{}", serde_json::Value::Object(settings));
    });
    server.stop();
}

/// `NAME=VALUE`, with a plain setting name (lowercase letters, digits, `_`).
fn setting(text: &str) -> Result<(String, String), String> {
    let (name, value) = text.split_once('=').ok_or("expected NAME=VALUE")?;
    if name.is_empty()
        || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(format!("{name:?} is not a setting's name"));
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// A connection for the benchmark's own statements, driven on the runtime.
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// The server's WAL position, in bytes since its start.
async fn wal_bytes(client: &tokio_postgres::Client) -> i64 {
    let row = client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])
        .await
        .expect("wal position");
    row.get(0)
}
