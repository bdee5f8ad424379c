//! `send`, `peek` and `receive`: messages over AMQP (`schema/send.json`, `schema/messages.json`).

use std::io::{IsTerminal, Read};
use std::time::Duration;

use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::types::definitions::{self, ErrorCondition, Fields};
use fe2o3_amqp::types::messaging::{Body, Modified, Outcome};
use fe2o3_amqp::types::primitives::{Binary, OrderedMap, Value};
use fe2o3_amqp::Receiver;
use serde_json::{json, Value as Json};

use crate::amqp::{
    describe, map_get, value_integer, AmqpClient, AmqpMessage, ReceiveMode, SessionFilter,
};
use crate::args::{CancelScheduled, Peek, Receive, Send, Settle, SubQueue};
use crate::error::{CliError, Context, ErrorKind, Result};
use crate::message::{self, MessageView, Outgoing};
use crate::output;
use crate::time::parse_rfc3339;
use crate::Target;

/// Most messages one peek request asks for.
const PEEK_BATCH: u32 = 100;

/// The address of `entity`'s sub-queue.
pub(crate) fn sub_queue_path(entity: &str, sub_queue: SubQueue) -> String {
    let entity = entity.trim_matches('/');
    if sub_queue.transfer {
        format!("{entity}/$Transfer/$DeadLetterQueue")
    } else if sub_queue.dead_letter {
        format!("{entity}/$DeadLetterQueue")
    } else {
        entity.to_owned()
    }
}

/// Runs `send`.
pub(crate) async fn send(target: &Target, args: &Send) -> Result<()> {
    let body = match (&args.body, &args.file) {
        (Some(text), _) => text.clone().into_bytes(),
        (None, Some(path)) => std::fs::read(path)
            .context(ErrorKind::Io, || format!("reading the body from {}", path.display()))?,
        (None, None) => {
            if std::io::stdin().is_terminal() {
                return Err(CliError::usage(
                    "no body: give it as an argument, with --file, or on stdin (a pipe)",
                ));
            }
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context(ErrorKind::Io, || "reading the body from stdin".to_owned())?;
            bytes
        }
    };
    let properties =
        args.properties.iter().map(|p| message::parse_property(p)).collect::<Result<Vec<_>>>()?;
    let schedule = args.schedule.as_deref().map(parse_rfc3339).transpose()?;
    if args.repeat == 0 {
        return Err(CliError::usage("--repeat must be at least 1"));
    }
    let outgoing = Outgoing {
        body,
        content_type: args.content_type.clone(),
        subject: args.subject.clone(),
        message_id: args.message_id.clone(),
        correlation_id: args.correlation_id.clone(),
        session_id: args.session_id.clone(),
        partition_key: args.partition_key.clone(),
        properties,
        schedule,
    };
    let mut client = target.amqp().await?;
    let mut ids = Vec::new();
    let mut sequence_numbers = Vec::new();
    if schedule.is_some() {
        // Scheduled through `$management`, which answers each message's sequence number
        // (what `cancel-scheduled` takes).
        let mut node = client.management(&args.entity).await?;
        for _ in 0..args.repeat {
            let message = outgoing.message();
            let view = MessageView::new(&message);
            let mut entry = vec![
                (
                    Value::String("message".into()),
                    Value::Binary(Binary::from(message::encode(&message)?)),
                ),
                (
                    Value::String("message-id".into()),
                    Value::String(view.json["message_id"].as_str().unwrap_or_default().to_owned()),
                ),
            ];
            if let Some(id) = &outgoing.session_id {
                entry.push((Value::String("session-id".into()), Value::String(id.clone())));
            }
            if let Some(key) = &outgoing.partition_key {
                entry.push((Value::String("partition-key".into()), Value::String(key.clone())));
            }
            let entry: OrderedMap<Value, Value> = entry.into_iter().collect();
            let answer = node
                .call(
                    "com.microsoft:schedule-message",
                    vec![("messages", Value::List(vec![Value::Map(entry)]))],
                )
                .await?;
            let numbers: Vec<i64> = match map_get(&answer, "sequence-numbers") {
                Some(Value::Array(a)) => a.0.iter().filter_map(value_integer).collect(),
                Some(Value::List(l)) => l.iter().filter_map(value_integer).collect(),
                _ => Vec::new(),
            };
            sequence_numbers.extend(numbers);
            ids.push(view.json["message_id"].clone());
        }
    } else {
        let mut sender = client.sender(&args.entity).await?;
        for n in 0..args.repeat {
            let message = outgoing.message();
            let view = MessageView::new(&message);
            let outcome = crate::amqp::send(&mut sender, message, &args.entity).await?;
            match outcome {
                Outcome::Accepted(_) => ids.push(view.json["message_id"].clone()),
                Outcome::Rejected(r) => {
                    return Err(CliError::refused(format!(
                        "sending message {} to `{}`: {}",
                        n + 1,
                        args.entity,
                        describe(r.error.as_ref())
                    )))
                }
                other => {
                    return Err(CliError::refused(format!(
                        "sending message {} to `{}`: the broker answered {other:?}",
                        n + 1,
                        args.entity
                    )))
                }
            }
        }
        let _ = sender.close().await;
    }
    client.close().await;
    let json = json!({
        "entity": args.entity,
        "sent": ids.len(),
        "message_ids": ids,
        "scheduled_enqueue_time": schedule.map(crate::time::format_rfc3339),
        "sequence_numbers": sequence_numbers,
    });
    output::emit(target.format, &json, || {
        let when = match schedule {
            Some(at) => format!(
                ", scheduled for {} (sequence numbers {})",
                crate::time::format_rfc3339(at),
                sequence_numbers.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
            ),
            None => String::new(),
        };
        format!("sent {} message(s) to {}{when}\n", ids.len(), args.entity)
    });
    Ok(())
}

/// Peeks up to `count` messages of `path` from `from`, in requests of [`PEEK_BATCH`].
pub(crate) async fn peek_messages(
    client: &mut AmqpClient,
    path: &str,
    from: i64,
    count: u32,
    session: Option<&str>,
) -> Result<Vec<AmqpMessage>> {
    let mut node = client.management(path).await?;
    let mut messages = Vec::new();
    let mut next = from;
    while (messages.len() as u32) < count {
        let ask = (count - messages.len() as u32).min(PEEK_BATCH);
        let mut body = vec![
            ("from-sequence-number", Value::Long(next)),
            ("message-count", Value::Int(ask as i32)),
        ];
        if let Some(id) = session {
            body.push(("session-id", Value::String(id.to_owned())));
        }
        let answer = node.call("com.microsoft:peek-message", body).await?;
        let Some(Value::List(items)) = map_get(&answer, "messages") else { break };
        if items.is_empty() {
            break;
        }
        for item in items {
            let Some(Value::Binary(bytes)) = map_get(item, "message") else {
                return Err(CliError::protocol("a peeked message is not binary"));
            };
            let message = message::decode(bytes.as_slice())?;
            let seq = message
                .message_annotations
                .as_ref()
                .and_then(|a| {
                    a.0.get(&fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(
                        "x-opt-sequence-number".into(),
                    ))
                })
                .and_then(value_integer);
            match seq {
                Some(s) => next = next.max(s + 1),
                None => return Err(CliError::protocol("a peeked message has no sequence number")),
            }
            messages.push(message);
        }
    }
    Ok(messages)
}

/// Runs `peek`.
pub(crate) async fn peek(target: &Target, args: &Peek) -> Result<()> {
    let path = sub_queue_path(&args.entity, args.sub_queue);
    let mut client = target.amqp().await?;
    let messages =
        peek_messages(&mut client, &path, args.from_sequence, args.count, args.session.as_deref())
            .await?;
    client.close().await;
    let views: Vec<MessageView> = messages.iter().map(MessageView::new).collect();
    let dead = args.sub_queue.dead_letter || args.sub_queue.transfer;
    print_messages(target, &path, &views, None, dead, args.full);
    Ok(())
}

fn print_messages(
    target: &Target,
    path: &str,
    views: &[MessageView],
    settled: Option<&str>,
    dead: bool,
    full: bool,
) {
    let mut json = json!({
        "entity": path,
        "messages": views.iter().map(|v| v.json.clone()).collect::<Vec<Json>>(),
    });
    if let Some(s) = settled {
        json["settlement"] = Json::String(s.to_owned());
    }
    output::emit(target.format, &json, || message::table(views, dead, full));
}

/// Receives up to `count` messages from `receiver`, waiting at most `timeout` for each.
pub(crate) async fn receive_deliveries(
    receiver: &mut Receiver,
    path: &str,
    count: u32,
    timeout: Duration,
) -> Result<Vec<Delivery<Body<Value>>>> {
    receiver
        .set_credit(count)
        .await
        .context(ErrorKind::Connection, || format!("asking `{path}` for messages"))?;
    let mut deliveries = Vec::new();
    while (deliveries.len() as u32) < count {
        match tokio::time::timeout(timeout, receiver.recv::<Body<Value>>()).await {
            Ok(delivery) => deliveries.push(
                delivery.context(ErrorKind::Connection, || format!("receiving from `{path}`"))?,
            ),
            Err(_elapsed) => break,
        }
    }
    Ok(deliveries)
}

/// Settles a peek-locked delivery as `settle` says.
pub(crate) async fn settle(
    receiver: &Receiver,
    delivery: &Delivery<Body<Value>>,
    settle: Settle,
    reason: Option<&str>,
    description: Option<&str>,
) -> Result<()> {
    let result = match settle {
        Settle::Complete => receiver.accept(delivery).await,
        Settle::Abandon => {
            let modified = Modified {
                delivery_failed: Some(true),
                undeliverable_here: None,
                message_annotations: None,
            };
            receiver.modify(delivery, modified).await
        }
        Settle::Defer => {
            let modified = Modified {
                delivery_failed: None,
                undeliverable_here: Some(true),
                message_annotations: None,
            };
            receiver.modify(delivery, modified).await
        }
        Settle::DeadLetter => {
            let mut info = Fields::new();
            if let Some(r) = reason {
                info.insert("DeadLetterReason".into(), Value::String(r.to_owned()));
            }
            if let Some(d) = description {
                info.insert("DeadLetterErrorDescription".into(), Value::String(d.to_owned()));
            }
            let error = definitions::Error::new(
                ErrorCondition::Custom("com.microsoft:dead-letter".into()),
                description.map(str::to_owned),
                Some(info),
            );
            receiver.reject(delivery, error).await
        }
    };
    result.context(ErrorKind::Refused, || format!("settling a message ({settle:?})"))
}

/// Runs `receive`.
pub(crate) async fn receive(target: &Target, args: &Receive) -> Result<()> {
    let path = sub_queue_path(&args.entity, args.sub_queue);
    let mode = if args.delete { ReceiveMode::ReceiveAndDelete } else { ReceiveMode::PeekLock };
    let mut client = target.amqp().await?;
    let session = match (&args.session, args.next_session) {
        (Some(id), _) => SessionFilter::Named(id),
        (None, true) => SessionFilter::Next,
        (None, false) => SessionFilter::None,
    };
    let mut receiver = client.receiver(&path, mode, session).await?;
    let deliveries =
        receive_deliveries(&mut receiver, &path, args.count, Duration::from_secs(args.timeout))
            .await?;
    let mut views = Vec::new();
    for delivery in &deliveries {
        if mode == ReceiveMode::PeekLock {
            settle(
                &receiver,
                delivery,
                args.then,
                args.reason.as_deref(),
                args.description.as_deref(),
            )
            .await?;
        }
        views.push(MessageView::new(delivery.message()));
    }
    let _ = receiver.close().await;
    client.close().await;
    let settled = if args.delete {
        "receive-and-delete"
    } else {
        match args.then {
            Settle::Complete => "complete",
            Settle::Abandon => "abandon",
            Settle::Defer => "defer",
            Settle::DeadLetter => "dead-letter",
        }
    };
    let dead = args.sub_queue.dead_letter || args.sub_queue.transfer;
    print_messages(target, &path, &views, Some(settled), dead, args.full);
    Ok(())
}

/// Most sequence numbers one cancel request names.
const CANCEL_BATCH: usize = 100;

/// Cancels the scheduled messages `sequence_numbers` of `entity` on `client`.
pub(crate) async fn cancel(
    client: &mut AmqpClient,
    entity: &str,
    sequence_numbers: &[i64],
) -> Result<()> {
    let mut node = client.management(entity).await?;
    for chunk in sequence_numbers.chunks(CANCEL_BATCH) {
        let numbers = chunk.iter().map(|n| Value::Long(*n)).collect();
        node.call(
            "com.microsoft:cancel-scheduled-message",
            vec![("sequence-numbers", Value::Array(fe2o3_amqp::types::primitives::Array(numbers)))],
        )
        .await?;
    }
    Ok(())
}

/// Runs `cancel-scheduled`.
pub(crate) async fn cancel_scheduled(target: &Target, args: &CancelScheduled) -> Result<()> {
    let mut client = target.amqp().await?;
    cancel(&mut client, &args.entity, &args.sequence_numbers).await?;
    client.close().await;
    let json = json!({ "entity": args.entity, "cancelled": args.sequence_numbers });
    output::emit(target.format, &json, || {
        format!(
            "cancelled {} scheduled message(s) of {}\n",
            args.sequence_numbers.len(),
            args.entity
        )
    });
    Ok(())
}
