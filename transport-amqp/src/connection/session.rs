//! Sessions: Begin and End, and the flow frames that carry the session's windows (and a link's
//! credit when they name one).

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use fe2o3_amqp_types::definitions::Handle;
use fe2o3_amqp_types::performatives::{Begin, End, Flow, Performative};

use crate::error::WireError;
use crate::frame::{self};

use super::*;

/// Our session incoming window, in transfer frames: large, so link credit does the limiting.
const INCOMING_WINDOW: u32 = 1 << 30;

#[derive(Debug)]
pub(super) struct Session {
    pub(super) next_outgoing_id: u32,
    pub(super) next_incoming_id: u32,
    pub(super) remote_incoming_window: u32,
    pub(super) next_delivery_id: u32,
    pub(super) links: HashMap<u32, LinkState>,
    pub(super) unsettled: HashMap<u32, Unsettled>,
    /// Session receiver attaches waiting for the next available session, by handle: a detach
    /// meanwhile gives the accept up (nothing stays locked to a link that is gone).
    pub(super) accepting: HashMap<u32, futures_util::future::AbortHandle>,
    /// Deliveries of session links that are gone (detached, or their lock lost) and that the
    /// client had not settled: a disposition for one fails with
    /// `com.microsoft:session-lock-lost` instead of going unanswered.
    pub(super) lost: HashSet<u32>,
    /// Whether this is a cross-entity session, and its via entity (`transactions.rs`).
    pub(super) txn: transactions::SessionTxn,
}

/// At most this many lost deliveries are remembered per session (beyond, the oldest knowledge
/// is dropped and such a late disposition is ignored, as for any unknown delivery).
const MAX_LOST: usize = 16 * 1024;

impl Session {
    /// Forgets the unsettled deliveries of link `handle`; those of a session link are
    /// remembered as lost.
    pub(super) fn forget_link(&mut self, handle: u32, session_link: bool) {
        if !session_link {
            self.unsettled.retain(|_, u| u.handle != handle);
            return;
        }
        let gone: Vec<u32> =
            self.unsettled.iter().filter(|(_, u)| u.handle == handle).map(|(id, _)| *id).collect();
        if self.lost.len() + gone.len() > MAX_LOST {
            self.lost.clear();
        }
        for id in gone {
            self.unsettled.remove(&id);
            self.lost.insert(id);
        }
    }
}

impl Connection {
    pub(super) fn session(&mut self, channel: u16) -> Result<&mut Session, WireError> {
        self.sessions.get_mut(&channel).ok_or_else(|| no_session(channel))
    }

    pub(super) fn on_begin(&mut self, channel: u16, begin: Begin) -> Result<(), WireError> {
        if self.sessions.contains_key(&channel) {
            return Err(WireError::new(
                "amqp:illegal-state",
                400,
                format!("channel {channel} already has a session"),
            ));
        }
        self.sessions.insert(
            channel,
            Session {
                next_outgoing_id: 0,
                next_incoming_id: begin.next_outgoing_id,
                remote_incoming_window: begin.incoming_window,
                next_delivery_id: 0,
                links: HashMap::new(),
                unsettled: HashMap::new(),
                accepting: HashMap::new(),
                lost: HashSet::new(),
                txn: Default::default(),
            },
        );
        let reply = Begin {
            remote_channel: Some(channel),
            next_outgoing_id: 0,
            incoming_window: INCOMING_WINDOW,
            outgoing_window: INCOMING_WINDOW,
            handle_max: Handle(u32::MAX),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        frame::write_performative(&mut self.out, channel, &Performative::Begin(reply));
        Ok(())
    }

    pub(super) fn on_end(&mut self, channel: u16) {
        // Settlements read before the end reach their partitions before the links' receivers
        // are dropped (a session link's detach releases its session).
        self.start_settles();
        self.sessions.remove(&channel);
        // What its coordinator links declared and left undischarged is rolled back.
        self.roll_back_declared_by(channel, None);
        frame::write_performative(&mut self.out, channel, &Performative::End(End { error: None }));
    }

    pub(super) fn write_session_flow(&mut self, channel: u16) {
        self.write_flow(channel, None);
    }

    pub(super) fn write_link_flow(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_count: u32,
        credit: u32,
        drain: bool,
    ) {
        self.write_flow(channel, Some((handle, delivery_count, credit, drain)));
    }

    /// A flow with the session's state, and the link's when given (handle, delivery count,
    /// credit, drain).
    pub(super) fn write_flow(&mut self, channel: u16, link: Option<(u32, u32, u32, bool)>) {
        let Some(session) = self.sessions.get(&channel) else { return };
        let flow = Flow {
            next_incoming_id: Some(session.next_incoming_id),
            incoming_window: INCOMING_WINDOW,
            next_outgoing_id: session.next_outgoing_id,
            outgoing_window: INCOMING_WINDOW,
            handle: link.map(|(handle, ..)| Handle(handle)),
            delivery_count: link.map(|(_, count, ..)| count),
            link_credit: link.map(|(_, _, credit, _)| credit),
            available: None,
            drain: link.is_some_and(|(.., drain)| drain),
            echo: false,
            properties: None,
        };
        frame::write_performative(&mut self.out, channel, &Performative::Flow(flow));
    }
}

pub(super) fn no_session(channel: u16) -> WireError {
    WireError::new(
        "amqp:session:unattached-handle",
        400,
        format!("no session on channel {channel}"),
    )
}
