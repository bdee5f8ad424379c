//! The whole store conformance suite against `PostgresStore` on a real PostgreSQL that the
//! tests start (`ironbus_store_postgres::testing`), durability cases included: "reopening" a
//! store opens a new `PostgresStore` on the same table.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;

use ironbus_store_postgres::testing::{unique_table, PostgresServer};
use ironbus_store_postgres::{PostgresOptions, PostgresStore};

async fn open(table: String) -> Arc<PostgresStore> {
    let server = PostgresServer::shared();
    let store = PostgresStore::connect(&server.url(), PostgresOptions::with_table(table)).await;
    Arc::new(store.unwrap_or_else(|e| panic!("cannot open the store: {e}")))
}

/// The table of a durability case's directory: the same directory, the same table.
fn table_of(dir: &Path) -> String {
    let mut hasher = DefaultHasher::new();
    dir.hash(&mut hasher);
    format!("durable_{:016x}", hasher.finish())
}

ironbus_core::store_conformance_suite!(
    postgres,
    || open(unique_table("conformance")),
    durable: |dir: std::path::PathBuf| open(table_of(&dir)),
);
