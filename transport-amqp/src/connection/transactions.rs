//! Local transactions (AMQP 1.0 part 4, as Service Bus offers them: amqp.md §8,
//! topics-sessions-transactions.md part C): coordinator links, declare and discharge, the
//! transactional state of the client's transfers, dispositions and `$management` requests,
//! send-via links and cross-entity sessions.
//!
//! A transaction belongs to the connection that declared it: its txn-id (`txn:<connection>:<n>`,
//! printable, unique per process) works on any session of that connection and is unknown on
//! every other. The work itself is the core's ([`Broker::send_in_transaction`] and friends);
//! this file keeps the map from txn-ids to [`Transaction`]s and the link that declared each, so
//! that detaching that link, ending its session or closing the connection rolls back what it
//! left undischarged, and the connection's tick rolls back what timed out.
//!
//! A cross-entity session (.NET `EnableCrossEntityTransactions`, Java
//! `crossentity-coordinator`) is one whose first link is a coordinator: its first entity link
//! names the via entity of the transactional work done on its links.
//!
//! Coordinator links are accepted on any session, several per session and before CBS;
//! distributed or promotable capabilities are refused with `amqp:precondition-failed`. A
//! declare is answered at once; a discharge (commit or rollback) runs off the loop and is
//! answered from its event; an unknown, foreign or timed-out txn-id is rejected with
//! `amqp:transaction:unknown-id`. A transactional disposition is answered at once with the
//! transactional state but left unsettled until the commit settles it, so after a rollback the
//! same delivery or lock token settles again. A `$management` request carrying a
//! transactional state (pre-settled ones too) is polled once when read, so its work is in the
//! transaction before a discharge read after it. A send-via link
//! (`com.microsoft:transfer-destination-address`) needs Send on both paths and sends through
//! the target's transfer queue. At most 1000 transactions per connection are open at once (a
//! declare beyond is `amqp:resource-limit-exceeded`). Transactional acquisition (a `txn-id` in
//! a flow) is not offered: the link is detached with `amqp:not-implemented`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use fe2o3_amqp_types::definitions::Role;
use fe2o3_amqp_types::messaging::{
    Accepted, DeliveryState, Outcome, Rejected, Released, TargetArchetype,
};
use fe2o3_amqp_types::performatives::{Attach, Performative};
use fe2o3_amqp_types::primitives::{Array, Binary, Value};
use fe2o3_amqp_types::transaction::{Coordinator, Declared, TransactionalState, TxnCapability};
use futures_util::FutureExt;
use ironbus_core::auth::Right;
use ironbus_core::{BrokerError, EntityAddress, EntityPath, LockToken, Message, Transaction};
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;

use crate::error::WireError;
use crate::frame::{self};
use crate::request::Request;

use super::deliveries::settle_outcome;
use super::links::{is_session_link, InboundLink};
use super::*;

/// Connections numbered for their txn-ids.
static CONNECTIONS: AtomicU64 = AtomicU64::new(1);

pub(super) const UNKNOWN_ID: &str = "amqp:transaction:unknown-id";
/// The link property of a send-via sender: the final destination (the target is the via entity).
const TRANSFER_DESTINATION: &str = "com.microsoft:transfer-destination-address";
/// The most transactions one connection may have declared and not discharged (a declared
/// transaction with no work never times out: its timer starts with its first operation).
const MAX_OPEN: usize = 1000;
const DECLARE: u64 = 0x31;
const DISCHARGE: u64 = 0x32;

/// The transactions a connection declared and has not discharged.
pub(super) struct Transactions {
    broker: ironbus_core::Broker,
    connection: u64,
    declared: u64,
    open: HashMap<Vec<u8>, Open>,
}

struct Open {
    txn: Transaction,
    /// The coordinator link that declared it.
    channel: u16,
    handle: u32,
    /// Our deliveries settled in it on receiver links: forgotten once the commit applied
    /// them; kept after a rollback, so that the same delivery can be settled again.
    settled: Vec<SettledIn>,
}

impl Transactions {
    pub(super) fn new(broker: ironbus_core::Broker) -> Self {
        Transactions {
            broker,
            connection: CONNECTIONS.fetch_add(1, Ordering::Relaxed),
            declared: 0,
            open: HashMap::new(),
        }
    }

    /// Rolls back (in the background) the transactions `gone` says are over.
    fn roll_back_where(&mut self, mut gone: impl FnMut(&Open) -> bool) {
        let ids: Vec<Vec<u8>> =
            self.open.iter().filter(|(_, open)| gone(open)).map(|(id, _)| id.clone()).collect();
        for id in ids {
            if let Some(open) = self.open.remove(&id) {
                roll_back(&self.broker, open.txn);
            }
        }
    }
}

impl Drop for Transactions {
    /// The connection is gone: what it left undischarged is rolled back.
    fn drop(&mut self) {
        self.roll_back_where(|_| true);
    }
}

fn roll_back(broker: &ironbus_core::Broker, txn: Transaction) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let broker = broker.clone();
        runtime.spawn(async move { broker.rollback(&txn).await });
    }
}

/// A session's part in cross-entity transactions.
#[derive(Debug, Default)]
pub(super) struct SessionTxn {
    /// A link was attached on the session (the first one decides whether it is cross-entity).
    attached: bool,
    cross_entity: bool,
    /// The via entity of a cross-entity session: its first entity link's.
    via: Option<EntityPath>,
}

impl SessionTxn {
    /// Notes a link attached on the session: a coordinator (`None`) or a link on `entity`.
    pub(super) fn note_link(&mut self, entity: Option<&EntityPath>) {
        if !self.attached {
            self.attached = true;
            self.cross_entity = entity.is_none();
        }
        if self.cross_entity && self.via.is_none() {
            self.via = entity.cloned();
        }
    }

    /// The via entity transactional work on this session's links goes through, if it is a
    /// cross-entity session.
    fn via(&self) -> Option<&EntityPath> {
        self.via.as_ref().filter(|_| self.cross_entity)
    }
}

/// A delivery of ours settled in a transaction.
#[derive(Debug, Clone, Copy)]
pub(super) struct SettledIn {
    channel: u16,
    delivery_id: u32,
    token: LockToken,
    /// The client left it unsettled: the commit settles it (our answer to the transactional
    /// disposition kept it open, so that after a rollback the client can settle it again).
    owed: bool,
}

/// The answer of a discharge.
pub(super) struct Discharged {
    channel: u16,
    delivery_id: u32,
    settled: bool,
    result: Result<(), WireError>,
    /// Deliveries the transaction settled: forgotten if it committed.
    forget: Vec<SettledIn>,
}

/// Whether a flow asks for transactional acquisition (AMQP 1.0 §4.4.3: `txn-id` in its
/// properties), which Service Bus does not offer (receiving is not transactional).
pub(super) fn asks_acquisition(flow: &fe2o3_amqp_types::performatives::Flow) -> bool {
    flow.properties.as_ref().is_some_and(|p| p.keys().any(|k| k.as_str() == "txn-id"))
}

/// The txn-id a transfer's or disposition's state names, if transactional.
pub(super) fn txn_id(state: Option<&DeliveryState>) -> Option<Binary> {
    match state {
        Some(DeliveryState::TransactionalState(ts)) => Some(ts.txn_id.clone()),
        _ => None,
    }
}

fn unknown_id(id: &[u8]) -> WireError {
    WireError::new(
        UNKNOWN_ID,
        400,
        format!(
            "Transaction is not declared: txn-id '{}' was not declared on this connection, or \
             was already discharged.",
            String::from_utf8_lossy(id)
        ),
    )
}

/// Service Bus's refusal of an operation in a transaction that timed out (C.2).
fn no_active(id: &[u8]) -> WireError {
    WireError::new(
        "amqp:not-allowed",
        400,
        format!(
            "No active Transaction was found for ID '{}'. The Transaction may have timed out or \
             attempted to span multiple top-level entities such as Queue or Topic. The server \
             Transaction timeout is: 00:02:00.",
            String::from_utf8_lossy(id)
        ),
    )
}

/// A core error of a transactional operation in wire terms (a timed-out transaction as
/// Service Bus reports it).
fn operation_error(error: BrokerError, id: &[u8]) -> WireError {
    match error {
        BrokerError::TransactionTimedOut => no_active(id),
        other => WireError::from(other),
    }
}

/// What the amqp-value body of a control transfer asks: a declare, or a discharge (txn-id,
/// fail).
enum Control {
    Declare,
    Discharge(Vec<u8>, bool),
}

fn decode_control(body: &[u8]) -> Result<Control, WireError> {
    let bad = |what: &str| WireError::new("amqp:decode-error", 400, what.to_owned());
    let request = Request::decode(body)?;
    let Value::Described(described) = request.body else {
        return Err(bad("a control message's body must be a declare or a discharge"));
    };
    let Described { descriptor, value } = *described;
    let code = match descriptor {
        Descriptor::Code(code) => code,
        Descriptor::Name(name) => match name.as_str() {
            "amqp:declare:list" => DECLARE,
            "amqp:discharge:list" => DISCHARGE,
            _ => 0,
        },
    };
    let fields = match value {
        Value::List(fields) => fields,
        _ => return Err(bad("a control message's body must be a described list")),
    };
    match code {
        // A global-id is ignored: the transactions are local.
        DECLARE => Ok(Control::Declare),
        DISCHARGE => {
            let id = match fields.first() {
                Some(Value::Binary(id)) => id.to_vec(),
                _ => return Err(bad("a discharge needs a binary txn-id")),
            };
            let fail = match fields.get(1) {
                None | Some(Value::Null) => false,
                Some(Value::Bool(fail)) => *fail,
                Some(_) => return Err(bad("a discharge's fail must be a boolean")),
            };
            Ok(Control::Discharge(id, fail))
        }
        _ => Err(bad("a control message's body must be a declare or a discharge")),
    }
}

impl Connection {
    /// Accepts a coordinator link (on any session, before authentication too: the Rust SDK
    /// attaches one before CBS), offering local transactions only.
    pub(super) fn attach_coordinator(
        &mut self,
        channel: u16,
        attach: Attach,
    ) -> Result<(), WireError> {
        let desired = match attach.target.as_deref() {
            Some(TargetArchetype::Coordinator(c)) => c.capabilities.clone(),
            _ => None,
        };
        let unsupported: Vec<String> = desired
            .map(|Array(capabilities)| capabilities)
            .unwrap_or_default()
            .iter()
            .filter(|c| {
                matches!(
                    c,
                    TxnCapability::DistributedTransactions | TxnCapability::PromotableTransactions
                )
            })
            .map(|c| fe2o3_amqp_types::primitives::Symbol::from(c).0)
            .collect();
        if !unsupported.is_empty() {
            return self.refuse(
                channel,
                attach,
                WireError::new(
                    "amqp:precondition-failed",
                    412,
                    format!(
                        "Transaction coordinator did not support all desired capabilities: {}",
                        unsupported.join(",")
                    ),
                ),
            );
        }
        let handle = attach.handle.0;
        let mut reply = attach.clone();
        reply.role = Role::Receiver;
        reply.target = Some(Box::new(TargetArchetype::Coordinator(Coordinator::new(Array(vec![
            TxnCapability::LocalTransactions,
        ])))));
        reply.unsettled = None;
        reply.incomplete_unsettled = false;
        reply.properties = None;
        reply.offered_capabilities = None;
        reply.desired_capabilities = None;
        reply.initial_delivery_count = None;
        reply.max_message_size = Some(u64::from(MAX_FRAME_SIZE));
        let delivery_count = attach.initial_delivery_count.unwrap_or(0);
        frame::write_performative(&mut self.out, channel, &Performative::Attach(reply));
        let session = self.session(channel)?;
        session.txn.note_link(None);
        session.links.insert(
            handle,
            LinkState::Inbound(InboundLink::new(Node::Coordinator, "$coordinator", delivery_count)),
        );
        self.write_link_flow(channel, handle, delivery_count, links::SENDER_CREDIT, false);
        Ok(())
    }

    /// A transfer on a coordinator link: a declare is answered at once with its txn-id
    /// (`declared`), a discharge once the commit or rollback finished ([`Event::Discharged`]).
    pub(super) fn on_control(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_id: u32,
        settled: bool,
        body: &[u8],
    ) {
        let control = match decode_control(body) {
            Ok(c) => c,
            Err(e) => {
                if !settled {
                    let state = DeliveryState::Rejected(Rejected { error: Some(e.to_amqp()) });
                    self.write_ack(channel, delivery_id, delivery_id, state);
                }
                return;
            }
        };
        match control {
            Control::Declare if self.txns.open.len() >= MAX_OPEN => {
                if !settled {
                    let e = WireError::new(
                        "amqp:resource-limit-exceeded",
                        403,
                        format!(
                            "this connection has {MAX_OPEN} transactions declared and not \
                             discharged: discharge some first"
                        ),
                    );
                    let state = DeliveryState::Rejected(Rejected { error: Some(e.to_amqp()) });
                    self.write_ack(channel, delivery_id, delivery_id, state);
                }
            }
            Control::Declare => {
                let txns = &mut self.txns;
                txns.declared += 1;
                let id = format!("txn:{}:{}", txns.connection, txns.declared).into_bytes();
                txns.open.insert(
                    id.clone(),
                    Open { txn: Transaction::new(), channel, handle, settled: Vec::new() },
                );
                if !settled {
                    let state = DeliveryState::Declared(Declared { txn_id: Binary::from(id) });
                    self.write_ack(channel, delivery_id, delivery_id, state);
                }
            }
            Control::Discharge(id, fail) => {
                let now = self.now();
                let broker = self.cx.broker.clone();
                let Some(open) = self.txns.open.remove(&id) else {
                    let result = Err(unknown_id(&id));
                    self.on_discharged(Discharged {
                        channel,
                        delivery_id,
                        settled,
                        result,
                        forget: Vec::new(),
                    });
                    return;
                };
                let Open { txn, settled: settles, .. } = open;
                let expired = txn.is_expired(now);
                // Only a commit settles what the transaction settled.
                let forget = if fail || expired { Vec::new() } else { settles };
                self.pending.push(Box::pin(async move {
                    let result = if expired {
                        // Timed out: gone, as if never declared.
                        broker.rollback(&txn).await;
                        Err(unknown_id(&id))
                    } else if fail {
                        broker.rollback(&txn).await;
                        Ok(())
                    } else {
                        broker.commit(&txn).await.map_err(|e| match e {
                            BrokerError::TransactionTimedOut => unknown_id(&id),
                            other => WireError::from(other),
                        })
                    };
                    Event::Discharged(Discharged { channel, delivery_id, settled, result, forget })
                }));
            }
        }
        self.top_up(channel, handle);
    }

    /// Answers a discharge; after a commit, the deliveries it settled are forgotten.
    pub(super) fn on_discharged(&mut self, discharged: Discharged) {
        let Discharged { channel, delivery_id, settled, result, forget } = discharged;
        if result.is_ok() {
            for SettledIn { channel: ch, delivery_id: id, token, owed } in forget {
                let Some(session) = self.sessions.get_mut(&ch) else { continue };
                if session.unsettled.get(&id).is_some_and(|u| u.token == token) {
                    session.unsettled.remove(&id);
                    if owed {
                        self.write_delivery_state(ch, id, true, None);
                    }
                }
            }
        }
        if settled || !self.sessions.contains_key(&channel) {
            return;
        }
        let state = match result {
            Ok(()) => DeliveryState::Accepted(Accepted {}),
            Err(e) => {
                tracing::debug!(condition = e.condition, description = %e.description, "discharge refused");
                DeliveryState::Rejected(Rejected { error: Some(e.to_amqp()) })
            }
        };
        self.write_ack(channel, delivery_id, delivery_id, state);
    }

    /// Rolls back the transactions declared on `channel` (by link `handle`, or by any link of
    /// the session when `None`): the link detached, or the session ended.
    pub(super) fn roll_back_declared_by(&mut self, channel: u16, handle: Option<u32>) {
        self.txns.roll_back_where(|open| {
            open.channel == channel && handle.is_none_or(|h| h == open.handle)
        });
    }

    /// Rolls back the transactions that timed out (a later discharge gets unknown-id).
    pub(super) fn expire_transactions(&mut self) {
        let now = self.now();
        self.txns.roll_back_where(|open| open.txn.is_expired(now));
    }

    /// The open transaction `id` names, for an operation in it.
    pub(super) fn transaction(&self, id: &[u8]) -> Result<Transaction, WireError> {
        let open = self.txns.open.get(id).ok_or_else(|| unknown_id(id))?;
        if open.txn.is_expired(self.now()) {
            return Err(no_active(id));
        }
        Ok(open.txn.clone())
    }

    /// The via entity of transactional work on `channel`'s links (a cross-entity session's).
    fn session_via(&self, channel: u16) -> Option<EntityPath> {
        self.sessions.get(&channel).and_then(|s| s.txn.via().cloned())
    }

    /// A client's send that is transactional (`txn`) or on a send-via link (`via`): added to
    /// the transaction (answered with transactional-state{accepted}), or sent through the via
    /// entity.
    pub(super) fn start_special_send(
        &mut self,
        (channel, handle, delivery_id, settled): (u16, u32, u32, bool),
        address: EntityAddress,
        via: Option<EntityPath>,
        txn: Option<Binary>,
        messages: Result<Vec<Message>, WireError>,
    ) {
        let sent =
            move |result, txn| Event::Sent { channel, handle, delivery_id, settled, result, txn };
        let (id, via) = match (txn, via) {
            (Some(id), via) => (id, via),
            (None, Some(via)) => return self.start_send_via(sent, address, via, messages),
            (None, None) => {
                let e = WireError::new("amqp:internal-error", 500, "not a transactional send");
                let event = sent(Err(e), None);
                return self.pending.push(Box::pin(async move { event }));
            }
        };
        let via = via.or_else(|| self.session_via(channel));
        let result = messages.and_then(|messages| {
            let txn = self.transaction(&id)?;
            self.cx
                .broker
                .send_in_transaction(&txn, &address, via.as_ref(), messages)
                .map_err(|e| operation_error(e, &id))
        });
        let event = sent(result, Some(id));
        self.pending.push(Box::pin(async move { event }));
    }

    /// A send outside any transaction on a send-via link: through `via`'s transfer queue.
    fn start_send_via(
        &mut self,
        sent: impl FnOnce(Result<(), WireError>, Option<Binary>) -> Event + Send + 'static,
        address: EntityAddress,
        via: EntityPath,
        messages: Result<Vec<Message>, WireError>,
    ) {
        let messages = match messages {
            Ok(m) => m,
            Err(e) => {
                let event = sent(Err(e), None);
                return self.pending.push(Box::pin(async move { event }));
            }
        };
        let broker = self.cx.broker.clone();
        let mut send: Pending = Box::pin(async move {
            let result = broker.send_via(&via, &address, messages).await;
            sent(result.map_err(WireError::from), None)
        });
        // Polled once now, so that the send reaches its partition in the link's order.
        match (&mut send).now_or_never() {
            Some(event) => self.pending.push(Box::pin(async move { event })),
            None => self.pending.push(send),
        }
    }

    /// Detaches a receiver link whose flow asks for transactional acquisition: not offered,
    /// and refused loudly rather than delivering outside the transaction the client named.
    pub(super) fn refuse_acquisition(
        &mut self,
        channel: u16,
        handle: u32,
    ) -> Result<(), WireError> {
        self.start_settles();
        let session = self.session(channel)?;
        let session_link = session.links.remove(&handle).is_some_and(|l| is_session_link(&l));
        session.forget_link(handle, session_link);
        let error = WireError::not_implemented(
            "transactional acquisition (a txn-id in a flow) is not supported: receive outside \
             the transaction and settle in it",
        );
        let detach = fe2o3_amqp_types::performatives::Detach {
            handle: handle.into(),
            closed: true,
            error: Some(error.to_amqp()),
        };
        frame::write_performative(&mut self.out, channel, &Performative::Detach(detach));
        Ok(())
    }

    /// Writes the outcome of a transactional send: transactional-state{txn-id, accepted}.
    pub(super) fn ack_transactional(&mut self, channel: u16, delivery_id: u32, txn_id: Binary) {
        let state = DeliveryState::TransactionalState(TransactionalState {
            txn_id,
            outcome: Some(Outcome::Accepted(Accepted {})),
        });
        self.write_ack(channel, delivery_id, delivery_id, state);
    }

    /// A client's disposition of our deliveries `ids` in transaction `state.txn_id`: each
    /// settlement is added to the transaction (the message stays locked, and the delivery
    /// known, until the commit), answered with the same transactional state when the client
    /// did not settle. A transactional release is a plain release (returns false: the caller
    /// handles it as one).
    pub(super) fn on_transactional_disposition(
        &mut self,
        channel: u16,
        ids: &[u32],
        state: &TransactionalState,
        settled: bool,
    ) -> bool {
        let outcome = match &state.outcome {
            None => return true,
            Some(Outcome::Released(_)) => return false,
            Some(outcome) => outcome_state(outcome),
        };
        let Some((disposition, echo)) = settle_outcome(&outcome) else { return true };
        let id = state.txn_id.to_vec();
        let txn = self.transaction(&id);
        let via = self.session_via(channel);
        for delivery_id in ids {
            let Some(unsettled) =
                self.sessions.get(&channel).and_then(|s| s.unsettled.get(delivery_id))
            else {
                continue;
            };
            let (token, address) = (unsettled.token, unsettled.address.clone());
            let result = txn.clone().and_then(|txn| {
                self.cx
                    .broker
                    .settle_in_transaction(&txn, &address, via.as_ref(), token, disposition.clone())
                    .map_err(|e| operation_error(e, &id))
            });
            if result.is_ok() {
                if let Some(open) = self.txns.open.get_mut(&id) {
                    let owed = !settled;
                    open.settled.push(SettledIn {
                        channel,
                        delivery_id: *delivery_id,
                        token,
                        owed,
                    });
                }
            }
            if settled {
                continue;
            }
            let state = match result {
                Ok(()) => DeliveryState::TransactionalState(TransactionalState {
                    txn_id: state.txn_id.clone(),
                    outcome: Some(echo.clone()),
                }),
                Err(e) => DeliveryState::Rejected(Rejected { error: Some(e.to_amqp()) }),
            };
            // Answered at once (.NET waits for the outcome before it commits), but left
            // unsettled until the commit: after a rollback the same delivery settles again.
            let refused = matches!(state, DeliveryState::Rejected(_));
            self.write_delivery_state(channel, *delivery_id, refused, Some(state));
        }
        true
    }

    /// The destination of a send-via sender attach (its `transfer-destination-address`), if
    /// it is one: `Err` when the destination is not an entity, or not one the client may send
    /// to.
    pub(super) async fn send_via_destination(
        &mut self,
        attach: &Attach,
    ) -> Option<Result<EntityAddress, WireError>> {
        let value = attach
            .properties
            .as_ref()?
            .iter()
            .find_map(|(k, v)| (k.as_str() == TRANSFER_DESTINATION).then_some(v))?;
        let destination = match value {
            Value::String(s) => s.clone(),
            Value::Symbol(s) => s.0.clone(),
            _ => {
                return Some(Err(WireError::bad_request(format!(
                    "{TRANSFER_DESTINATION} must be a string"
                ))))
            }
        };
        let path = node_path(&destination);
        let address = match resolve(&path) {
            Ok(Node::Entity(address)) => address,
            Ok(_) => {
                return Some(Err(WireError::bad_request(format!(
                    "{TRANSFER_DESTINATION} must name a queue or topic"
                ))))
            }
            Err(e) => return Some(Err(e)),
        };
        if let Err(e) = self.cx.broker.get_entity(&address.entity).await {
            return Some(Err(WireError::from(e)));
        }
        if !self.grants.allows(&path, Some(Right::Send), self.now()) {
            return Some(Err(cbs::unauthorized(&path, Some(Right::Send))));
        }
        Some(Ok(address))
    }
}

/// An outcome as the delivery state it is.
fn outcome_state(outcome: &Outcome) -> DeliveryState {
    match outcome {
        Outcome::Accepted(a) => DeliveryState::Accepted(a.clone()),
        Outcome::Rejected(r) => DeliveryState::Rejected(r.clone()),
        Outcome::Released(_) => DeliveryState::Released(Released {}),
        Outcome::Modified(m) => DeliveryState::Modified(m.clone()),
        Outcome::Declared(d) => DeliveryState::Declared(d.clone()),
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::messaging::AmqpValue;
    use fe2o3_amqp_types::transaction::{Declare, Discharge};

    use super::*;

    fn body(value: Value) -> Vec<u8> {
        serde_amqp::to_vec(&AmqpValue(value)).unwrap()
    }

    fn described(descriptor: Descriptor, fields: Vec<Value>) -> Value {
        Value::Described(Box::new(Described { descriptor, value: Value::List(fields) }))
    }

    #[test]
    fn control_messages_decode_by_code_or_name() {
        let declare = serde_amqp::to_vec(&AmqpValue(Declare { global_id: None })).unwrap();
        assert!(matches!(decode_control(&declare), Ok(Control::Declare)));
        let discharge = Discharge { txn_id: Binary::from(b"t".to_vec()), fail: Some(true) };
        let discharge = serde_amqp::to_vec(&AmqpValue(discharge)).unwrap();
        assert!(
            matches!(decode_control(&discharge), Ok(Control::Discharge(id, true)) if id == b"t")
        );
        let by_name = described(
            Descriptor::Name("amqp:discharge:list".into()),
            vec![Value::Binary(Binary::from(b"u".to_vec()))],
        );
        let decoded = decode_control(&body(by_name));
        assert!(matches!(decoded, Ok(Control::Discharge(id, false)) if id == b"u"), "fail absent");
        let global =
            described(Descriptor::Code(DECLARE), vec![Value::Binary(Binary::from(vec![1]))]);
        assert!(matches!(decode_control(&body(global)), Ok(Control::Declare)), "global-id ignored");
    }

    #[test]
    fn malformed_control_messages_are_decode_errors() {
        let cases = [
            body(Value::String("declare".into())),
            body(described(Descriptor::Code(0x33), vec![])),
            body(described(Descriptor::Code(DISCHARGE), vec![])),
            body(described(Descriptor::Code(DISCHARGE), vec![Value::String("t".into())])),
            body(described(
                Descriptor::Code(DISCHARGE),
                vec![Value::Binary(Binary::from(vec![1])), Value::Int(1)],
            )),
            vec![0x00, 0x53],
        ];
        for case in cases {
            let error = decode_control(&case).err().expect("refused");
            assert_eq!(error.condition, "amqp:decode-error", "{case:02x?}");
        }
    }

    #[test]
    fn the_first_link_of_a_session_decides_whether_it_is_cross_entity() {
        let q1 = EntityPath::parse("q1").unwrap();
        let q2 = EntityPath::parse("q2").unwrap();
        let mut cross = SessionTxn::default();
        cross.note_link(None);
        cross.note_link(None);
        cross.note_link(Some(&q1));
        cross.note_link(Some(&q2));
        assert_eq!(cross.via(), Some(&q1));
        let mut plain = SessionTxn::default();
        plain.note_link(Some(&q1));
        plain.note_link(None);
        assert_eq!(plain.via(), None);
    }
}
