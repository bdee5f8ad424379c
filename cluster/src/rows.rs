//! The cluster's records: member rows, owner rows and the claim counter, as bytes.
//!
//! Every row starts with a version byte; a row that does not decode is treated as missing, and
//! a claim overwrites it (its guard holds the exact bytes read).

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use ironbus_core::StoreError;

use crate::config::NodeId;

const VERSION: u8 = 1;
const LEAVING: u8 = 1;
const RELEASED: u8 = 1;

/// A node's member row (its id is the key's): what it renews every renew interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberRow {
    /// Changes on every renewal: observers time its changes on their own clocks.
    pub(crate) heartbeat: u64,
    /// How long observers wait for a change before they consider the node dead.
    pub(crate) lease: Duration,
    /// The node is handing its partitions over and takes no new ones.
    pub(crate) leaving: bool,
    pub(crate) link_addr: String,
}

impl MemberRow {
    pub(crate) fn encode(&self) -> Bytes {
        let mut v = BytesMut::with_capacity(18 + self.link_addr.len());
        v.put_u8(VERSION);
        v.put_u64(self.heartbeat);
        v.put_u64(u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX));
        v.put_u8(if self.leaving { LEAVING } else { 0 });
        v.put_slice(self.link_addr.as_bytes());
        v.freeze()
    }

    pub(crate) fn decode(value: &[u8]) -> Result<MemberRow, StoreError> {
        let (heartbeat, lease, flags, rest) = fixed(value, "member row")?;
        let link_addr = String::from_utf8(rest.to_vec())
            .map_err(|_| StoreError::corrupted("member row: a link address that is not UTF-8"))?;
        Ok(MemberRow {
            heartbeat,
            lease: Duration::from_millis(lease),
            leaving: flags & LEAVING != 0,
            link_addr,
        })
    }
}

/// A partition's owner row: the node that claimed it last, with the token of that claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnerRow {
    pub(crate) node: NodeId,
    pub(crate) token: u64,
    /// The owner stopped serving the partition: the desired owner may claim it at once.
    pub(crate) released: bool,
}

impl OwnerRow {
    pub(crate) fn encode(&self) -> Bytes {
        let mut v = BytesMut::with_capacity(18 + self.node.as_str().len());
        v.put_u8(VERSION);
        v.put_u64(self.token);
        v.put_u64(0);
        v.put_u8(if self.released { RELEASED } else { 0 });
        v.put_slice(self.node.as_str().as_bytes());
        v.freeze()
    }

    pub(crate) fn decode(value: &[u8]) -> Result<OwnerRow, StoreError> {
        let (token, _, flags, rest) = fixed(value, "owner row")?;
        let node = std::str::from_utf8(rest)
            .map_err(|_| StoreError::corrupted("owner row: a node id that is not UTF-8"))?;
        Ok(OwnerRow { node: NodeId::new(node), token, released: flags & RELEASED != 0 })
    }

    /// The same row, marked released.
    pub(crate) fn released(&self) -> OwnerRow {
        OwnerRow { released: true, ..self.clone() }
    }
}

/// The version byte, two u64s, a flags byte and the rest.
fn fixed<'a>(value: &'a [u8], what: &str) -> Result<(u64, u64, u8, &'a [u8]), StoreError> {
    let corrupt = || StoreError::corrupted(format!("{what}: {} bytes", value.len()));
    match value.split_first() {
        Some((&VERSION, rest)) if rest.len() >= 17 => {
            let first = u64::from_be_bytes(rest[..8].try_into().map_err(|_| corrupt())?);
            let second = u64::from_be_bytes(rest[8..16].try_into().map_err(|_| corrupt())?);
            Ok((first, second, rest[16], &rest[17..]))
        }
        Some((&version, _)) if version != VERSION => {
            Err(StoreError::corrupted(format!("{what}: unknown version {version}")))
        }
        _ => Err(corrupt()),
    }
}

/// The claim counter's value: the last token handed out, 0 when none was.
pub(crate) fn decode_counter(value: Option<&[u8]>) -> Result<u64, StoreError> {
    let Some(value) = value else { return Ok(0) };
    let bytes: [u8; 8] = value.try_into().map_err(|_| {
        StoreError::corrupted(format!("claim counter: a value of {} bytes", value.len()))
    })?;
    Ok(u64::from_be_bytes(bytes))
}

pub(crate) fn encode_counter(token: u64) -> Bytes {
    Bytes::copy_from_slice(&token.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rows_round_trip_and_pin_their_bytes() {
        let member = MemberRow {
            heartbeat: 7,
            lease: Duration::from_secs(5),
            leaving: true,
            link_addr: "10.0.0.1:5700".into(),
        };
        assert_eq!(MemberRow::decode(&member.encode()).unwrap(), member);
        let owner = OwnerRow { node: NodeId::new("b"), token: 258, released: false };
        assert_eq!(OwnerRow::decode(&owner.encode()).unwrap(), owner);
        assert_eq!(
            owner.released().encode().as_ref(),
            [&[1u8, 0, 0, 0, 0, 0, 0, 1, 2][..], &[0; 8], &[1, b'b']].concat()
        );
        assert_eq!(decode_counter(Some(&encode_counter(9))).unwrap(), 9);
        assert_eq!(decode_counter(None).unwrap(), 0);
    }

    #[test]
    fn damaged_rows_are_refused() {
        assert!(OwnerRow::decode(&[1, 0, 0]).is_err());
        assert!(OwnerRow::decode(&[]).is_err());
        let mut future =
            OwnerRow { node: NodeId::new("b"), token: 1, released: false }.encode().to_vec();
        future[0] = 2;
        assert!(OwnerRow::decode(&future).is_err());
        assert!(decode_counter(Some(&[1, 2])).is_err());
    }
}
