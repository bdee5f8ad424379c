//! `cargo xtask compat --cluster`: the suites against three ironbus nodes on one throwaway
//! PostgreSQL (the nodes of `cargo xtask cluster`, [`Nodes`]), every node with the suites'
//! config.json and `--testing-fault-injection`, and each kind of client on a different node:
//! AMQP on the first, the admin API (HTTPS) and the REST data plane (plain HTTP) on the second,
//! AMQP over TLS on the third. Every TLS listener serves the first node's development
//! certificate, so the suites trust one CA.
//!
//! No test is left out: the two that read one server's plain HTTP port (a fault injected, the
//! metrics moved) use every node's (`IRONBUS_HTTP_URLS`).
//!
//! Before the suites start, every node must agree on where every partition runs, every
//! partition must be available and every node must run some: partitions that move while a test
//! runs would test the hand-over, which `cargo xtask cluster` does, not the SDKs.

use std::{
    collections::BTreeMap,
    path::Path,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};

use super::{
    admin_connection_string, connection_string, tls_connection_string, Serving, Target, FAULT_FLAGS,
};
use crate::cluster::{Nodes, Placement};
use crate::postgres::Database;

/// The nodes of the cluster.
const NODES: usize = 3;
/// Their `--lease-ms`: the cluster's default.
const LEASE_MS: u64 = 5000;
/// How long a node may take to answer `/health` with 200 after its start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the nodes may take to agree on a placement that gives each some partitions.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long that placement must stay the same before the suites start.
const STABLE_FOR: Duration = Duration::from_secs(2);

/// Starts the nodes on `database`, waits until their placement settled and says where the
/// suites find them.
pub(super) fn start(
    binary: &Path,
    config: &Path,
    work: &Path,
    database: &Database,
) -> Result<(Serving, Target)> {
    let mut nodes = Nodes::new(binary, config, work, database.url(), LEASE_MS, true);
    nodes.serve_tls();
    nodes.add_args(FAULT_FLAGS);
    for _ in 0..NODES {
        nodes.add()?;
    }
    // The first node generates the certificate the others serve: it starts alone.
    nodes.start(0)?;
    nodes.wait_ready(0, READY_TIMEOUT)?;
    for index in 1..NODES {
        nodes.start(index)?;
    }
    for index in 1..NODES {
        nodes.wait_ready(index, READY_TIMEOUT)?;
    }
    let took = settle(&mut nodes)?;
    let tls = |index| nodes.tls(index).expect("the nodes serve TLS");
    let http = |index| format!("http://{}", nodes.http(index));
    let target = Target {
        connection_string: connection_string(nodes.amqp(0).port()),
        admin_connection_string: admin_connection_string(tls(1).1.port()),
        tls_connection_string: tls_connection_string(tls(2).0.port()),
        http_url: http(1),
        http_urls: (0..NODES).map(http).collect(),
        ca_cert: nodes.tls_dir().join("ca.pem"),
        // A cluster serves one namespace.
        namespaces_on_demand: false,
    };
    eprintln!(
        "xtask: {NODES} nodes settled after {:.1} s: AMQP on {} ({}), HTTPS and HTTP on {} ({}, \
         {}), AMQPS on {} ({}); logs under {}",
        took.as_secs_f64(),
        nodes.name(0),
        nodes.amqp(0),
        nodes.name(1),
        tls(1).1,
        nodes.http(1),
        nodes.name(2),
        tls(2).0,
        work.display()
    );
    Ok((Serving::Cluster(nodes), target))
}

/// Waits until every node reports the same placement, every partition available, every node
/// running some, unchanged for [`STABLE_FOR`]; returns how long that took.
fn settle(nodes: &mut Nodes) -> Result<Duration> {
    let started = Instant::now();
    let mut stable: Option<(BTreeMap<String, Placement>, Instant)> = None;
    loop {
        nodes.check_running()?;
        let names: Vec<String> = (0..nodes.len()).map(|i| nodes.name(i).to_owned()).collect();
        let settled = nodes.agreed().filter(|placements| {
            placements.values().all(Placement::settled)
                && names.iter().all(|name| placements.values().any(|p| !p.of(name).is_empty()))
        });
        stable = match (settled, stable) {
            (Some(now), Some((before, since))) if now == before => {
                if since.elapsed() >= STABLE_FOR {
                    return Ok(started.elapsed());
                }
                Some((before, since))
            }
            (Some(now), _) => Some((now, Instant::now())),
            (None, _) => None,
        };
        if started.elapsed() > SETTLE_TIMEOUT {
            bail!(
                "the {NODES} nodes did not agree on a stable placement giving each partitions \
                 within {SETTLE_TIMEOUT:?}"
            );
        }
        thread::sleep(Duration::from_millis(200));
    }
}
