//! The rules of a round, case by case.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ironbus_core::{PartitionId, Timestamp};

use super::{decide, route, Action, Inputs, Owner};
use crate::config::NodeId;
use crate::host::{PartitionRef, Route};
use crate::liveness::{Liveness, Membership};
use crate::rendezvous::desired_owner;
use crate::rows::{MemberRow, OwnerRow};

fn node(name: &str) -> NodeId {
    NodeId::new(name)
}

/// Nodes `a` and `b` alive, `dead` watched silent for a whole lease, `gone` leaving.
fn membership() -> Membership {
    let rows = |beat: u64| {
        ["a", "b", "dead", "gone"]
            .map(|name| {
                let row = MemberRow {
                    heartbeat: if name == "dead" { 0 } else { beat },
                    lease: Duration::from_secs(5),
                    leaving: name == "gone",
                    link_addr: format!("{name}:1"),
                };
                let raw = row.encode();
                (node(name), row, raw)
            })
            .to_vec()
    };
    let mut liveness = Liveness::default();
    liveness.observe(rows(1), Timestamp::from_millis(0));
    liveness.observe(rows(2), Timestamp::from_millis(5000))
}

/// A partition whose desired owner among `a` and `b` is `owner`.
fn partition_of(owner: &str) -> PartitionRef {
    let candidates = [node("a"), node("b")];
    (0..)
        .map(|i| PartitionRef::new(1, PartitionId(i)))
        .find(|p| desired_owner(*p, &candidates) == Some(&node(owner)))
        .unwrap()
}

fn owner(name: &str, token: u64, released: bool) -> Owner {
    let row = OwnerRow { node: node(name), token, released };
    Owner { raw: row.encode(), row: Some(row) }
}

/// What node `a` decides about `p`.
struct Case {
    p: PartitionRef,
    exists: bool,
    row: Option<Owner>,
    serving: Option<u64>,
    active: bool,
    leaving: bool,
}

impl Case {
    fn new(p: PartitionRef) -> Case {
        Case { p, exists: true, row: None, serving: None, active: true, leaving: false }
    }

    fn row(self, name: &str, token: u64, released: bool) -> Case {
        Case { row: Some(owner(name, token, released)), ..self }
    }

    fn serving(self, token: u64) -> Case {
        Case { serving: Some(token), ..self }
    }

    fn decide(&self) -> Vec<Action> {
        let partitions: BTreeSet<_> = self.exists.then_some(self.p).into_iter().collect();
        let owners: BTreeMap<_, _> = self.row.clone().map(|o| (self.p, o)).into_iter().collect();
        let serving: BTreeMap<_, _> = self.serving.map(|t| (self.p, t)).into_iter().collect();
        let membership = membership();
        decide(&Inputs {
            me: &node("a"),
            active: self.active,
            leaving: self.leaving,
            partitions: &partitions,
            owners: &owners,
            membership: &membership,
            candidates: &[node("a"), node("b")],
            serving: &serving,
        })
    }
}

#[test]
fn a_served_partition_stays_while_the_row_holds_and_this_node_is_desired() {
    let p = partition_of("a");
    assert_eq!(Case::new(p).row("a", 4, false).serving(4).decide(), []);
}

#[test]
fn a_served_partition_whose_row_moved_on_is_dropped_without_writing() {
    let p = partition_of("a");
    assert_eq!(Case::new(p).row("b", 9, false).serving(4).decide(), [Action::Drop(p)]);
    assert_eq!(Case::new(p).row("a", 4, true).serving(4).decide(), [Action::Drop(p)]);
    assert_eq!(Case::new(p).serving(4).decide(), [Action::Drop(p)], "the row was deleted");
}

#[test]
fn a_served_partition_is_handed_over_to_a_live_desired_owner_or_when_leaving() {
    let p = partition_of("b");
    assert_eq!(Case::new(p).row("a", 4, false).serving(4).decide(), [Action::HandOver(p)]);
    let mine = partition_of("a");
    let leaving = Case { leaving: true, active: false, ..Case::new(mine) };
    assert_eq!(leaving.row("a", 4, false).serving(4).decide(), [Action::HandOver(mine)]);
}

#[test]
fn a_served_partition_that_no_longer_exists_is_retired() {
    let case = Case { exists: false, ..Case::new(partition_of("a")) };
    assert_eq!(case.row("a", 4, false).serving(4).decide(), [Action::Retire(partition_of("a"))]);
}

#[test]
fn the_desired_owner_claims_an_absent_released_or_dead_owners_row_only_while_active() {
    let p = partition_of("a");
    assert_eq!(Case::new(p).decide(), [Action::Claim(p)]);
    assert_eq!(Case::new(p).row("b", 3, true).decide(), [Action::Claim(p)]);
    assert_eq!(Case::new(p).row("dead", 3, false).decide(), [Action::Claim(p)]);
    assert_eq!(Case::new(p).row("nobody", 3, false).decide(), [Action::Claim(p)]);
    assert_eq!(Case::new(p).row("b", 3, false).decide(), [], "b is alive and holds it");
    assert_eq!(Case::new(p).row("gone", 3, false).decide(), [], "a leaving node still holds");
    assert_eq!(Case { active: false, ..Case::new(p) }.decide(), []);
    assert_eq!(Case::new(partition_of("b")).decide(), [], "not desired");
    let garbled = Owner { row: None, raw: bytes::Bytes::from_static(b"?") };
    assert_eq!(Case { row: Some(garbled), ..Case::new(p) }.decide(), [Action::Claim(p)]);
}

#[test]
fn a_row_of_this_node_it_does_not_serve_is_claimed_anew_or_released() {
    let p = partition_of("a");
    assert_eq!(Case::new(p).row("a", 3, false).decide(), [Action::Claim(p)]);
    let q = partition_of("b");
    assert_eq!(Case::new(q).row("a", 3, false).decide(), [Action::Release(q)]);
    let demoted = Case { active: false, ..Case::new(p) };
    assert_eq!(demoted.row("a", 3, false).decide(), [], "a demoted node writes nothing");
}

#[test]
fn rows_of_partitions_that_no_longer_exist_are_forgotten_unless_a_live_owner_holds_them() {
    let p = partition_of("a");
    let gone = || Case { exists: false, ..Case::new(p) };
    assert_eq!(gone().row("b", 3, true).decide(), [Action::Forget(p)]);
    assert_eq!(gone().row("dead", 3, false).decide(), [Action::Forget(p)]);
    assert_eq!(gone().row("a", 3, false).decide(), [Action::Forget(p)]);
    assert_eq!(gone().row("b", 3, false).decide(), [], "b may not have learned of it yet");
    assert_eq!(gone().decide(), []);
}

#[test]
fn routes_name_a_live_holder_and_nothing_else() {
    let p = partition_of("a");
    let membership = membership();
    let route_with = |row: Option<Owner>, serving: Option<u64>| {
        let owners: BTreeMap<_, _> = row.map(|o| (p, o)).into_iter().collect();
        let serving: BTreeMap<_, _> = serving.map(|t| (p, t)).into_iter().collect();
        route(p, &node("a"), &serving, &owners, &membership)
    };
    assert_eq!(route_with(Some(owner("a", 1, false)), Some(1)), Route::Local);
    assert_eq!(
        route_with(Some(owner("b", 1, false)), None),
        Route::Remote { node_id: node("b"), link_addr: "b:1".into() }
    );
    assert_eq!(
        route_with(Some(owner("gone", 1, false)), None),
        Route::Remote { node_id: node("gone"), link_addr: "gone:1".into() }
    );
    assert_eq!(route_with(Some(owner("b", 1, true)), None), Route::Unknown);
    assert_eq!(route_with(Some(owner("dead", 1, false)), None), Route::Unknown);
    assert_eq!(route_with(Some(owner("a", 1, false)), None), Route::Unknown);
    assert_eq!(route_with(None, None), Route::Unknown);
}
