//! Joins, deaths, cut-offs and departures, one at a time.

use std::collections::BTreeSet;
use std::sync::Arc;

use ironbus_core::{Clock, ManualClock, Store};
use ironbus_store_memory::MemoryStore;

use super::harness::{partitions, Call, Cluster, FakeHost, LEASE, RENEW};
use crate::{desired_owner, Config, NodeId, Ownership, PartitionRef};

/// 3 nodes over 10 entities of 30 partitions, converged.
async fn three_nodes() -> Cluster {
    let mut cluster = Cluster::new(3, partitions(1, 10, 30));
    cluster.round().await;
    assert!(cluster.settle(5).await, "3 nodes did not converge in 5 rounds");
    cluster
}

/// The partitions node `i` serves.
fn served_by(cluster: &Cluster, i: usize) -> BTreeSet<PartitionRef> {
    cluster.nodes[i].served().into_keys().collect()
}

#[tokio::test]
async fn three_nodes_converge_on_one_owner_per_partition_spread_evenly() {
    let cluster = three_nodes().await;
    let counts = cluster.counts();
    assert_eq!(counts.iter().sum::<usize>(), 300);
    for count in &counts {
        assert!((70..=130).contains(count), "uneven spread: {counts:?}");
    }
    // Each partition sits with its rendezvous owner, claimed once.
    let ids: Vec<NodeId> = cluster.nodes.iter().map(|n| n.id.clone()).collect();
    for (p, (i, _)) in cluster.owners() {
        assert_eq!(desired_owner(p, &ids), Some(&ids[i]));
    }
    assert_eq!(cluster.claims.lock().unwrap().len(), 300);
}

#[tokio::test]
async fn tokens_strictly_grow_per_partition_across_claims() {
    let mut cluster = Cluster::new(2, partitions(1, 2, 4));
    cluster.round().await;
    assert!(cluster.settle(5).await);
    // The same two node ids leave and come back, again and again: every partition is claimed
    // anew each time.
    for _ in 0..3 {
        for i in 0..2 {
            let id = cluster.nodes[i].id.clone();
            cluster.leave(i).await.unwrap();
            assert!(cluster.settle(5).await);
            let back = cluster.join_as(id);
            cluster.nodes.swap(i, back);
            cluster.nodes.pop();
            assert!(cluster.settle(5).await);
        }
    }
    let claims = cluster.claims.lock().unwrap().clone();
    for p in partitions(1, 2, 4) {
        let tokens: Vec<u64> = claims.iter().filter(|(q, _)| *q == p).map(|(_, t)| *t).collect();
        assert!(tokens.len() >= 3, "{p} claimed only {tokens:?}");
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{p}: {tokens:?}");
        assert_eq!(cluster.fence(p).await, tokens.last().copied());
    }
}

#[tokio::test]
async fn a_killed_nodes_partitions_move_only_after_a_lease_of_observation() {
    let mut cluster = three_nodes().await;
    let orphans = served_by(&cluster, 2);
    let last_round = cluster.now();
    cluster.kill(2);
    let start = cluster.claims.lock().unwrap().len();
    assert!(cluster.settle(12).await, "the others did not take over");
    for i in 0..2 {
        for (at, call) in cluster.calls(i) {
            if let Call::Acquire { p, .. } = call {
                if orphans.contains(&p) {
                    let waited = at.saturating_since(last_round);
                    assert!(waited >= LEASE, "{p} claimed {waited:?} after n2's last renewal");
                }
            }
        }
    }
    assert_eq!(cluster.claims.lock().unwrap().len() - start, orphans.len(), "only n2's moved");
    // The zombie still thinks it serves: the fence has moved past its tokens.
    for (p, token) in cluster.nodes[2].served() {
        assert!(cluster.fence(p).await > Some(token));
    }
}

#[tokio::test]
async fn a_node_cut_off_from_the_store_demotes_itself_and_others_take_over_after_the_lease() {
    let mut cluster = three_nodes().await;
    let orphans = served_by(&cluster, 2);
    let renewed = cluster.now();
    cluster.nodes[2].store.set_unavailable(true);
    let demote_after = cluster.nodes[2].member.as_ref().unwrap().config().demote_after;
    let mut demoted_at = None;
    for _ in 0..12 {
        cluster.step().await;
        if demoted_at.is_none() && cluster.nodes[2].served().is_empty() {
            demoted_at = Some(cluster.now());
            assert!(!cluster.nodes[2].member.as_ref().unwrap().is_active());
        }
    }
    let demoted_at = demoted_at.expect("n2 never demoted");
    assert_eq!(demoted_at.saturating_since(renewed), demote_after, "demoted within demote-after");
    assert!(cluster.converged().await, "the others did not take over");
    for i in 0..2 {
        for (at, call) in cluster.calls(i) {
            if let Call::Acquire { p, .. } = call {
                if orphans.contains(&p) {
                    assert!(at.saturating_since(renewed) >= LEASE, "{p} claimed before the lease");
                    assert!(at > demoted_at, "{p} claimed before n2 stopped serving it");
                }
            }
        }
    }
    // Back in touch: n2 renews, the others see it alive and hand its share back.
    cluster.nodes[2].store.set_unavailable(false);
    cluster.step().await;
    assert!(cluster.nodes[2].member.as_ref().unwrap().is_active());
    assert!(cluster.settle(5).await);
    assert_eq!(served_by(&cluster, 2), orphans, "rendezvous gives n2 the same share back");
}

#[tokio::test]
async fn a_join_moves_about_one_in_n_partitions_without_waiting_for_a_lease() {
    let mut cluster = three_nodes().await;
    let before = cluster.owners();
    let joined_at = cluster.now();
    let joined = cluster.join();
    cluster.round_of(joined).await;
    assert!(cluster.settle(4).await, "not converged within 4 rounds");
    assert!(cluster.now().saturating_since(joined_at) < LEASE, "waited for a lease");
    let after = cluster.owners();
    let moved: Vec<_> = after.iter().filter(|(p, (i, _))| before[p].0 != *i).collect();
    assert!(moved.iter().all(|(_, (i, _))| *i == joined), "moved elsewhere than the new node");
    assert!((50..=100).contains(&moved.len()), "{} of 300 moved", moved.len());
    // Each was released by its owner before the new node acquired it.
    for (p, _) in moved {
        let (old, _) = before[p];
        let released = cluster.calls(old).iter().find_map(|(at, c)| match c {
            Call::Release { p: q } if q == p => Some(*at),
            _ => None,
        });
        let acquired = cluster.calls(joined).iter().find_map(|(at, c)| match c {
            Call::Acquire { p: q, ok: true, .. } if q == p => Some(*at),
            _ => None,
        });
        assert!(released.unwrap() <= acquired.unwrap());
    }
}

#[tokio::test]
async fn leave_hands_everything_over_and_the_others_own_it_without_waiting_for_a_lease() {
    let mut cluster = three_nodes().await;
    let left_at = cluster.now();
    cluster.leave(1).await.unwrap();
    assert!(cluster.nodes[1].served().is_empty());
    assert!(cluster.settle(4).await, "not converged within 4 rounds");
    assert!(cluster.now().saturating_since(left_at) < LEASE, "waited for a lease");
    assert_eq!(cluster.counts().iter().sum::<usize>(), 300);
    let members = cluster.store.scan(b"cm", b"cn", 10).await.unwrap();
    assert_eq!(members.len(), 2, "the leaving node deleted its member row");
}

#[tokio::test]
async fn partitions_created_later_are_claimed_and_deleted_ones_forgotten() {
    let mut cluster = three_nodes().await;
    cluster.partitions.lock().unwrap().extend(partitions(50, 1, 8));
    assert!(cluster.settle(3).await);
    let deleted = partitions(1, 1, 30);
    for p in &deleted {
        cluster.partitions.lock().unwrap().remove(p);
    }
    cluster.step().await;
    assert!(cluster.converged().await);
    let rows = cluster.store.scan(b"co", b"cp", 1000).await.unwrap();
    assert_eq!(rows.len(), 300 - 30 + 8, "the owner rows of deleted partitions are gone");
    assert!(deleted.iter().all(|p| !cluster.owners().contains_key(p)));
}

#[tokio::test]
async fn a_restarted_node_claims_its_share_anew() {
    let mut cluster = three_nodes().await;
    let share = served_by(&cluster, 0);
    cluster.kill(0);
    let again = cluster.join_as(NodeId::new("n0"));
    cluster.round_of(again).await;
    assert!(cluster.settle(4).await, "the restarted node's rows held it up");
    assert_eq!(served_by(&cluster, again), share);
}

#[tokio::test]
async fn the_ownership_task_runs_rounds_on_the_clock_and_leaves_on_request() {
    let clock = ManualClock::default();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let host = Arc::new(FakeHost::alone(store.clone(), clock.clone(), partitions(1, 2, 3)));
    let config = Config::new(NodeId::new("solo"), "solo:1");
    let dyn_clock: Arc<dyn Clock> = Arc::new(clock.clone());
    let ownership = Ownership::start(config, store.clone(), dyn_clock, host.clone()).unwrap();
    for _ in 0..50 {
        if host.state().served.len() == 6 {
            break;
        }
        clock.advance(RENEW / 2);
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }
    assert_eq!(host.state().served.len(), 6, "the task claimed nothing");
    ownership.leave().await.unwrap();
    assert!(host.state().served.is_empty());
    assert!(store.scan(b"cm", b"cn", 10).await.unwrap().is_empty());
    let released = store.scan(b"co", b"cp", 10).await.unwrap();
    assert_eq!(released.len(), 6);
}

#[tokio::test]
async fn claims_made_from_the_same_read_commit_once_whatever_they_claim() {
    use crate::member::claim_batch;
    use crate::rows::OwnerRow;
    use ironbus_core::store::StoreErrorKind;

    let store = MemoryStore::new();
    let [p, q] = [0, 1].map(|i| PartitionRef::new(1, ironbus_core::PartitionId(i)));
    let row = |node: &str| OwnerRow { node: NodeId::new(node), token: 1, released: false }.encode();
    // Two nodes read the same (empty) state and claim with token 1.
    store.write(claim_batch(p, None, None, row("a"), 1)).await.unwrap();
    // b read the row before a's claim and the counter after it.
    let counter = Some(crate::rows::encode_counter(1));
    let same_partition = store.write(claim_batch(p, None, counter, row("b"), 2)).await;
    assert_eq!(same_partition.unwrap_err().kind, StoreErrorKind::Conflict, "the owner row moved");
    let same_token = store.write(claim_batch(q, None, None, row("b"), 1)).await;
    assert_eq!(same_token.unwrap_err().kind, StoreErrorKind::Conflict, "the counter moved");
    assert!(store.get(&crate::keys::owner(q)).await.unwrap().is_none(), "nothing applied");
}

#[tokio::test]
async fn the_member_row_of_a_node_silent_for_ten_leases_is_deleted() {
    let mut cluster = three_nodes().await;
    cluster.kill(2);
    for _ in 0..49 {
        cluster.step().await;
    }
    assert_eq!(cluster.store.scan(b"cm", b"cn", 10).await.unwrap().len(), 3, "deleted early");
    cluster.step().await;
    cluster.step().await;
    assert_eq!(cluster.store.scan(b"cm", b"cn", 10).await.unwrap().len(), 2);
    assert!(cluster.converged().await);
}
