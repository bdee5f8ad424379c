//! Where a partition's commands go: its [`Route`] and the broker's [`PartitionHandle`] on it.
//!
//! On one node every partition runs here, as an actor whose channel the route holds. In a
//! cluster (`CLUSTER.md` §3) a partition runs on one node, its owner; the route of every other
//! node sends its commands there through a [`RemotePartition`], or refuses them as the
//! retriable `PartitionUnavailable` while no owner is known. A route switches between the
//! three as ownership moves ([`Route::switch`]), and keeps what an actor would need to start
//! here at any moment: the entity's description, a topic's subscription lanes and filtering,
//! and the receivers registered with the partition (which a new actor or remote gets at once,
//! so a receiver opened before a move keeps receiving after it).
//!
//! While no owner is known (a partition not yet claimed, or between two owners in a hand-over)
//! requests wait on the route, up to `PARK_WAIT`, and go to the next target in their order;
//! past that they are refused with the retriable `PartitionUnavailable`.
//!
//! **Architecture Invariant:** management commands (description, lanes, filtering) and
//! receivers' attach and detach are recorded by the route whatever its target, so every
//! node's route knows the partition's configuration; a command sent before a switch reaches
//! the old target, one sent after it the new target (the switch holds the route's lock).

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::{Command, Lane, LaneId, PartitionShared};
use crate::clock::Clock;
use crate::description::QueueDescription;
use crate::error::{BrokerError, Result};
use crate::receiver::ReceiverShared;
use crate::types::{PartitionId, Timestamp};

/// A partition that runs on another node: what this node sends it goes over the cluster's
/// link (see `remote.rs`).
pub(crate) trait RemotePartition: Send + Sync + fmt::Debug {
    /// Carries out one command of lane `lane` on the owner, answering its reply channel.
    fn submit(&self, lane: LaneId, command: Command);
    /// The route moved away: stop what runs on its behalf (receivers' pulls).
    fn close(&self);
    /// The id of the node that runs the partition.
    fn owner(&self) -> String;
}

/// Which node runs a partition, as one node knows it (`/health`'s cluster view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// This node.
    Here,
    /// The node with this id.
    Node(String),
    /// None known now: commands are refused, retriably.
    Unknown,
}

/// An actor's channel.
pub(crate) type Actor = mpsc::UnboundedSender<(LaneId, Command)>;

/// Where a route sends commands now.
#[derive(Clone)]
pub(crate) enum Target {
    /// The actor on this node, and the fence token it runs under (`None`: unfenced).
    Local(Actor, Option<u64>),
    /// The owner on another node.
    Remote(Arc<dyn RemotePartition>),
    /// No owner known (a cluster node before it learns one): refused, retriably.
    Elsewhere,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Local(..) => f.write_str("Local"),
            Target::Remote(r) => write!(f, "Remote({r:?})"),
            Target::Elsewhere => f.write_str("Elsewhere"),
        }
    }
}

/// What an actor of this partition starts with, kept current by management commands.
#[derive(Debug, Clone)]
pub(crate) struct StartSpec {
    pub(crate) description: Arc<QueueDescription>,
    /// A topic's: its subscriptions' lanes and whether unmatched messages are refused.
    pub(crate) topic: Option<(Vec<Lane>, bool)>,
    /// Receivers registered with the partition, by lane.
    pub(crate) receivers: Vec<(LaneId, Arc<ReceiverShared>)>,
    /// The shared view of the partition's own lane, which its actor publishes to.
    pub(crate) shared: Arc<PartitionShared>,
}

struct RouteState {
    target: Target,
    spec: StartSpec,
    /// The entity was deleted: nothing starts any more.
    closed: bool,
    /// Commands that came while no owner was known, each with when it gives up.
    parked: VecDeque<(Timestamp, LaneId, Command)>,
    /// A task refuses parked commands past their time.
    sweeping: bool,
}

impl fmt::Debug for RouteState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteState")
            .field("target", &self.target)
            .field("closed", &self.closed)
            .field("parked", &self.parked.len())
            .finish_non_exhaustive()
    }
}

/// The route of one partition (shared by the handles of all its lanes).
#[derive(Debug)]
pub(crate) struct Route {
    entity: LaneId,
    entity_name: String,
    partition: PartitionId,
    clock: Arc<dyn Clock>,
    me: Weak<Route>,
    state: RwLock<RouteState>,
}

impl Route {
    pub(crate) fn new(
        entity: LaneId,
        entity_name: String,
        partition: PartitionId,
        spec: StartSpec,
        target: Target,
        clock: Arc<dyn Clock>,
    ) -> Arc<Route> {
        let parked = VecDeque::new();
        let state = RouteState { target, spec, closed: false, parked, sweeping: false };
        let state = RwLock::new(state);
        Arc::new_cyclic(|me| Route { entity, entity_name, partition, clock, me: me.clone(), state })
    }

    fn read(&self) -> RwLockReadGuard<'_, RouteState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, RouteState> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn send(&self, lane: LaneId, command: Command) {
        if !records(&command) {
            let state = self.read();
            if !matches!(state.target, Target::Elsewhere) {
                return self.dispatch(&state.target, lane, command);
            }
        }
        let mut state = self.write();
        if records(&command) {
            self.record(&mut state, lane, &command);
        }
        if matches!(state.target, Target::Elsewhere) && parks(&command) {
            self.park(&mut state, lane, command);
        } else {
            self.dispatch(&state.target, lane, command);
        }
    }

    /// Keeps a command until an owner is known, for at most [`PARK_WAIT`]: a partition being
    /// handed over, or not yet claimed, is served a moment later rather than refused.
    fn park(&self, state: &mut RouteState, lane: LaneId, command: Command) {
        if state.closed || state.parked.len() >= MAX_PARKED {
            return command.refuse(&self.unavailable());
        }
        let until = self.clock.now().saturating_add(PARK_WAIT);
        state.parked.push_back((until, lane, command));
        if !state.sweeping {
            state.sweeping = true;
            let me = self.me.clone();
            let clock = self.clock.clone();
            tokio::spawn(async move {
                loop {
                    let Some(route) = me.upgrade() else { return };
                    let next = {
                        let mut state = route.write();
                        let now = clock.now();
                        while state.parked.front().is_some_and(|(until, ..)| *until <= now) {
                            if let Some((_, _, command)) = state.parked.pop_front() {
                                command.refuse(&route.unavailable());
                            }
                        }
                        match state.parked.front() {
                            Some((until, ..)) => *until,
                            None => {
                                state.sweeping = false;
                                return;
                            }
                        }
                    };
                    drop(route);
                    clock.sleep_until(next).await;
                }
            });
        }
    }

    fn dispatch(&self, target: &Target, lane: LaneId, command: Command) {
        match target {
            // If the actor is gone the command (and its reply channel) is dropped, which the
            // caller sees as `ShuttingDown`.
            Target::Local(tx, _) => drop(tx.send((lane, command))),
            Target::Remote(remote) => remote.submit(lane, command),
            Target::Elsewhere => command.refuse(&self.unavailable()),
        }
    }

    fn unavailable(&self) -> BrokerError {
        BrokerError::PartitionUnavailable {
            entity: self.entity_name.clone(),
            partition: self.partition,
        }
    }

    fn record(&self, state: &mut RouteState, lane: LaneId, command: &Command) {
        let spec = &mut state.spec;
        let lanes = spec.topic.as_mut().map(|(lanes, _)| lanes);
        match command {
            Command::Attach(receiver) => spec.receivers.push((lane, receiver.clone())),
            Command::Detach(id) => spec.receivers.retain(|(_, r)| r.id != *id),
            Command::Update(description) if lane == self.entity => {
                spec.description = description.clone();
            }
            Command::AddLane(added) => {
                if let Some(lanes) = lanes {
                    lanes.retain(|l| l.id != added.id);
                    lanes.push((**added).clone());
                }
            }
            Command::Configure(config) => {
                if let Some(l) = lanes.and_then(|lanes| lanes.iter_mut().find(|l| l.id == lane)) {
                    l.config = config.clone();
                }
            }
            Command::RemoveLane(_) => {
                if let Some(lanes) = lanes {
                    lanes.retain(|l| l.id != lane);
                }
                spec.receivers.retain(|(l, _)| *l != lane);
            }
            Command::Filtering(on) => {
                if let Some((_, filtering)) = &mut spec.topic {
                    *filtering = *on;
                }
            }
            Command::Close => {
                state.closed = true;
                if matches!(state.target, Target::Elsewhere) {
                    // No actor closes what waits here (a deleted entity's partitions are
                    // stopped before its delete): its receivers end, its parked commands fail.
                    for (_, receiver) in &state.spec.receivers {
                        receiver.close();
                    }
                    let gone = BrokerError::EntityNotFound { entity: self.entity_name.clone() };
                    for (_, _, command) in std::mem::take(&mut state.parked) {
                        command.refuse(&gone);
                    }
                }
            }
            _ => {}
        }
    }

    /// Stops sending commands to the actor running here, if one does: commands wait on the
    /// route from now on (as while no owner is known). Returns the actor's channel and its
    /// fence token, for the caller to stop it — and [`Route::switch`] back on, if it must.
    pub(crate) fn hold_local(&self) -> Option<(Actor, Option<u64>)> {
        let mut state = self.write();
        if !matches!(state.target, Target::Local(..)) {
            return None;
        }
        match std::mem::replace(&mut state.target, Target::Elsewhere) {
            Target::Local(tx, token) => Some((tx, token)),
            other => {
                state.target = other;
                None
            }
        }
    }

    /// Sends commands to `target` from now on, and returns the target before. A local target
    /// gets the registered receivers first; a remote one registers them with the owner.
    pub(crate) fn switch(
        &self,
        make: impl FnOnce(&StartSpec) -> Target,
    ) -> std::result::Result<Target, BrokerError> {
        let mut state = self.write();
        if state.closed {
            return Err(BrokerError::EntityNotFound { entity: self.entity_name.clone() });
        }
        let target = make(&state.spec);
        for (lane, receiver) in &state.spec.receivers {
            self.dispatch(&target, *lane, Command::Attach(receiver.clone()));
        }
        if !matches!(target, Target::Elsewhere) {
            for (_, lane, command) in std::mem::take(&mut state.parked) {
                self.dispatch(&target, lane, command);
            }
        }
        let old = std::mem::replace(&mut state.target, target);
        if let Target::Remote(remote) = &old {
            remote.close();
        }
        Ok(old)
    }

    /// Which node runs the partition, as this node knows it.
    pub(crate) fn owner(&self) -> Owner {
        match &self.read().target {
            Target::Local(..) => Owner::Here,
            Target::Remote(remote) => Owner::Node(remote.owner()),
            Target::Elsewhere => Owner::Unknown,
        }
    }

    /// Whether the actor of this partition runs on this node.
    pub(crate) fn is_local(&self) -> bool {
        matches!(self.read().target, Target::Local(..))
    }
}

/// The broker's handle on a partition, at one of its lanes.
#[derive(Debug, Clone)]
pub(crate) struct PartitionHandle {
    pub(crate) id: PartitionId,
    /// The lane commands through this handle go to.
    pub(crate) lane: LaneId,
    pub(crate) route: Arc<Route>,
    pub(crate) shared: Arc<PartitionShared>,
}

impl PartitionHandle {
    /// Queues a command, without waiting. The queue is unbounded: transports bound what they
    /// submit by the credit they grant their clients. If the actor is gone the command (and its
    /// reply channel) is dropped, which the caller sees as [`BrokerError::ShuttingDown`].
    pub(crate) fn send(&self, command: Command) {
        self.route.send(self.lane, command);
    }

    /// A handle on another lane of the same partition (a subscription's, in a topic's).
    pub(crate) fn for_lane(&self, lane: LaneId, shared: Arc<PartitionShared>) -> PartitionHandle {
        PartitionHandle { id: self.id, lane, route: self.route.clone(), shared }
    }

    /// Asks the actor to deliver, unless such a request is already queued.
    pub(crate) fn nudge(&self) {
        if !self.shared.nudge_pending.swap(true, Ordering::AcqRel) {
            self.send(Command::Deliver);
        }
    }

    /// Sends a request now; the returned future waits for its answer.
    pub(crate) fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T>>) -> Command,
    ) -> impl std::future::Future<Output = Result<T>> + Send + 'static
    where
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx));
        async move { rx.await.unwrap_or(Err(BrokerError::ShuttingDown)) }
    }
}

/// How long a command waits for its partition's owner to be known.
pub(crate) const PARK_WAIT: Duration = Duration::from_secs(5);
/// The most commands one partition keeps waiting; beyond, they are refused at once.
const MAX_PARKED: usize = 10_000;

/// Whether a command waits for an owner rather than being refused at once: requests do; a
/// drain or a stop is answered at once (nothing here to deliver or stop).
fn parks(command: &Command) -> bool {
    !matches!(command, Command::Deliver | Command::Drain(_) | Command::Stop(_)) && !records(command)
}

/// Whether the route keeps something of the command (see [`Route::record`]).
fn records(command: &Command) -> bool {
    matches!(
        command,
        Command::Attach(_)
            | Command::Detach(_)
            | Command::Update(_)
            | Command::AddLane(_)
            | Command::Configure(_)
            | Command::RemoveLane(_)
            | Command::Filtering(_)
            | Command::Close
    )
}
