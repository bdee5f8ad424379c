//! Request nodes (`$management`, `$cbs`) on a raw socket: when an unsettled request is settled
//! relative to its response.
//!
//! The sync Python SDK shares one socket between threads and reads one frame per call, holding
//! the socket while it waits up to its read time-out (0.2 s). A thread waiting for its response
//! stops reading once it has it; a thread whose response another thread read first is left
//! reading, and blocks every other thread's write until a frame arrives. With the disposition
//! behind the response, that read ends at once: renewing 300 locks from the AutoLockRenewer's
//! five threads went from 22 to about 100 a second on loopback.

mod common;

use fe2o3_amqp::types::definitions::{LinkError, Role};
use fe2o3_amqp::types::messaging::DeliveryState;
use fe2o3_amqp::types::performatives::Performative;
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use ironbus_core::{Broker, QueueDescription, ShutdownTrigger};

use common::raw_client::{flow, link_attach, map, request, status, Raw};

/// A broker with queue `q` behind an AMQP listener; a raw client on it with session 0 open.
async fn start() -> (Broker, Raw, ShutdownTrigger) {
    let broker = common::memory_broker().await;
    broker.create_queue("q", QueueDescription::default()).await.unwrap();
    let (addr, trigger) = common::serve(broker.clone()).await;
    let mut raw = Raw::connect(&addr.to_string()).await;
    raw.begin(0).await;
    (broker, raw, trigger)
}

/// Attaches the request link (handle 0) and the response link (handle 1, replies to `reply`)
/// of `node` on session 0.
async fn attach_node(raw: &mut Raw, node: &str) {
    raw.attach(0, link_attach(0, Role::Sender, node, None)).await;
    raw.attach(0, link_attach(1, Role::Receiver, node, Some("reply"))).await;
}

fn is_response(channel: u16, p: &Performative) -> bool {
    channel == 0 && matches!(p, Performative::Transfer(t) if t.handle.0 == 1)
}

fn settles(channel: u16, p: &Performative, id: u32) -> bool {
    channel == 0
        && matches!(p, Performative::Disposition(d)
            if d.role == Role::Receiver && d.first <= id && id <= d.last.unwrap_or(d.first))
}

/// Reads until the disposition of request delivery `id`; returns the response read before it,
/// if one was.
async fn response_before_settlement(raw: &mut Raw, id: u32) -> Option<bytes::Bytes> {
    let outcome = raw.outcome(0, id).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    let at = raw.seen.iter().position(|(ch, p, _)| is_response(*ch, p))?;
    Some(raw.seen.remove(at).2)
}

/// The status of a management response read before its request's settlement.
async fn settled_after_response(raw: &mut Raw, id: u32) -> Option<i32> {
    Some(status(&response_before_settlement(raw, id).await?).0)
}

fn peek_request(message_id: u64) -> Vec<u8> {
    let body =
        map(vec![("from-sequence-number", Value::Long(0)), ("message-count", Value::Int(1))]);
    request("com.microsoft:peek-message", message_id, "reply", body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsettled_management_request_is_settled_after_its_response() {
    let (_broker, mut raw, _trigger) = start().await;
    attach_node(&mut raw, "q/$management").await;
    raw.write(flow(0, 1, 10)).await;
    for id in 0..3 {
        raw.transfer(0, 0, id, false, None, peek_request(u64::from(id))).await;
        // Nothing to peek: 204.
        assert_eq!(settled_after_response(&mut raw, id).await, Some(204), "request {id}");
    }
    // A request refused before it runs (an unknown operation) is answered the same way.
    let body = request("com.microsoft:no-such-operation", 9, "reply", map(vec![]));
    raw.transfer(0, 0, 3, false, None, body).await;
    let refused = settled_after_response(&mut raw, 3).await;
    assert!(refused.is_some_and(|s| s >= 400), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsettled_put_token_is_settled_after_its_response() {
    let (_broker, mut raw, _trigger) = start().await;
    attach_node(&mut raw, "$cbs").await;
    raw.write(flow(0, 1, 10)).await;
    let token = request("put-token", 1, "reply", Value::String("not a token".to_owned()));
    raw.transfer(0, 0, 0, false, None, token).await;
    let payload = response_before_settlement(&mut raw, 0).await.expect("the response first");
    let response = ironbus_transport_amqp::request::Request::decode(&payload).unwrap();
    let status = response.application_properties.get("status-code");
    // Refused (the token does not parse), and answered before the settlement.
    assert!(matches!(status, Some(SimpleValue::Int(400..=499))), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_settled_while_its_response_waits_for_credit() {
    let (_broker, mut raw, _trigger) = start().await;
    attach_node(&mut raw, "q/$management").await;
    // No credit on the response link: the response waits, the settlement does not.
    raw.transfer(0, 0, 0, false, None, peek_request(1)).await;
    assert_eq!(settled_after_response(&mut raw, 0).await, None);
    raw.write(flow(0, 1, 1)).await;
    let (_, _, payload) = raw.expect(is_response).await;
    assert_eq!(status(&payload).0, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_settled_request_gets_its_response_and_no_disposition() {
    let (_broker, mut raw, _trigger) = start().await;
    attach_node(&mut raw, "q/$management").await;
    raw.write(flow(0, 1, 10)).await;
    raw.transfer(0, 0, 0, true, None, peek_request(1)).await;
    // An unsettled request after it: its disposition is the first one.
    raw.transfer(0, 0, 1, false, None, peek_request(2)).await;
    let (_, p, _) = raw.expect(|ch, p| ch == 0 && matches!(p, Performative::Disposition(_))).await;
    assert!(settles(0, &p, 1) && !settles(0, &p, 0), "{p:?}");
    let responses = raw.seen.iter().filter(|(ch, p, _)| is_response(*ch, p)).count();
    assert_eq!(responses, 2);
}

/// A peek request carrying `padding` bytes more.
fn padded_peek_request(message_id: u64, padding: usize) -> Vec<u8> {
    let body = map(vec![
        ("from-sequence-number", Value::Long(0)),
        ("message-count", Value::Int(1)),
        ("padding", Value::Binary(vec![0x55; padding].into())),
    ]);
    request("com.microsoft:peek-message", message_id, "reply", body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_management_request_over_1_mib_in_many_transfers_is_refused() {
    let (_broker, mut raw, _trigger) = start().await;
    attach_node(&mut raw, "q/$management").await;
    raw.write(flow(0, 1, 10)).await;
    // Just under 1 MiB, in many 64 KiB transfers: served.
    raw.transfer(0, 0, 0, false, None, padded_peek_request(1, 1000 * 1024)).await;
    assert_eq!(settled_after_response(&mut raw, 0).await, Some(204));

    // Over it: refused with amqp:link:message-size-exceeded, not buffered up to 100 MiB.
    raw.transfer(0, 0, 1, false, None, padded_peek_request(2, 1100 * 1024)).await;
    match raw.outcome(0, 1).await {
        DeliveryState::Rejected(r) => {
            let condition = r.error.map(|e| e.condition);
            assert_eq!(condition, Some(LinkError::MessageSizeExceeded.into()), "{condition:?}");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    // The link goes on serving.
    raw.transfer(0, 0, 2, false, None, peek_request(3)).await;
    assert_eq!(settled_after_response(&mut raw, 2).await, Some(204));

    // Pre-settled, nothing but the link's end can say it: detached with the error.
    raw.transfer(0, 0, 3, true, None, padded_peek_request(4, 1100 * 1024)).await;
    let (_, p, _) = raw
        .expect(|ch, p| ch == 0 && matches!(p, Performative::Detach(d) if d.handle.0 == 0))
        .await;
    let Performative::Detach(detach) = p else { unreachable!() };
    let condition = detach.error.map(|e| e.condition);
    assert_eq!(condition, Some(LinkError::MessageSizeExceeded.into()), "{condition:?}");
}
