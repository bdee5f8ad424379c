//! `com.microsoft:cancel-scheduled-message`: removes scheduled messages by sequence number.

use ironbus_core::{Broker, EntityAddress, Transaction};

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
    let seqs = sequence_numbers(request)?;
    match txn {
        Some(txn) => broker.cancel_in_transaction(txn, &address, &seqs)?,
        None => broker.cancel_scheduled(address, &seqs).await?,
    }
    Ok(Outcome::ok(None))
}
