//! `com.microsoft:update-disposition`: settles locked messages by token (complete, abandon,
//! defer, dead-letter), with properties to modify.

use fe2o3_amqp_types::primitives::Value;
use ironbus_core::{
    ApplicationProperties, Broker, BrokerError, Disposition, EntityAddress, EntityDescription,
    LockToken, SessionError, SubQueue, Transaction,
};

use crate::error::WireError;
use crate::request::Request;

use super::fields::*;
use super::Outcome;

pub(super) async fn execute(
    broker: Broker,
    address: EntityAddress,
    request: &Request,
    txn: Option<&Transaction>,
) -> Result<Outcome, WireError> {
    let status = match request.field("disposition-status") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Symbol(s)) => s.0.clone(),
        _ => return Err(WireError::bad_request("update-disposition needs disposition-status")),
    };
    let properties = match request.field("properties-to-modify") {
        Some(Value::Map(m)) => properties_to_modify(m),
        _ => ApplicationProperties::new(),
    };
    let text = |name: &str| match request.field(name) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    };
    let disposition = match status.as_str() {
        "completed" => Disposition::Complete,
        "abandoned" => Disposition::Abandon { properties },
        "defered" | "deferred" => Disposition::Defer { properties },
        "suspended" => Disposition::DeadLetter {
            reason: text("deadletter-reason"),
            description: text("deadletter-description"),
            properties,
        },
        other => {
            return Err(WireError::bad_request(format!("unknown disposition-status {other:?}")))
        }
    };
    let tokens = uuid_list(request, "lock-tokens")?;
    if let Some(txn) = txn {
        // Applied at commit; the messages stay locked until then.
        for token in tokens {
            broker.settle_in_transaction(
                txn,
                &address,
                None,
                LockToken(token),
                disposition.clone(),
            )?;
        }
        return Ok(Outcome::ok(None));
    }
    for token in tokens {
        match broker.settle(address.clone(), LockToken(token), disposition.clone()).await {
            Ok(()) => {}
            // A session message's lock is its session's: on a session entity, a lost lock is
            // the session's (js sends session-id on other entities too: not there).
            Err(BrokerError::MessageLockLost)
                if request.field("session-id").is_some()
                    && requires_session(&broker, &address).await =>
            {
                return Err(SessionError::LockLost.into());
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Outcome::ok(None))
}

async fn requires_session(broker: &Broker, address: &EntityAddress) -> bool {
    if address.queue != SubQueue::Main {
        return false;
    }
    match broker.get_entity(&address.entity).await.map(|info| info.description) {
        Ok(EntityDescription::Queue(q)) => q.requires_session,
        Ok(EntityDescription::Subscription(s)) => s.requires_session,
        _ => false,
    }
}
