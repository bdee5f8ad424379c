//! What one round does, decided purely from what it read: the rules of ownership.
//!
//! For each partition the node serves, knows of, or finds an owner row for:
//!
//! | this node | the owner row | the partition | decision |
//! |---|---|---|---|
//! | serves it with token *t* | no longer (me, *t*, not released) | any | [`Action::Drop`] |
//! | serves it | (me, *t*) | gone | [`Action::Retire`] |
//! | serves it | (me, *t*) | is leaving, or another live node is desired | [`Action::HandOver`] |
//! | does not serve it, renews or leaves | names me, not released | not mine to claim | [`Action::Release`] (gone: [`Action::Forget`]) |
//! | does not serve it | absent, released, owner not alive, or me | exists, I am desired and active | [`Action::Claim`] |
//! | renews or leaves | released or owner not alive | gone | [`Action::Forget`] |
//!
//! **Architecture Invariant:** a node claims only as the desired owner, only while it renews
//! its member row, and only a partition whose row is absent, released, its own, or held by a
//! node it has watched without a heartbeat for a whole lease. It marks a row released only
//! after its host stopped serving the partition.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::config::NodeId;
use crate::host::{PartitionRef, Route};
use crate::liveness::Membership;
use crate::rendezvous::desired_owner;
use crate::rows::OwnerRow;

/// An owner row as read: decoded (`None` when it does not decode) and its bytes (the guard of
/// the next write to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) row: Option<OwnerRow>,
    pub(crate) raw: Bytes,
}

/// What a round knows when it decides.
#[derive(Debug)]
pub(crate) struct Inputs<'a> {
    pub(crate) me: &'a NodeId,
    /// Renewed lately and not leaving: may claim.
    pub(crate) active: bool,
    pub(crate) leaving: bool,
    /// The partitions that exist, as the host lists them.
    pub(crate) partitions: &'a BTreeSet<PartitionRef>,
    pub(crate) owners: &'a BTreeMap<PartitionRef, Owner>,
    pub(crate) membership: &'a Membership,
    /// The settled candidate nodes desired owners are chosen from.
    pub(crate) candidates: &'a [NodeId],
    /// What this node serves, with the token it claimed each with.
    pub(crate) serving: &'a BTreeMap<PartitionRef, u64>,
}

/// One step of a round, in the order a round takes them (the derived order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Action {
    /// Stop serving at once, writing nothing: the row no longer names this node with the token
    /// it serves (another node claimed the partition).
    Drop(PartitionRef),
    /// Stop serving, then delete the row: the partition no longer exists.
    Retire(PartitionRef),
    /// Stop serving, then mark the row released for the desired owner.
    HandOver(PartitionRef),
    /// Mark released a row that names this node, which does not serve the partition.
    Release(PartitionRef),
    /// Delete the row of a partition that no longer exists (released, this node's, or its
    /// owner dead).
    Forget(PartitionRef),
    /// Claim with the next token, then have the host acquire the partition.
    Claim(PartitionRef),
}

/// The actions of one round, in order.
pub(crate) fn decide(inputs: &Inputs<'_>) -> Vec<Action> {
    let Inputs { me, active, leaving, partitions, owners, membership, candidates, serving } =
        *inputs;
    let mut all: BTreeSet<PartitionRef> = partitions.clone();
    all.extend(owners.keys().copied());
    all.extend(serving.keys().copied());
    let mut actions = Vec::new();
    for p in all {
        let exists = partitions.contains(&p);
        let row = owners.get(&p).and_then(|o| o.row.as_ref());
        let desired = desired_owner(p, candidates);
        let mine_to_claim = exists && active && desired == Some(me);
        if let Some(&token) = serving.get(&p) {
            let holds = row.is_some_and(|r| r.node == *me && r.token == token && !r.released);
            let elsewhere = desired.is_some_and(|d| d != me && membership.alive(d));
            if !holds {
                actions.push(Action::Drop(p));
            } else if !exists {
                actions.push(Action::Retire(p));
            } else if leaving || elsewhere {
                actions.push(Action::HandOver(p));
            }
            continue;
        }
        if !active && !leaving {
            // Not renewing: write nothing (a demoted node only stops serving).
            continue;
        }
        match row {
            Some(r) if r.node == *me && !r.released => {
                if mine_to_claim {
                    actions.push(Action::Claim(p));
                } else if exists {
                    actions.push(Action::Release(p));
                } else {
                    actions.push(Action::Forget(p));
                }
            }
            _ if mine_to_claim => {
                let claimable = row.is_none_or(|r| r.released || !membership.alive(&r.node));
                if claimable {
                    actions.push(Action::Claim(p));
                }
            }
            _ if !exists => {
                let stale = match owners.get(&p) {
                    Some(Owner { row: Some(r), .. }) => r.released || !membership.alive(&r.node),
                    Some(Owner { row: None, .. }) => true,
                    None => false,
                };
                if stale {
                    actions.push(Action::Forget(p));
                }
            }
            _ => {}
        }
    }
    actions.sort();
    actions
}

/// Where `p` is served, as this node knows it after its round.
pub(crate) fn route(
    p: PartitionRef,
    me: &NodeId,
    serving: &BTreeMap<PartitionRef, u64>,
    owners: &BTreeMap<PartitionRef, Owner>,
    membership: &Membership,
) -> Route {
    if serving.contains_key(&p) {
        return Route::Local;
    }
    let Some(row) = owners.get(&p).and_then(|o| o.row.as_ref()) else { return Route::Unknown };
    match membership.peer(&row.node) {
        Some(peer) if peer.alive && !row.released && row.node != *me => {
            Route::Remote { node_id: row.node.clone(), link_addr: peer.row.link_addr.clone() }
        }
        _ => Route::Unknown,
    }
}

#[cfg(test)]
mod tests;
