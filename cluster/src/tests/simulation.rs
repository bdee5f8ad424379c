//! A seeded simulation: random schedules of rounds, pauses, kills, store outages, joins,
//! departures and entity changes, with the safety invariants checked after every round and
//! convergence checked once the faults stop.
//!
//! `IRONBUS_CLUSTER_SEEDS=n` runs seeds `0..n` (default 24); `IRONBUS_CLUSTER_SEED=s` runs
//! seed `s` alone (a failure prints its seed).

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::harness::{partitions, Cluster, RENEW};

const STEPS: usize = 250;
const MAX_NODES: usize = 7;

/// Prints the seed of a run that panics.
struct Seed(u64);

impl Drop for Seed {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the simulation failed with IRONBUS_CLUSTER_SEED={}", self.0);
        }
    }
}

fn seeds() -> Vec<u64> {
    let var = |name| std::env::var(name).ok().and_then(|v: String| v.parse::<u64>().ok());
    match (var("IRONBUS_CLUSTER_SEED"), var("IRONBUS_CLUSTER_SEEDS")) {
        (Some(seed), _) => vec![seed],
        (None, count) => (0..count.unwrap_or(24)).collect(),
    }
}

#[tokio::test]
async fn random_schedules_keep_one_owner_per_token_and_converge_once_faults_stop() {
    for seed in seeds() {
        let _seed = Seed(seed);
        simulate(seed).await;
    }
}

async fn simulate(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut cluster = Cluster::new(3, partitions(1, 4, 4));
    // Steps of store outage left per node.
    let mut outages = vec![0usize; 3];
    let mut next_entity = 10;
    for _ in 0..STEPS {
        let driven: Vec<usize> =
            (0..cluster.nodes.len()).filter(|i| cluster.nodes[*i].driven()).collect();
        match rng.gen_range(0..100) {
            0..=2 if driven.len() > 1 => cluster.kill(*driven.choose(&mut rng).unwrap()),
            3..=5 if driven.len() > 1 => {
                // A failing store may fail the leave: the others then wait out the lease.
                let _ = cluster.leave(*driven.choose(&mut rng).unwrap()).await;
            }
            6..=8 if cluster.nodes.len() < MAX_NODES => {
                cluster.join();
                outages.push(0);
            }
            9..=13 => outages[*driven.choose(&mut rng).unwrap()] = rng.gen_range(1..10),
            14..=17 => {
                let i = *driven.choose(&mut rng).unwrap();
                cluster.nodes[i].store.fail_next_writes(rng.gen_range(1..4));
            }
            18..=19 => {
                cluster.partitions.lock().unwrap().extend(partitions(next_entity, 1, 3));
                next_entity += 1;
            }
            20 => {
                let mut all = cluster.partitions.lock().unwrap();
                if let Some(entity) = all.iter().next().map(|p| p.entity) {
                    all.retain(|p| p.entity != entity);
                }
            }
            _ => {}
        }
        for (i, left) in outages.iter_mut().enumerate() {
            cluster.nodes[i].store.set_unavailable(*left > 0);
            *left = left.saturating_sub(1);
        }
        // Mostly a renew interval; now and then everyone stalls a little.
        let by = match rng.gen_range(0..10) {
            0 => RENEW * 2,
            1 => RENEW / 2,
            _ => RENEW,
        };
        cluster.clock.advance(by);
        let mut order: Vec<usize> = (0..cluster.nodes.len()).collect();
        order.shuffle(&mut rng);
        for i in order {
            // A node now and then misses a round (a pause), rarely several in a row.
            if rng.gen_bool(0.9) {
                cluster.round_of(i).await;
            }
        }
    }
    for node in &cluster.nodes {
        node.store.heal_all();
    }
    let converged = cluster.settle(20).await;
    assert!(converged, "seed {seed}: no convergence 20 rounds after the faults stopped");
}
