//! `com.microsoft:cancel-scheduled-message`: removes scheduled messages by sequence number.

use ironbus_core::{Broker, EntityAddress, SequenceNumber, Transaction};

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
    let numbers = long_list(request, "sequence-numbers")?;
    let seqs: Vec<SequenceNumber> = numbers.into_iter().map(SequenceNumber).collect();
    match txn {
        Some(txn) => broker.cancel_in_transaction(txn, &address, &seqs)?,
        None => broker.cancel_scheduled(address, &seqs).await?,
    }
    Ok(Outcome::ok(None))
}
