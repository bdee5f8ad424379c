//! Messages: peek (main queue, dead-letter queue, one session), send, purge, dead-letter
//! resubmit, scheduled messages and their cancellation.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use base64::Engine;
use ironbus_core::auth::Right;
use ironbus_core::types::{MAX_DELETE_MESSAGES, MAX_SEQUENCE_NUMBERS};
use ironbus_core::{
    Disposition, EntityAddress, EntityDescription, EntityPath, Message, MessageState, ReceiveMode,
    ReceivedMessage, SequenceNumber, SubQueue,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{json_response, read_json, shape, ApiError, ApiResult, Call};

/// The most messages one peek returns.
const MAX_PEEK: usize = 200;
/// The most messages a scan for scheduled messages reads.
const MAX_SCAN: usize = 10_000;
/// The most dead letters one resubmit that removes the originals locks to find them.
const MAX_RESUBMIT_LOCKS: u32 = 1000;
/// The most scans one purge of scheduled messages makes.
const MAX_CANCEL_ROUNDS: usize = 100;
/// The most messages one send of the form makes.
const MAX_REPEAT: u32 = 1000;

/// The sub-queue the `queue` parameter names: `main` (default) or `deadletter`.
fn sub_queue(call: &Call) -> Result<SubQueue, ApiError> {
    match call.param("queue").unwrap_or("main") {
        "main" | "active" => Ok(SubQueue::Main),
        "deadletter" => Ok(SubQueue::DeadLetter),
        other => Err(ApiError::bad_request(format!("queue {other:?}: main or deadletter"))),
    }
}

fn number(call: &Call, name: &str, default: i64) -> Result<i64, ApiError> {
    match call.param(name) {
        None | Some("") => Ok(default),
        Some(text) => text
            .parse()
            .map_err(|_| ApiError::bad_request(format!("{name} {text:?} is not a number"))),
    }
}

/// Up to `max` messages of `address` from `from` on, across partitions (the broker answers
/// from one partition at a time).
async fn peek_from(
    call: &Call,
    address: &EntityAddress,
    session: Option<&str>,
    mut from: i64,
    max: usize,
) -> Result<Vec<ReceivedMessage>, ApiError> {
    let broker = &call.app.broker;
    let mut found = Vec::new();
    while found.len() < max {
        let want = max - found.len();
        let page = match session {
            Some(id) => broker.peek_session(address.clone(), id, SequenceNumber(from), want).await,
            None => broker.peek(address.clone(), SequenceNumber(from), want).await,
        }
        .map_err(ApiError::broker)?;
        let Some(last) = page.last() else { break };
        from = last.sequence_number().0.saturating_add(1);
        found.extend(page);
        if session.is_some() {
            break;
        }
    }
    Ok(found)
}

/// `GET messages?path=&queue=main|deadletter&from=&max=&session=`: a peek, without locking.
pub(super) async fn peek(call: &Call) -> ApiResult {
    call.require(Right::Listen)?;
    let address = EntityAddress { entity: call.path()?, queue: sub_queue(call)? };
    let from = number(call, "from", 0)?;
    let max = number(call, "max", 50)?.clamp(1, MAX_PEEK as i64) as usize;
    let session = call.param("session").filter(|s| !s.is_empty());
    let found = peek_from(call, &address, session, from, max).await?;
    let next = found.last().map(|m| m.sequence_number().0 + 1);
    let messages: Vec<Value> = found.iter().map(shape::message).collect();
    Ok(json_response(StatusCode::OK, &json!({ "messages": messages, "next": next })))
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Send {
    #[serde(default)]
    body: String,
    /// The body is base64 (binary) rather than text.
    #[serde(default)]
    body_is_base64: bool,
    content_type: Option<String>,
    subject: Option<String>,
    message_id: Option<String>,
    session_id: Option<String>,
    partition_key: Option<String>,
    correlation_id: Option<String>,
    to: Option<String>,
    reply_to: Option<String>,
    /// Time to live in seconds.
    time_to_live: Option<f64>,
    /// ISO 8601, UTC.
    scheduled_enqueue_time: Option<String>,
    #[serde(default)]
    properties: Map<String, Value>,
    /// How many copies to send (default 1).
    count: Option<u32>,
}

fn some(text: Option<String>) -> Option<String> {
    text.filter(|t| !t.is_empty())
}

/// `POST messages?path=`: sends one message (or `count` copies) built from the form.
pub(super) async fn send(call: &Call, body: Body) -> ApiResult {
    call.require(Right::Send)?;
    let path = call.path()?;
    let form: Send = read_json(&call.app, body).await?;
    let payload = if form.body_is_base64 {
        base64::engine::general_purpose::STANDARD
            .decode(form.body.trim())
            .map_err(|e| ApiError::bad_request(format!("body: not base64: {e}")))?
    } else {
        form.body.into_bytes()
    };
    let mut message = Message::new(payload);
    let p = &mut message.properties;
    p.content_type = some(form.content_type);
    p.subject = some(form.subject);
    p.message_id = some(form.message_id);
    p.session_id = some(form.session_id);
    p.partition_key = some(form.partition_key);
    p.correlation_id = some(form.correlation_id);
    p.to = some(form.to);
    p.reply_to = some(form.reply_to);
    if let Some(ttl) = form.time_to_live {
        if !(ttl.is_finite() && ttl > 0.0 && ttl < 1e13) {
            return Err(ApiError::bad_request("timeToLive: a positive number of seconds"));
        }
        p.time_to_live = Some(Duration::from_secs_f64(ttl));
    }
    if let Some(text) = some(form.scheduled_enqueue_time) {
        let at = crate::timefmt::parse_iso8601(&text).ok_or_else(|| {
            ApiError::bad_request(format!("scheduledEnqueueTime {text:?} is not an ISO 8601 time"))
        })?;
        p.scheduled_enqueue_time = Some(at);
    }
    for (name, value) in &form.properties {
        message.application_properties.insert(name.clone(), shape::to_property(name, value)?);
    }
    let count = form.count.unwrap_or(1);
    if count == 0 || count > MAX_REPEAT {
        return Err(ApiError::bad_request(format!("count: 1 to {MAX_REPEAT}")));
    }
    let mut sequence_numbers = Vec::new();
    let mut duplicates = 0;
    for _ in 0..count {
        let outcomes = call
            .app
            .broker
            .send(path.clone(), vec![message.clone()])
            .await
            .map_err(ApiError::broker)?;
        for outcome in outcomes {
            match outcome {
                ironbus_core::SendOutcome::Enqueued(seq) => sequence_numbers.push(seq.0),
                _ => duplicates += 1,
            }
        }
    }
    let body = json!({ "sent": sequence_numbers.len(), "sequenceNumbers": sequence_numbers, "duplicates": duplicates });
    Ok(json_response(StatusCode::CREATED, &body))
}

#[derive(Deserialize)]
struct Purge {
    /// `active`, `deadletter` or `scheduled`.
    queue: String,
}

/// `POST purge?path=`: deletes every active (and deferred), dead-lettered or scheduled
/// message, in batches of the broker's maximum until none is left. Locked messages stay.
pub(super) async fn purge(call: &Call, body: Body) -> ApiResult {
    call.require(Right::Manage)?;
    let path = call.path()?;
    let purge: Purge = read_json(&call.app, body).await?;
    let broker = &call.app.broker;
    let queue = match purge.queue.as_str() {
        "active" => SubQueue::Main,
        "deadletter" => SubQueue::DeadLetter,
        "scheduled" => {
            let cancelled = cancel_all_scheduled(call, &path).await?;
            return Ok(json_response(StatusCode::OK, &json!({ "deleted": cancelled })));
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "queue {other:?}: active, deadletter or scheduled"
            )))
        }
    };
    let address = EntityAddress { entity: path, queue };
    // Only what was there when the purge began: a message sent meanwhile stays.
    let before = broker.clock().now().saturating_add(Duration::from_millis(1));
    let mut deleted: u64 = 0;
    loop {
        let n = broker
            .delete_messages(address.clone(), MAX_DELETE_MESSAGES, before, None)
            .await
            .map_err(ApiError::broker)?;
        deleted += n;
        if n == 0 {
            break;
        }
    }
    Ok(json_response(StatusCode::OK, &json!({ "deleted": deleted })))
}

/// The scheduled messages of a queue or topic (scanning at most [`MAX_SCAN`] messages).
async fn scheduled_messages(
    call: &Call,
    path: &EntityPath,
) -> Result<Vec<ReceivedMessage>, ApiError> {
    let address = EntityAddress::from(path.clone());
    let mut found = Vec::new();
    let mut from = 0;
    let mut scanned = 0;
    while scanned < MAX_SCAN {
        let page = peek_from(call, &address, None, from, MAX_PEEK).await?;
        let Some(last) = page.last() else { break };
        from = last.sequence_number().0 + 1;
        scanned += page.len();
        found.extend(page.into_iter().filter(|m| m.broker.state == MessageState::Scheduled));
    }
    Ok(found)
}

/// Cancels the scheduled messages, scan after scan until one finds none (at most
/// [`MAX_CANCEL_ROUNDS`], so that a sender scheduling without pause cannot keep it going).
async fn cancel_all_scheduled(call: &Call, path: &EntityPath) -> Result<usize, ApiError> {
    let mut cancelled = 0;
    for _ in 0..MAX_CANCEL_ROUNDS {
        let found = scheduled_messages(call, path).await?;
        if found.is_empty() {
            break;
        }
        let numbers: Vec<SequenceNumber> = found.iter().map(|m| m.sequence_number()).collect();
        for chunk in numbers.chunks(MAX_SEQUENCE_NUMBERS) {
            call.app
                .broker
                .cancel_scheduled(path.clone(), chunk)
                .await
                .map_err(ApiError::broker)?;
        }
        cancelled += numbers.len();
    }
    Ok(cancelled)
}

/// `GET scheduled?path=`: the entity's scheduled messages.
pub(super) async fn scheduled(call: &Call) -> ApiResult {
    call.require(Right::Listen)?;
    let path = call.path()?;
    let found = scheduled_messages(call, &path).await?;
    let messages: Vec<Value> = found.iter().map(shape::message).collect();
    Ok(json_response(StatusCode::OK, &json!({ "messages": messages })))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Cancel {
    sequence_numbers: Vec<i64>,
}

/// `DELETE scheduled?path=`: cancels the scheduled messages named.
pub(super) async fn cancel(call: &Call, body: Body) -> ApiResult {
    call.require(Right::Send)?;
    let path = call.path()?;
    let cancel: Cancel = read_json(&call.app, body).await?;
    if cancel.sequence_numbers.is_empty() || cancel.sequence_numbers.len() > MAX_SEQUENCE_NUMBERS {
        return Err(ApiError::bad_request(format!("sequenceNumbers: 1 to {MAX_SEQUENCE_NUMBERS}")));
    }
    let numbers: Vec<SequenceNumber> =
        cancel.sequence_numbers.iter().map(|n| SequenceNumber(*n)).collect();
    call.app.broker.cancel_scheduled(path, &numbers).await.map_err(ApiError::broker)?;
    Ok(json_response(StatusCode::OK, &json!({ "cancelled": numbers.len() })))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Resubmit {
    sequence_numbers: Vec<i64>,
    /// Where to send the copies: by default the entity itself (a subscription's: its topic).
    target: Option<String>,
    /// Remove the dead letters once their copies are stored.
    #[serde(default)]
    remove: bool,
}

/// The copy of a dead letter that a resubmit sends: what its sender set and the body (the
/// body as a data section; the original encoding is not kept), with a fresh MessageId when
/// the target detects duplicates.
fn copy_of(dead: &ReceivedMessage, fresh_id: bool) -> Message {
    let mut message = Message::new(dead.message.body.clone());
    message.properties = dead.message.properties.clone();
    message.properties.scheduled_enqueue_time = None;
    message.application_properties = dead.message.application_properties.clone();
    for name in ["DeadLetterReason", "DeadLetterErrorDescription"] {
        message.application_properties.remove(name);
    }
    if fresh_id {
        message.properties.message_id = Some(uuid::Uuid::new_v4().to_string());
    }
    message
}

/// `POST resubmit?path=`: copies dead letters (by sequence number) to the entity they came
/// from or another one, optionally removing them once their copies are stored.
pub(super) async fn resubmit(call: &Call, body: Body) -> ApiResult {
    call.require(Right::Manage)?;
    let path = call.path()?;
    let resubmit: Resubmit = read_json(&call.app, body).await?;
    let wanted: BTreeSet<i64> = resubmit.sequence_numbers.iter().copied().collect();
    if wanted.is_empty() || wanted.len() > MAX_RESUBMIT_LOCKS as usize {
        return Err(ApiError::bad_request(format!("sequenceNumbers: 1 to {MAX_RESUBMIT_LOCKS}")));
    }
    let broker = call.app.broker.clone();
    let target = match resubmit.target.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        Some(text) => EntityPath::parse(text).map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => match broker.get_entity(&path).await.map_err(ApiError::broker)?.description {
            EntityDescription::Subscription(_) => path.parent().unwrap_or_else(|| path.clone()),
            _ => path.clone(),
        },
    };
    let fresh_id = match broker.get_entity(&target).await.map_err(ApiError::broker)?.description {
        EntityDescription::Queue(d) => d.requires_duplicate_detection,
        EntityDescription::Topic(d) => d.requires_duplicate_detection,
        _ => return Err(ApiError::bad_request(format!("{target} is not a queue or topic"))),
    };
    let dead_letters = EntityAddress { entity: path, queue: SubQueue::DeadLetter };
    let mut resubmitted = Vec::new();
    let mut removed = 0;
    if !resubmit.remove {
        for seq in &wanted {
            let found = peek_from(call, &dead_letters, None, *seq, 1).await?;
            if let Some(dead) = found.into_iter().find(|m| m.sequence_number().0 == *seq) {
                broker
                    .send(target.clone(), vec![copy_of(&dead, fresh_id)])
                    .await
                    .map_err(ApiError::broker)?;
                resubmitted.push(*seq);
            }
        }
    } else {
        // Lock the dead letters (a spawned task, so that a dropped request cannot strand the
        // locks), send each wanted one's copy, complete it once the copy is stored, and
        // release every other lock at once.
        let task_target = target.clone();
        let task = tokio::spawn(async move {
            let receiver =
                broker.open_receiver(dead_letters.clone(), ReceiveMode::PeekLock).await?;
            receiver.add_credit(MAX_RESUBMIT_LOCKS);
            receiver.drain().await;
            let mut locked = Vec::new();
            while let Some(m) = receiver.try_recv() {
                locked.push(m);
            }
            let mut done = Vec::new();
            let mut failure = None;
            for m in &locked {
                let token = m.lock_token();
                let seq = m.sequence_number().0;
                let disposition = if failure.is_none() && wanted.contains(&seq) {
                    match broker.send(task_target.clone(), vec![copy_of(m, fresh_id)]).await {
                        Ok(_) => {
                            done.push(seq);
                            Disposition::Complete
                        }
                        Err(e) => {
                            failure = Some(e);
                            Disposition::Release
                        }
                    }
                } else {
                    Disposition::Release
                };
                if let Some(token) = token {
                    let _ = broker.settle(dead_letters.clone(), token, disposition).await;
                }
            }
            match failure {
                Some(e) => Err(e),
                None => Ok(done),
            }
        });
        let done = task
            .await
            .map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("resubmit failed: {e}"))
            })?
            .map_err(ApiError::broker)?;
        removed = done.len();
        resubmitted = done;
    }
    let missing: Vec<i64> =
        resubmit.sequence_numbers.iter().copied().filter(|s| !resubmitted.contains(s)).collect();
    let body = json!({
        "target": target.as_str(),
        "resubmitted": resubmitted.len(),
        "removed": removed,
        "missing": missing,
        "freshMessageIds": fresh_id,
    });
    Ok(json_response(StatusCode::OK, &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_keeps_what_the_sender_set_but_the_dead_letter_marks() {
        let mut original = Message::new("body");
        original.properties.message_id = Some("m1".into());
        original.properties.subject = Some("s".into());
        original.application_properties.insert("k".into(), ironbus_core::PropertyValue::Long(1));
        original
            .application_properties
            .insert("DeadLetterReason".into(), ironbus_core::PropertyValue::String("x".into()));
        let dead = ReceivedMessage {
            message: std::sync::Arc::new(original),
            broker: Default::default(),
            lock: None,
        };
        let copy = copy_of(&dead, false);
        assert_eq!(copy.properties.message_id.as_deref(), Some("m1"));
        assert_eq!(copy.properties.subject.as_deref(), Some("s"));
        assert_eq!(copy.body, "body");
        assert!(copy.application_properties.contains_key("k"));
        assert!(!copy.application_properties.contains_key("DeadLetterReason"));
        assert_ne!(copy_of(&dead, true).properties.message_id.as_deref(), Some("m1"));
    }
}
