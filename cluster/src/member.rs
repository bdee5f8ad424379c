//! One node's part in ownership, driven a round at a time: read, decide purely, then write and
//! call the host.
//!
//! A round: renew the member row; demote (release everything locally) when no renewal
//! succeeded for `demote_after`; read the member rows and judge them by observation; read the
//! owner rows; ask the host which partitions exist; [`decide`]; carry the actions out; delete
//! the member rows of nodes silent for [`Config::forget_after`]; tell the host every route
//! that changed. A failed read ends the round; a failed write affects only its own action, and
//! a claim that fails other than by `Conflict` ends the round's claims.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ironbus_core::store::StoreErrorKind;
use ironbus_core::{Clock, Store, StoreError, Timestamp, WriteBatch};
use tracing::{debug, info, warn};

use crate::config::{Config, ConfigError, NodeId};
use crate::decide::{decide, route, Action, Inputs, Owner};
use crate::host::{Host, PartitionRef, Route};
use crate::keys;
use crate::liveness::{Liveness, Membership};
use crate::rows::{decode_counter, encode_counter, MemberRow, OwnerRow};
use crate::settle::Settle;

/// How many rows one scan reads.
const SCAN_PAGE: usize = 512;

/// This node's membership and the partitions it owns, advanced by [`Member::round`] (which
/// [`Ownership`](crate::Ownership) calls every renew interval; tests call it by hand).
#[derive(Debug)]
pub struct Member {
    config: Config,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    host: Arc<dyn Host>,
    /// The heartbeat last written, `None` until read back from this node's row.
    heartbeat: Option<u64>,
    /// When the last renewal that succeeded began, on this node's clock.
    renewed_at: Option<Timestamp>,
    /// Renewed within `demote_after` at the last round: may claim and serve.
    active: bool,
    liveness: Liveness,
    settle: Settle,
    membership: Membership,
    /// What the host serves for this node, with the token of each claim.
    serving: BTreeMap<PartitionRef, u64>,
    /// The routes last told to the host.
    routes: BTreeMap<PartitionRef, Route>,
}

/// The claim counter as last read or written: its value and its bytes (a claim's guard).
type Counter = Option<(u64, Option<bytes::Bytes>)>;

impl Member {
    /// A node that has not yet renewed: it claims nothing before its first round. `store` is
    /// the namespace store (store 0).
    pub fn new(
        config: Config,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        host: Arc<dyn Host>,
    ) -> Result<Member, ConfigError> {
        config.check()?;
        Ok(Member {
            config,
            store,
            clock,
            host,
            heartbeat: None,
            renewed_at: None,
            active: false,
            liveness: Liveness::default(),
            settle: Settle::default(),
            membership: Membership::default(),
            serving: BTreeMap::new(),
            routes: BTreeMap::new(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The partitions this node's host serves, with the token each was claimed with.
    pub fn serving(&self) -> &BTreeMap<PartitionRef, u64> {
        &self.serving
    }

    /// Whether the last round found this node renewed within `demote_after`; a node that is
    /// not active serves and claims nothing.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// One round (see the module docs). Never fails: what went wrong is logged and tried again
    /// next round.
    pub async fn round(&mut self) {
        let now = self.clock.now();
        // A store that does not answer (a cut-off node's retries) must not hold the round past
        // the point where it has to demote: each store step of a round gets a renew interval.
        let (clock, limit) = (self.clock.clone(), self.config.renew_interval);
        if let Err(error) = bounded(&clock, limit, self.renew(now, false)).await {
            warn!(node = %self.config.node_id, %error, "member row not renewed");
        }
        let now = self.clock.now();
        let active =
            self.renewed_at.is_some_and(|at| now.saturating_since(at) < self.config.demote_after);
        if self.active != active {
            match active {
                true => info!(node = %self.config.node_id, "renewing: claiming partitions"),
                false => warn!(node = %self.config.node_id, "demoted: no renewal for demote-after"),
            }
        }
        self.active = active;
        if !active {
            self.stop_serving().await;
        }
        let mut owners = match bounded(&clock, limit, self.read(now)).await {
            Ok(owners) => owners,
            Err(error) => {
                warn!(node = %self.config.node_id, %error, "cluster rows not read");
                return;
            }
        };
        let me = &self.config.node_id;
        let others: Vec<(NodeId, String)> = self
            .membership
            .alive_links()
            .filter(|(node, _)| *node != me)
            .map(|(node, addr)| (node.clone(), addr.to_owned()))
            .collect();
        self.host.members(&others);
        let partitions: BTreeSet<PartitionRef> = self.host.partitions().into_iter().collect();
        let live: Vec<NodeId> =
            self.membership.candidates().filter(|n| *n != me || active).cloned().collect();
        let candidates = self.settle.observe(live, now, self.config.settle).to_vec();
        let actions = decide(&Inputs {
            me,
            active,
            leaving: false,
            partitions: &partitions,
            owners: &owners,
            membership: &self.membership,
            candidates: &candidates,
            serving: &self.serving,
        });
        self.act(actions, &mut owners).await;
        if active {
            self.forget_silent_members().await;
        }
        self.update_routes(&partitions, &owners);
    }

    /// Leaves the cluster gracefully: marks this node leaving, hands every partition over (the
    /// host releases it, then its row is marked released, so the desired owners claim at
    /// once), and deletes the member row. Whatever is still served after a failure is released
    /// locally all the same; the others then take it after the lease. Returns the first store
    /// error.
    pub async fn leave(mut self) -> Result<(), StoreError> {
        let now = self.clock.now();
        let marked = self.renew(now, true).await;
        self.active = false;
        let handed = match self.read(now).await {
            Ok(mut owners) => {
                let partitions: BTreeSet<PartitionRef> =
                    self.host.partitions().into_iter().collect();
                let actions = decide(&Inputs {
                    me: &self.config.node_id,
                    active: false,
                    leaving: true,
                    partitions: &partitions,
                    owners: &owners,
                    membership: &self.membership,
                    candidates: &[],
                    serving: &self.serving,
                });
                self.act(actions, &mut owners).await;
                self.update_routes(&partitions, &owners);
                Ok(())
            }
            Err(error) => Err(error),
        };
        self.stop_serving().await;
        let mut batch = WriteBatch::new();
        batch.delete(keys::member(&self.config.node_id));
        let deleted = self.store.write(batch).await;
        info!(node = %self.config.node_id, ok = deleted.is_ok(), "left the cluster");
        marked.and(handed).and(deleted)
    }

    /// Writes this node's member row with the next heartbeat.
    async fn renew(&mut self, now: Timestamp, leaving: bool) -> Result<(), StoreError> {
        let key = keys::member(&self.config.node_id);
        let heartbeat = match self.heartbeat {
            Some(heartbeat) => heartbeat,
            None => {
                let row = self.store.get(&key).await?;
                row.and_then(|v| MemberRow::decode(&v).ok()).map_or(0, |r| r.heartbeat)
            }
        };
        // Counted even if the write fails: an answer lost after a commit must not make the
        // next renewal write the same value again.
        let heartbeat = heartbeat.wrapping_add(1);
        self.heartbeat = Some(heartbeat);
        let row = MemberRow {
            heartbeat,
            lease: self.config.lease,
            leaving,
            link_addr: self.config.link_addr.clone(),
        };
        let mut batch = WriteBatch::new();
        batch.put(key, row.encode());
        self.store.write(batch).await?;
        self.renewed_at = Some(now);
        Ok(())
    }

    /// Reads and judges the member rows, then reads the owner rows.
    async fn read(&mut self, now: Timestamp) -> Result<BTreeMap<PartitionRef, Owner>, StoreError> {
        let mut members = Vec::new();
        for (key, raw) in scan_prefix(&*self.store, &keys::members_prefix()).await? {
            let (Some(node), Ok(row)) = (keys::node_of(&key), MemberRow::decode(&raw)) else {
                warn!(key = ?key, "member row that does not decode: ignored");
                continue;
            };
            members.push((node, row, raw));
        }
        self.membership = self.liveness.observe(members, now);
        let mut owners = BTreeMap::new();
        for (key, raw) in scan_prefix(&*self.store, &keys::owners_prefix()).await? {
            let Some(p) = keys::partition_of(&key) else {
                warn!(key = ?key, "owner row key that does not decode: ignored");
                continue;
            };
            owners.insert(p, Owner { row: OwnerRow::decode(&raw).ok(), raw });
        }
        Ok(owners)
    }

    /// Carries out a round's actions, in order.
    async fn act(&mut self, actions: Vec<Action>, owners: &mut BTreeMap<PartitionRef, Owner>) {
        let mut counter: Counter = None;
        let mut claiming = true;
        for action in actions {
            match action {
                Action::Drop(p) => {
                    warn!(node = %self.config.node_id, partition = %p, "partition lost: released");
                    self.stop(p).await;
                }
                Action::Retire(p) | Action::Forget(p) => {
                    self.stop(p).await;
                    self.write_owner(p, owners, None).await;
                }
                Action::HandOver(p) | Action::Release(p) => {
                    self.stop(p).await;
                    let released =
                        owners.get(&p).and_then(|o| o.row.as_ref()).map(OwnerRow::released);
                    if let Some(released) = released {
                        self.write_owner(p, owners, Some(released)).await;
                        info!(node = %self.config.node_id, partition = %p, "partition released");
                    }
                }
                Action::Claim(p) if claiming => {
                    if let Err(error) = self.claim(p, owners, &mut counter).await {
                        warn!(node = %self.config.node_id, partition = %p, %error, "claim failed");
                        claiming = false;
                    }
                }
                Action::Claim(_) => {}
            }
        }
    }

    /// Claims `p`: its owner row and the claim counter's next value in one guarded batch, then
    /// has the host acquire it. A `Conflict` means another node acted first: nothing to do
    /// until the next round reads again.
    async fn claim(
        &mut self,
        p: PartitionRef,
        owners: &mut BTreeMap<PartitionRef, Owner>,
        counter: &mut Counter,
    ) -> Result<(), StoreError> {
        let (last, last_raw) = match counter.take() {
            Some(read) => read,
            None => {
                let raw = self.store.get(&keys::claim_counter()).await?;
                (decode_counter(raw.as_deref())?, raw)
            }
        };
        let token = last
            .checked_add(1)
            .ok_or_else(|| StoreError::corrupted("claim counter: no token left"))?;
        let row = OwnerRow { node: self.config.node_id.clone(), token, released: false };
        let raw = row.encode();
        let read = owners.get(&p).map(|o| o.raw.clone());
        let batch = claim_batch(p, read, last_raw.clone(), raw.clone(), token);
        match self.store.write(batch).await {
            Ok(()) => {}
            Err(error) if error.kind == StoreErrorKind::Conflict => {
                debug!(node = %self.config.node_id, partition = %p, "claim lost a race");
                return Ok(());
            }
            Err(error) => {
                *counter = Some((last, last_raw));
                return Err(error);
            }
        }
        *counter = Some((token, Some(encode_counter(token))));
        owners.insert(p, Owner { row: Some(row), raw });
        match self.host.acquire(p, token).await {
            Ok(()) => {
                info!(node = %self.config.node_id, partition = %p, token, "partition acquired");
                self.serving.insert(p, token);
            }
            Err(error) => {
                warn!(node = %self.config.node_id, partition = %p, token, %error, "acquire failed");
            }
        }
        Ok(())
    }

    /// Replaces `p`'s owner row (`None`: deletes it), guarded by the bytes read this round.
    async fn write_owner(
        &self,
        p: PartitionRef,
        owners: &mut BTreeMap<PartitionRef, Owner>,
        row: Option<OwnerRow>,
    ) {
        let Some(read) = owners.get(&p) else { return };
        let mut batch = WriteBatch::new();
        batch.require(keys::owner(p), Some(read.raw.clone()));
        let raw = row.as_ref().map(OwnerRow::encode);
        match &raw {
            Some(raw) => batch.put(keys::owner(p), raw.clone()),
            None => batch.delete(keys::owner(p)),
        }
        match self.store.write(batch).await {
            Ok(()) => match raw {
                Some(raw) => {
                    owners.insert(p, Owner { row, raw });
                }
                None => {
                    owners.remove(&p);
                }
            },
            Err(error) => {
                debug!(node = %self.config.node_id, partition = %p, %error, "owner row not written");
            }
        }
    }

    /// Deletes the member rows of nodes silent for [`Config::forget_after`].
    async fn forget_silent_members(&self) {
        let me = &self.config.node_id;
        for (node, raw) in self.membership.silent(self.config.forget_after()) {
            if node == me {
                continue;
            }
            let mut batch = WriteBatch::new();
            batch.require(keys::member(node), Some(raw.clone()));
            batch.delete(keys::member(node));
            match self.store.write(batch).await {
                Ok(()) => info!(node = %me, silent = %node, "member row of a silent node deleted"),
                Err(error) => debug!(node = %me, %error, "member row not deleted"),
            }
        }
    }

    /// Has the host stop serving `p`, if it does.
    async fn stop(&mut self, p: PartitionRef) {
        if self.serving.remove(&p).is_some() {
            self.host.release(p).await;
        }
    }

    /// Has the host stop serving everything, without writing (demotion, or a failed leave).
    async fn stop_serving(&mut self) {
        let served: Vec<PartitionRef> = self.serving.keys().copied().collect();
        for p in served {
            self.stop(p).await;
            if self.routes.get(&p) == Some(&Route::Local) {
                self.routes.insert(p, Route::Unknown);
                self.host.route(p, Route::Unknown);
            }
        }
    }

    /// Tells the host each route that changed, for the partitions that exist.
    fn update_routes(
        &mut self,
        partitions: &BTreeSet<PartitionRef>,
        owners: &BTreeMap<PartitionRef, Owner>,
    ) {
        let me = &self.config.node_id;
        let mut routes = BTreeMap::new();
        for &p in partitions {
            let now = route(p, me, &self.serving, owners, &self.membership);
            if self.routes.get(&p) != Some(&now) {
                self.host.route(p, now.clone());
            }
            routes.insert(p, now);
        }
        self.routes = routes;
    }
}

/// A claim of `p`: the owner row `row` and the counter's next value `token`, applied only if
/// the owner row still holds `read` and the counter `counter` (`None`: absent), as read.
pub(crate) fn claim_batch(
    p: PartitionRef,
    read: Option<bytes::Bytes>,
    counter: Option<bytes::Bytes>,
    row: bytes::Bytes,
    token: u64,
) -> WriteBatch {
    let mut batch = WriteBatch::new();
    batch.require(keys::owner(p), read);
    batch.require(keys::claim_counter(), counter);
    batch.put(keys::owner(p), row);
    batch.put(keys::claim_counter(), encode_counter(token));
    batch
}

/// Every row whose key starts with `prefix`, a page at a time.
async fn scan_prefix(
    store: &dyn Store,
    prefix: &[u8],
) -> Result<Vec<(bytes::Bytes, bytes::Bytes)>, StoreError> {
    let end = ironbus_core::store::prefix_end(prefix);
    let mut start = prefix.to_vec();
    let mut rows = Vec::new();
    loop {
        let page = store.scan(&start, &end, SCAN_PAGE).await?;
        let full = page.len() == SCAN_PAGE;
        if let Some((last, _)) = page.last() {
            start = last.to_vec();
            start.push(0);
        }
        rows.extend(page);
        if !full {
            return Ok(rows);
        }
    }
}

/// `step`, or an `Unavailable` error once `limit` has passed on `clock`.
async fn bounded<T>(
    clock: &Arc<dyn Clock>,
    limit: std::time::Duration,
    step: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let deadline = clock.now().saturating_add(limit);
    tokio::select! {
        result = step => result,
        () = clock.sleep_until(deadline) => {
            Err(StoreError::unavailable(format!("no answer from the store within {limit:?}")))
        }
    }
}
