//! `com.microsoft:renew-lock`: renews the locks of the given tokens, answers their expirations.

use fe2o3_amqp_types::primitives::Timestamp as AmqpTimestamp;
use fe2o3_amqp_types::primitives::{Array, Value};
use ironbus_core::{Broker, EntityAddress, LockToken};

use crate::error::WireError;
use crate::request::Request;

use super::fields::*;
use super::Outcome;

pub(super) async fn execute(
    broker: Broker,
    address: EntityAddress,
    request: &Request,
) -> Result<Outcome, WireError> {
    let mut expirations = Vec::new();
    for token in uuid_list(request, "lock-tokens")? {
        let until = broker.renew_lock(address.clone(), LockToken(token)).await?;
        expirations.push(Value::Timestamp(AmqpTimestamp::from_milliseconds(until.as_millis())));
    }
    Ok(Outcome::ok(Some(map([("expirations", Value::Array(Array(expirations)))]))))
}
