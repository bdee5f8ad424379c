//! What the conformance suite cannot show about `PostgresStore`: guards under concurrency
//! (a create-only guard waits for a concurrent uncommitted insert), limits, several stores in
//! one database, and a server that refuses connections, turns read-only and recovers.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ironbus_core::store::{Store, StoreErrorKind, StoreHealth, WriteBatch};
use ironbus_store_postgres::testing::{unique_table, PostgresServer};
use ironbus_store_postgres::{PostgresOptions, PostgresStore, DEFAULT_LIMITS};
use tokio_postgres::NoTls;

async fn open_with(url: &str, options: PostgresOptions) -> PostgresStore {
    PostgresStore::connect(url, options).await.unwrap_or_else(|e| panic!("cannot open: {e}"))
}

async fn open(label: &str) -> PostgresStore {
    open_with(&PostgresServer::shared().url(), PostgresOptions::with_table(unique_table(label)))
        .await
}

/// A plain client on `url`, its connection driven on a task.
async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

fn guarded(key: &'static [u8], expected: Option<&'static [u8]>) -> WriteBatch {
    let mut batch = WriteBatch::new();
    batch.require(key, expected.map(Bytes::from_static));
    batch
}

async fn all(store: &PostgresStore) -> Vec<(Bytes, Bytes)> {
    store.scan(b"", b"", usize::MAX).await.unwrap()
}

fn pairs(items: &[(&'static [u8], &'static [u8])]) -> Vec<(Bytes, Bytes)> {
    items.iter().map(|(k, v)| (Bytes::from_static(k), Bytes::from_static(v))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_apply_on_a_match_and_apply_nothing_otherwise() {
    let store = open("guards").await;
    let mut create = guarded(b"fence", None);
    create.put(&b"fence"[..], &b"1"[..]);
    store.write(create.clone()).await.unwrap();
    let again = store.write(create).await.unwrap_err();
    assert_eq!(again.kind, StoreErrorKind::Conflict, "create-only on a present key");

    let mut matching = guarded(b"fence", Some(b"1"));
    matching.put(&b"data"[..], &b"a"[..]);
    store.write(matching).await.unwrap();
    let mut stale = guarded(b"fence", Some(b"0"));
    stale.put(&b"data"[..], &b"stale"[..]);
    stale.delete(&b"fence"[..]);
    assert_eq!(store.write(stale).await.unwrap_err().kind, StoreErrorKind::Conflict);
    assert_eq!(all(&store).await, pairs(&[(b"data", b"a"), (b"fence", b"1")]));

    // A guard-only batch on an absent key leaves no placeholder behind.
    store.write(guarded(b"nothing", None)).await.unwrap();
    let mut batch = guarded(b"gone", None);
    batch.put(&b"gone"[..], &b"x"[..]);
    batch.delete_range(&b"g"[..], &b"h"[..]);
    store.write(batch).await.unwrap();
    assert_eq!(all(&store).await, pairs(&[(b"data", b"a"), (b"fence", b"1")]));

    // A guard on a deleted key fails; an empty value is not an absent key.
    let mut delete = WriteBatch::new();
    delete.delete(&b"data"[..]);
    delete.put(&b"empty"[..], &b""[..]);
    store.write(delete).await.unwrap();
    let err = store.write(guarded(b"data", Some(b"a"))).await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Conflict);
    store.write(guarded(b"empty", Some(b""))).await.unwrap();
    assert_eq!(
        store.write(guarded(b"empty", None)).await.unwrap_err().kind,
        StoreErrorKind::Conflict
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_concurrent_create_only_writers_exactly_one_wins() {
    let store = Arc::new(open("race").await);
    let mut tasks = tokio::task::JoinSet::new();
    for round in 0..20u32 {
        for writer in 0..8u32 {
            let store = Arc::clone(&store);
            tasks.spawn(async move {
                let key = format!("owner/{round}");
                let mut batch = WriteBatch::new();
                batch.require(key.clone(), None);
                batch.put(key, writer.to_string());
                batch.put(format!("won/{round}/{writer}"), "");
                store.write(batch).await.map(|()| (round, writer))
            });
        }
    }
    let mut winners = std::collections::BTreeMap::new();
    while let Some(joined) = tasks.join_next().await {
        match joined.unwrap() {
            Ok((round, writer)) => {
                assert!(winners.insert(round, writer).is_none(), "two winners in round {round}");
            }
            Err(e) => assert_eq!(e.kind, StoreErrorKind::Conflict, "{e}"),
        }
    }
    assert_eq!(winners.len(), 20);
    for (round, writer) in winners {
        let owner = store.get(format!("owner/{round}").as_bytes()).await.unwrap();
        assert_eq!(owner, Some(Bytes::from(writer.to_string())));
        let (start, end) = (format!("won/{round}/"), format!("won/{round}0"));
        let won = store.scan(start.as_bytes(), end.as_bytes(), 10).await.unwrap();
        assert_eq!(won.len(), 1, "round {round}: only the winner's puts landed");
    }
}

/// The absent key's placeholder makes a create-only guard wait for a concurrent transaction
/// that inserted the key, and then fail: the guard sees it although it was uncommitted when
/// the batch started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_only_guard_waits_for_an_uncommitted_insert_of_its_key() {
    let server = PostgresServer::shared();
    let store = Arc::new(open("uncommitted").await);
    let mut other = client(&server.url()).await;
    let tx = other.transaction().await.unwrap();
    let sql = format!("INSERT INTO {} (key, value) VALUES ($1, $2)", store.table());
    tx.execute(&sql, &[&&b"k"[..], &&b"theirs"[..]]).await.unwrap();
    let writer = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut batch = guarded(b"k", None);
            batch.put(&b"k"[..], &b"ours"[..]);
            store.write(batch).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "the guarded write waits for the other transaction");
    tx.commit().await.unwrap();
    let result = writer.await.unwrap();
    assert_eq!(result.unwrap_err().kind, StoreErrorKind::Conflict);
    assert_eq!(store.get(b"k").await.unwrap(), Some(Bytes::from_static(b"theirs")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_the_limits_is_refused_and_applies_nothing() {
    let store = open("limits").await;
    assert_eq!(store.limits(), DEFAULT_LIMITS);
    let mut batch = WriteBatch::new();
    for i in 0..=DEFAULT_LIMITS.max_ops {
        batch.put(format!("k/{i:05}"), "v");
    }
    assert_eq!(store.write(batch).await.unwrap_err().kind, StoreErrorKind::InvalidInput);
    let mut batch = WriteBatch::new();
    batch.put(&b"big"[..], vec![0u8; DEFAULT_LIMITS.max_bytes]);
    assert_eq!(store.write(batch).await.unwrap_err().kind, StoreErrorKind::InvalidInput);
    assert!(all(&store).await.is_empty());
    // At the limit, it lands.
    let mut batch = WriteBatch::new();
    for i in 0..DEFAULT_LIMITS.max_ops {
        batch.put(format!("k/{i:05}"), "v");
    }
    store.write(batch).await.unwrap();
    assert_eq!(all(&store).await.len(), DEFAULT_LIMITS.max_ops);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_on_one_database_keep_to_their_tables() {
    let (a, b) = (open("shared").await, open("shared").await);
    let mut batch = WriteBatch::new();
    batch.put(&b"k"[..], &b"a"[..]);
    a.write(batch).await.unwrap();
    assert_eq!(b.get(b"k").await.unwrap(), None);
    assert!(all(&b).await.is_empty());
    let url = PostgresServer::shared().url();
    let bad = PostgresStore::connect(&url, PostgresOptions::with_table("x; DROP TABLE y")).await;
    assert_eq!(bad.unwrap_err().kind, StoreErrorKind::InvalidInput);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_unavailable_and_the_next_host_is_tried() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let options = PostgresOptions {
        retry_for: Duration::from_millis(300),
        ..PostgresOptions::with_table(unique_table("unreachable"))
    };
    let url = format!("host=127.0.0.1 port={dead} user=ironbus dbname=postgres");
    let err = PostgresStore::connect(&url, options.clone()).await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Unavailable);
    assert!(err.message.contains(&format!("127.0.0.1:{dead}")), "{err}");

    let live = PostgresServer::shared().port();
    let url = format!(
        "host=127.0.0.1,127.0.0.1 port={dead},{live} user=ironbus dbname=postgres \
         target_session_attrs=read-write"
    );
    let store = open_with(&url, options).await;
    store.write(guarded(b"k", None)).await.unwrap();
}

/// Read-only (a standby, say): writes retry on new connections, then fail `Unavailable` and
/// the store reports itself unavailable, until a write succeeds again. A wrong database is
/// refused at once, not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_server_makes_writes_unavailable_until_it_takes_writes_again() {
    let server = PostgresServer::shared();
    let admin = client(&server.url()).await;
    let database = unique_table("readonly");
    admin.batch_execute(&format!("CREATE DATABASE {database}")).await.unwrap();
    let url = format!("host=127.0.0.1 port={} user=ironbus dbname={database}", server.port());
    let options = PostgresOptions {
        retry_for: Duration::from_millis(500),
        ..PostgresOptions::with_table("data")
    };
    let store = open_with(&url, options.clone()).await;
    let mut batch = WriteBatch::new();
    batch.put(&b"k"[..], &b"1"[..]);
    store.write(batch.clone()).await.unwrap();

    let kick = format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = '{database}' AND pid <> pg_backend_pid()"
    );
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {database} SET default_transaction_read_only = on; {kick}"
        ))
        .await
        .unwrap();
    let err = store.write(batch.clone()).await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");
    assert!(err.message.contains("read-only"), "{err}");
    assert_eq!(store.health(), StoreHealth::Unavailable);
    assert_eq!(store.get(b"k").await.unwrap(), Some(Bytes::from_static(b"1")), "reads still work");

    admin
        .batch_execute(&format!("ALTER DATABASE {database} RESET default_transaction_read_only"))
        .await
        .unwrap();
    let mut batch = WriteBatch::new();
    batch.put(&b"k"[..], &b"2"[..]);
    store.write(batch).await.unwrap();
    assert_eq!(store.health(), StoreHealth::Healthy);
    assert_eq!(store.get(b"k").await.unwrap(), Some(Bytes::from_static(b"2")));

    let url = format!("host=127.0.0.1 port={} user=ironbus dbname=no_such_db", server.port());
    let err = PostgresStore::connect(&url, options).await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Other, "{err}");
}

/// A server that goes away: calls fail `Unavailable` after `retry_for`, never hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_makes_the_store_unavailable() {
    let server = PostgresServer::start();
    let options = PostgresOptions {
        retry_for: Duration::from_millis(300),
        ..PostgresOptions::with_table("data")
    };
    let store = open_with(&server.url(), options).await;
    store.write(guarded(b"k", None)).await.unwrap();
    server.stop();
    let err = store.write(guarded(b"k", None)).await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");
    assert_eq!(store.health(), StoreHealth::Unavailable);
    assert_eq!(store.get(b"k").await.unwrap_err().kind, StoreErrorKind::Unavailable);
}

/// A store opened while another transaction writes its table (a killed predecessor's commit
/// still under way, here a transaction held open) returns only once that transaction ended,
/// and then reads what it wrote; it keeps waiting past one lock wait (5 s), which it reports.
/// Without `wait_for_writers` (a fenced cluster's store) it opens at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_waits_for_transactions_still_writing_the_table() {
    let server = PostgresServer::shared();
    let table = unique_table("writers");
    drop(open_with(&server.url(), PostgresOptions::with_table(table.clone())).await);
    let mut writer = client(&server.url()).await;
    let insert = format!("INSERT INTO \"{table}\" VALUES ($1, $2)");

    let tx = writer.transaction().await.unwrap();
    tx.execute(&insert, &[&&b"k"[..], &&b"v"[..]]).await.unwrap();
    let url = server.url();
    let options = PostgresOptions::with_table(table.clone());
    let opening = tokio::spawn(async move { PostgresStore::connect(&url, options).await });
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!opening.is_finished(), "opened while a transaction was writing its table");
    tx.commit().await.unwrap();
    let store = tokio::time::timeout(Duration::from_secs(10), opening)
        .await
        .expect("opens once the writer committed")
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot open: {e}"));
    assert_eq!(store.get(b"k").await.unwrap(), Some(Bytes::from_static(b"v")));

    let tx = writer.transaction().await.unwrap();
    tx.execute(&insert, &[&&b"k2"[..], &&b"v"[..]]).await.unwrap();
    let options = PostgresOptions { wait_for_writers: false, ..PostgresOptions::with_table(table) };
    let fenced = tokio::time::timeout(Duration::from_secs(10), open_with(&server.url(), options))
        .await
        .expect("a store that does not wait opens beside an open transaction");
    assert_eq!(fenced.get(b"k2").await.unwrap(), None, "not committed yet");
    tx.rollback().await.unwrap();
}

/// A write whose `COMMIT` hangs (here: waiting for a synchronous standby that never connects)
/// is abandoned and fails `Unavailable`, its outcome unknown. The store's next call first ends
/// that write's backend, so a read after the failure shows the write's fate (committed
/// locally), never a commit that lands after the read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_a_write_in_doubt_comes_after_its_fate() {
    let server = PostgresServer::start();
    let options = PostgresOptions {
        retry_for: Duration::from_millis(300),
        attempt_timeout: Duration::from_secs(1),
        ..PostgresOptions::with_table("data")
    };
    let store = open_with(&server.url(), options).await;
    let put = |value: &'static [u8]| {
        let mut batch = WriteBatch::new();
        batch.put(&b"k"[..], value);
        batch
    };
    store.write(put(b"1")).await.unwrap();

    server.psql("ALTER SYSTEM SET synchronous_standby_names = 'nobody'").unwrap();
    server.psql("SELECT pg_reload_conf()").unwrap();
    let other = client(&server.url()).await;
    while other.query_one("SHOW synchronous_standby_names", &[]).await.unwrap().get::<_, &str>(0)
        != "nobody"
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let err = store.write(put(b"2")).await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");
    let seen = other.query_one("SELECT value FROM data WHERE key = 'k'", &[]).await.unwrap();
    assert_eq!(seen.get::<_, &[u8]>(0), b"1", "the commit still waits for the standby");

    assert_eq!(store.get(b"k").await.unwrap(), Some(Bytes::from_static(b"2")));
    let seen = other.query_one("SELECT value FROM data WHERE key = 'k'", &[]).await.unwrap();
    assert_eq!(seen.get::<_, &[u8]>(0), b"2");
    server.psql("ALTER SYSTEM RESET synchronous_standby_names").unwrap();
    server.psql("SELECT pg_reload_conf()").unwrap();
}
