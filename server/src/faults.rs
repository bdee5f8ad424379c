//! Testing only, behind the cargo feature `fault-injection` (which `cargo xtask compat` builds
//! with; a default build has neither this module nor core's `FaultyStore`):
//! `--testing-fault-injection` wraps every store in a [`FaultyStore`] and serves
//! `POST /$ironbus/faults?entity=..&partition=..&available=..` on the plain HTTP listener, so
//! the compat suites can make one partition of a queue unavailable and heal it again.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use ironbus_core::testing::{partition_key_prefix, FaultyStore};
use ironbus_core::types::PartitionId;
use ironbus_core::{Broker, Store};

/// Where the endpoint is served.
pub const PATH: &str = "/$ironbus/faults";

/// The fault injectors around the broker's stores.
#[derive(Debug, Clone)]
pub struct FaultInjection {
    stores: Vec<Arc<FaultyStore>>,
}

impl FaultInjection {
    /// Wraps every store in a fault injector; the broker is to be opened on the stores
    /// returned.
    pub fn wrap(stores: Vec<Arc<dyn Store>>) -> (Vec<Arc<dyn Store>>, FaultInjection) {
        tracing::warn!("testing fault injection is on: never use this in production");
        let faulty: Vec<Arc<FaultyStore>> =
            stores.into_iter().map(|store| Arc::new(FaultyStore::new(store))).collect();
        let wrapped = faulty.iter().map(|f| f.clone() as Arc<dyn Store>).collect();
        (wrapped, FaultInjection { stores: faulty })
    }

    /// Makes one partition of the queue or topic `entity` unavailable (`available` false) or
    /// available again.
    pub fn set_available(
        &self,
        broker: &Broker,
        entity: &str,
        partition: PartitionId,
        available: bool,
    ) -> ironbus_core::Result<()> {
        let prefix = partition_key_prefix(broker, entity, partition)?;
        // Only the partition's own store holds keys under its prefix; the others ignore it.
        for store in &self.stores {
            if available {
                store.heal_prefix(&prefix);
            } else {
                store.fail_prefix(prefix.to_vec());
            }
        }
        tracing::warn!(entity, %partition, available, "testing fault injection");
        Ok(())
    }

    /// The endpoint, for `HttpConfig::plain_routes`.
    pub fn routes(self, broker: Broker) -> axum::Router {
        axum::Router::new().route(PATH, axum::routing::post(fault)).with_state((self, broker))
    }
}

#[derive(Debug, serde::Deserialize)]
struct Fault {
    entity: String,
    partition: u16,
    available: bool,
}

async fn fault(
    State((faults, broker)): State<(FaultInjection, Broker)>,
    Query(fault): Query<Fault>,
) -> Response {
    let Fault { entity, partition, available } = fault;
    match faults.set_available(&broker, &entity, PartitionId(partition), available) {
        Ok(()) => {
            let body = serde_json::json!({
                "entity": entity,
                "partition": partition,
                "available": available,
            });
            ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}
