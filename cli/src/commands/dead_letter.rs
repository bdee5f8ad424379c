//! `dead-letter list` and `dead-letter resubmit`: the dead-letter queue of a queue or
//! subscription, with each message's DeadLetterReason and description
//! (`schema/messages.json`), and copies of its messages sent back (`schema/resubmit.json`).

use std::time::Duration;

use fe2o3_amqp::types::messaging::Outcome;
use serde_json::{json, Value as Json};

use crate::amqp::{describe, AmqpMessage, ReceiveMode, SessionFilter};
use crate::args::{DeadLetterAction, Settle, SubQueue};
use crate::commands::messages::{peek_messages, receive_deliveries, settle, sub_queue_path};
use crate::error::{CliError, Result};
use crate::message::{self, MessageView};
use crate::output;
use crate::Target;

/// How long `resubmit --remove` waits for the next dead letter before it stops.
const RECEIVE_WAIT: Duration = Duration::from_secs(3);

/// Runs `dead-letter <action>`.
pub(crate) async fn run(target: &Target, action: DeadLetterAction) -> Result<()> {
    match action {
        DeadLetterAction::List { entity, count } => list(target, &entity, count).await,
        DeadLetterAction::Resubmit { entity, to, remove, count } => {
            resubmit(target, &entity, to.as_deref(), remove, count).await
        }
    }
}

async fn list(target: &Target, entity: &str, count: u32) -> Result<()> {
    let path = sub_queue_path(entity, SubQueue { dead_letter: true, transfer: false });
    let mut client = target.amqp().await?;
    let messages = peek_messages(&mut client, &path, 0, count, None).await?;
    client.close().await;
    let views: Vec<MessageView> = messages.iter().map(MessageView::new).collect();
    let json = json!({ "entity": path, "messages": views.iter().map(|v| v.json.clone()).collect::<Vec<Json>>() });
    output::emit(target.format, &json, || message::table(&views, true, false));
    Ok(())
}

/// Where a resubmission goes by default: the entity itself, or a subscription's topic.
fn default_target(entity: &str) -> String {
    let entity = entity.trim_matches('/');
    let lower = entity.to_ascii_lowercase();
    match lower.find("/subscriptions/") {
        Some(at) => entity[..at].to_owned(),
        None => entity.to_owned(),
    }
}

async fn resubmit(
    target: &Target,
    entity: &str,
    to: Option<&str>,
    remove: bool,
    count: u32,
) -> Result<()> {
    let source = sub_queue_path(entity, SubQueue { dead_letter: true, transfer: false });
    let destination = to.map_or_else(|| default_target(entity), |t| t.trim_matches('/').to_owned());
    // A copy with the original MessageId would be dropped as a duplicate.
    let fresh_ids = target.management().get(&destination).await?.flag("RequiresDuplicateDetection");
    let mut client = target.amqp().await?;
    let mut sender = client.sender(&destination).await?;
    let mut ids = Vec::new();
    let send = |message: AmqpMessage| {
        let copy = message::resubmission(&message, fresh_ids);
        let id = MessageView::new(&copy).json["message_id"].clone();
        (copy, id)
    };
    if remove {
        let mut receiver =
            client.receiver(&source, ReceiveMode::PeekLock, SessionFilter::None).await?;
        while (ids.len() as u32) < count {
            let want = (count - ids.len() as u32).min(100);
            let deliveries = receive_deliveries(&mut receiver, &source, want, RECEIVE_WAIT).await?;
            if deliveries.is_empty() {
                break;
            }
            for delivery in &deliveries {
                let (copy, id) = send(delivery.message().clone());
                match crate::amqp::send(&mut sender, copy, &destination).await? {
                    Outcome::Accepted(_) => {
                        settle(&receiver, delivery, Settle::Complete, None, None).await?;
                        ids.push(id);
                    }
                    other => {
                        let _ = settle(&receiver, delivery, Settle::Abandon, None, None).await;
                        return Err(refused(&destination, other));
                    }
                }
            }
        }
        let _ = receiver.close().await;
    } else {
        for message in peek_messages(&mut client, &source, 0, count, None).await? {
            let (copy, id) = send(message);
            match crate::amqp::send(&mut sender, copy, &destination).await? {
                Outcome::Accepted(_) => ids.push(id),
                other => return Err(refused(&destination, other)),
            }
        }
    }
    let _ = sender.close().await;
    client.close().await;
    let json = json!({
        "entity": source,
        "to": destination,
        "resubmitted": ids.len(),
        "removed": remove,
        "fresh_message_ids": fresh_ids,
        "message_ids": ids,
    });
    output::emit(target.format, &json, || {
        let removed = if remove { ", originals removed" } else { ", originals kept" };
        format!("resubmitted {} message(s) from {source} to {destination}{removed}\n", ids.len())
    });
    Ok(())
}

fn refused(destination: &str, outcome: Outcome) -> CliError {
    let text = match outcome {
        Outcome::Rejected(r) => describe(r.error.as_ref()),
        other => format!("{other:?}"),
    };
    CliError::refused(format!(
        "resubmitting to `{destination}`: {text}; the original stays dead-lettered"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscriptions_dead_letters_go_back_to_its_topic() {
        assert_eq!(default_target("orders"), "orders");
        assert_eq!(default_target("events/Subscriptions/all"), "events");
        assert_eq!(default_target("events/subscriptions/all/"), "events");
    }
}
