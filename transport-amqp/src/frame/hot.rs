//! The performatives of the message path — transfers and dispositions — read and written by
//! hand, once per message each way, instead of through `serde_amqp`'s generic (de)serializers
//! (which cost several times as much, and allocate).
//!
//! Reading takes only the shapes clients send on that path: a small-ulong descriptor, a list,
//! each field null or in one of its usual encodings, and a disposition's state absent,
//! accepted or released. For anything else it answers `None` and the caller decodes with
//! `serde_amqp` as before. What it does decode is exactly what `serde_amqp` decodes from the
//! same bytes (the tests compare the two over every one-byte change of a set of encodings).
//! It reads a frame's bytes before `guard::check_value` does, in its place: it takes only a
//! list whose declared size its fields fill exactly, each field read in full, so what it decodes
//! the guard passes, with the same end (the tests check that too); every read is
//! bounds-checked, so no input panics.
//!
//! Writing covers a transfer without a state, a receiver settle mode, resume, aborted or
//! batchable (what a delivery is): six fields, the last one `more`.

use bytes::{BufMut, BytesMut};
use fe2o3_amqp_types::definitions::{Handle, Role};
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Released};
use fe2o3_amqp_types::performatives::{Disposition, Performative, Transfer};

const DESCRIBED: u8 = 0x00;
const SMALL_ULONG: u8 = 0x53;
const TRANSFER: u8 = 0x14;
const DISPOSITION: u8 = 0x15;
const ACCEPTED: u8 = 0x24;
const RELEASED: u8 = 0x26;

const NULL: u8 = 0x40;
const TRUE: u8 = 0x41;
const FALSE: u8 = 0x42;
const BOOLEAN: u8 = 0x56;
const UINT0: u8 = 0x43;
const SMALL_UINT: u8 = 0x52;
const UINT: u8 = 0x70;
const VBIN8: u8 = 0xa0;
const VBIN32: u8 = 0xb0;
const LIST0: u8 = 0x45;
const LIST8: u8 = 0xc0;
const LIST32: u8 = 0xd0;

/// The transfer or disposition a frame body starts with, and where it ends (its payload
/// follows), or `None` when it is another performative or a shape left to `serde_amqp`.
pub(super) fn decode(body: &[u8]) -> Option<(Performative, usize)> {
    let mut r = Reader { buf: body, pos: 0 };
    if r.byte()? != DESCRIBED || r.byte()? != SMALL_ULONG {
        return None;
    }
    let code = r.byte()?;
    if code != TRANSFER && code != DISPOSITION {
        return None;
    }
    let (count, end) = r.list()?;
    let performative = if code == TRANSFER {
        Performative::Transfer(r.transfer(count)?)
    } else {
        Performative::Disposition(r.disposition(count)?)
    };
    (r.pos == end).then_some((performative, end))
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let bytes = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        let b = self.bytes(4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A list's header: its count and where it ends.
    fn list(&mut self) -> Option<(usize, usize)> {
        match self.byte()? {
            LIST0 => Some((0, self.pos)),
            LIST8 => {
                let size = usize::from(self.byte()?);
                let end = self.pos.checked_add(size)?;
                let count = usize::from(self.byte()?);
                Some((count, end))
            }
            LIST32 => {
                let size = self.u32()? as usize;
                let end = self.pos.checked_add(size)?;
                let count = self.u32()? as usize;
                Some((count, end))
            }
            _ => None,
        }
    }

    /// Field `i` of a list of `count`: `Some(None)` when null or absent.
    fn uint(&mut self, i: usize, count: usize) -> Option<Option<u32>> {
        if i >= count {
            return Some(None);
        }
        match self.byte()? {
            NULL => Some(None),
            UINT0 => Some(Some(0)),
            SMALL_UINT => Some(Some(u32::from(self.byte()?))),
            UINT => Some(Some(self.u32()?)),
            _ => None,
        }
    }

    fn boolean(&mut self, i: usize, count: usize) -> Option<Option<bool>> {
        if i >= count {
            return Some(None);
        }
        match self.byte()? {
            NULL => Some(None),
            TRUE => Some(Some(true)),
            FALSE => Some(Some(false)),
            BOOLEAN => match self.byte()? {
                0 => Some(Some(false)),
                1 => Some(Some(true)),
                _ => None,
            },
            _ => None,
        }
    }

    fn binary(&mut self, i: usize, count: usize) -> Option<Option<&'a [u8]>> {
        if i >= count {
            return Some(None);
        }
        match self.byte()? {
            NULL => Some(None),
            VBIN8 => {
                let len = usize::from(self.byte()?);
                Some(Some(self.bytes(len)?))
            }
            VBIN32 => {
                let len = self.u32()? as usize;
                Some(Some(self.bytes(len)?))
            }
            _ => None,
        }
    }

    /// A field this reader takes only when null or absent.
    fn null(&mut self, i: usize, count: usize) -> Option<()> {
        if i >= count || self.byte()? == NULL {
            Some(())
        } else {
            None
        }
    }

    fn transfer(&mut self, count: usize) -> Option<Transfer> {
        if count > 11 {
            return None;
        }
        let handle = self.uint(0, count)??;
        let delivery_id = self.uint(1, count)?;
        let delivery_tag = self.binary(2, count)?.map(|tag| tag.to_vec().into());
        let message_format = self.uint(3, count)?;
        let settled = self.boolean(4, count)?;
        let more = self.boolean(5, count)?.unwrap_or(false);
        self.null(6, count)?;
        self.null(7, count)?;
        let resume = self.boolean(8, count)?.unwrap_or(false);
        let aborted = self.boolean(9, count)?.unwrap_or(false);
        let batchable = self.boolean(10, count)?.unwrap_or(false);
        Some(Transfer {
            handle: Handle(handle),
            delivery_id,
            delivery_tag,
            message_format,
            settled,
            more,
            rcv_settle_mode: None,
            state: None,
            resume,
            aborted,
            batchable,
        })
    }

    fn disposition(&mut self, count: usize) -> Option<Disposition> {
        if count > 6 {
            return None;
        }
        let role = if self.boolean(0, count)?? { Role::Receiver } else { Role::Sender };
        let first = self.uint(1, count)??;
        let last = self.uint(2, count)?;
        let settled = self.boolean(3, count)?.unwrap_or(false);
        let state = self.state(4, count)?;
        let batchable = self.boolean(5, count)?.unwrap_or(false);
        Some(Disposition { role, first, last, settled, state, batchable })
    }

    /// A delivery state: null, absent, accepted or released (an empty list either way).
    fn state(&mut self, i: usize, count: usize) -> Option<Option<DeliveryState>> {
        if i >= count {
            return Some(None);
        }
        match self.byte()? {
            NULL => return Some(None),
            DESCRIBED => {}
            _ => return None,
        }
        if self.byte()? != SMALL_ULONG {
            return None;
        }
        let code = self.byte()?;
        let (fields, end) = self.list()?;
        if fields != 0 || end != self.pos {
            return None;
        }
        match code {
            ACCEPTED => Some(Some(DeliveryState::Accepted(Accepted {}))),
            RELEASED => Some(Some(DeliveryState::Released(Released {}))),
            _ => None,
        }
    }
}

/// Whether [`put_transfer`] can write `transfer`: nothing past its first six fields.
pub(super) fn writable(transfer: &Transfer) -> bool {
    transfer.rcv_settle_mode.is_none()
        && transfer.state.is_none()
        && !transfer.resume
        && !transfer.aborted
        && !transfer.batchable
}

/// Appends `transfer` (one [`writable`] says can be) as a performative with `more` false, and
/// returns where its `more` byte is, so that the caller can set it afterwards.
pub(super) fn put_transfer(out: &mut BytesMut, transfer: &Transfer) -> usize {
    let tag = transfer.delivery_tag.as_deref();
    // The fields' bytes: three uints (at most 5 each), a tag, two booleans.
    let wide = tag.is_some_and(|t| t.len() > 200);
    out.put_slice(&[DESCRIBED, SMALL_ULONG, TRANSFER]);
    let size_at = out.len();
    if wide {
        out.put_u8(LIST32);
        out.put_u32(0);
        out.put_u32(6);
    } else {
        out.put_slice(&[LIST8, 0, 6]);
    }
    let fields_from = out.len();
    put_uint(out, Some(transfer.handle.0));
    put_uint(out, transfer.delivery_id);
    match tag {
        None => out.put_u8(NULL),
        Some(tag) if tag.len() <= usize::from(u8::MAX) => {
            out.put_slice(&[VBIN8, tag.len() as u8]);
            out.put_slice(tag);
        }
        Some(tag) => {
            out.put_u8(VBIN32);
            out.put_u32(tag.len() as u32);
            out.put_slice(tag);
        }
    }
    put_uint(out, transfer.message_format);
    out.put_u8(match transfer.settled {
        None => NULL,
        Some(true) => TRUE,
        Some(false) => FALSE,
    });
    let more_at = out.len();
    out.put_u8(FALSE);
    // The list's size counts its count and its fields.
    if wide {
        let size = (out.len() - fields_from + 4) as u32;
        out[size_at + 1..size_at + 5].copy_from_slice(&size.to_be_bytes());
    } else {
        out[size_at + 1] = (out.len() - fields_from + 1) as u8;
    }
    more_at
}

/// Sets the `more` byte [`put_transfer`] wrote at `at`.
pub(super) fn set_more(out: &mut BytesMut, at: usize, more: bool) {
    out[at] = if more { TRUE } else { FALSE };
}

/// Appends `disposition` as a performative, encoded as `serde_amqp` encodes it (a field at its
/// default is null, trailing nulls are left out), when its state is absent, accepted or
/// released; false, with nothing written, for another state.
pub(super) fn put_disposition(out: &mut BytesMut, disposition: &Disposition) -> bool {
    let state: &[u8] = match &disposition.state {
        None => &[NULL],
        Some(DeliveryState::Accepted(_)) => &[DESCRIBED, SMALL_ULONG, ACCEPTED, LIST0],
        Some(DeliveryState::Released(_)) => &[DESCRIBED, SMALL_ULONG, RELEASED, LIST0],
        Some(_) => return false,
    };
    let flag = |set: bool| if set { TRUE } else { NULL };
    // At most 1 + 5 + 5 + 1 + 4 + 1 bytes of fields: a list8 always holds them.
    out.put_slice(&[DESCRIBED, SMALL_ULONG, DISPOSITION, LIST8, 0, 0]);
    let size_at = out.len() - 2;
    let fields_from = out.len();
    // Field i spans `bounds[i]..bounds[i + 1]`; trailing nulls are left out.
    let mut bounds = [fields_from; 7];
    out.put_u8(if disposition.role == Role::Receiver { TRUE } else { FALSE });
    bounds[1] = out.len();
    put_uint(out, Some(disposition.first));
    bounds[2] = out.len();
    put_uint(out, disposition.last);
    bounds[3] = out.len();
    out.put_u8(flag(disposition.settled));
    bounds[4] = out.len();
    out.put_slice(state);
    bounds[5] = out.len();
    out.put_u8(flag(disposition.batchable));
    bounds[6] = out.len();
    let mut count = 6;
    while count > 0 && out[bounds[count - 1]..bounds[count]] == [NULL] {
        count -= 1;
    }
    let end = bounds[count];
    out.truncate(end);
    out[size_at] = (end - fields_from + 1) as u8;
    out[size_at + 1] = count as u8;
    true
}

fn put_uint(out: &mut BytesMut, value: Option<u32>) {
    match value {
        None => out.put_u8(NULL),
        Some(0) => out.put_u8(UINT0),
        Some(n) if n <= u32::from(u8::MAX) => out.put_slice(&[SMALL_UINT, n as u8]),
        Some(n) => {
            out.put_u8(UINT);
            out.put_u32(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::definitions::ReceiverSettleMode;
    use fe2o3_amqp_types::messaging::{Modified, Rejected};

    use super::*;
    use crate::guard::{self, Limits};

    fn transfer(id: Option<u32>, tag: Option<Vec<u8>>, settled: Option<bool>) -> Transfer {
        Transfer {
            handle: Handle(3),
            delivery_id: id,
            delivery_tag: tag.map(Into::into),
            message_format: id.map(|_| 0),
            settled,
            more: false,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        }
    }

    fn disposition(state: Option<DeliveryState>, last: Option<u32>) -> Disposition {
        Disposition {
            role: Role::Receiver,
            first: 300,
            last,
            settled: true,
            state,
            batchable: false,
        }
    }

    /// What both decoders make of the same frame body, and where each says the performative
    /// ends: `serde_amqp` (as `read_frame` calls it, after the guard) and this file's.
    #[allow(clippy::type_complexity, reason = "a pair of the same pair")]
    fn both(bytes: &[u8]) -> (Option<(Performative, usize)>, Option<(Performative, usize)>) {
        let serde = match guard::check_value(bytes, Limits::PERFORMATIVE) {
            Ok(end) => serde_amqp::from_slice::<Performative>(&bytes[..end]).ok().map(|p| (p, end)),
            _ => None,
        };
        (serde, decode(bytes))
    }

    /// A message's first bytes, as a payload after a transfer.
    const PAYLOAD: &[u8] = &[0x00, 0x53, 0x75, 0xa0, 0x02, 0x68, 0x69];

    fn common_performatives() -> Vec<Performative> {
        vec![
            Performative::Transfer(transfer(Some(7), Some(vec![1, 2, 3, 4]), Some(false))),
            Performative::Transfer(transfer(Some(70_000), Some(vec![9; 16]), Some(true))),
            Performative::Transfer(transfer(None, None, None)),
            Performative::Transfer(Transfer {
                more: true,
                ..transfer(Some(0), Some(vec![]), None)
            }),
            Performative::Disposition(disposition(
                Some(DeliveryState::Accepted(Accepted {})),
                None,
            )),
            Performative::Disposition(disposition(
                Some(DeliveryState::Released(Released {})),
                Some(9),
            )),
            Performative::Disposition(Disposition {
                role: Role::Sender,
                settled: false,
                ..disposition(None, Some(70_000))
            }),
        ]
    }

    #[test]
    fn the_message_paths_performatives_decode_as_serde_amqp_decodes_them() {
        for performative in common_performatives() {
            let bytes = serde_amqp::to_vec(&performative).unwrap();
            assert_eq!(
                decode(&bytes),
                Some((performative.clone(), bytes.len())),
                "{performative:?}"
            );
            let (serde, hot) = both(&bytes);
            assert_eq!(serde, hot, "{performative:?}");
            let framed = [&bytes[..], PAYLOAD].concat();
            assert_eq!(
                decode(&framed),
                Some((performative.clone(), bytes.len())),
                "with a payload"
            );
        }
    }

    #[test]
    fn other_shapes_are_left_to_serde_amqp() {
        let rejected = DeliveryState::Rejected(Rejected { error: None });
        let modified = DeliveryState::Modified(Modified {
            delivery_failed: Some(true),
            undeliverable_here: None,
            message_annotations: None,
        });
        let others = [
            Performative::Disposition(disposition(Some(rejected), None)),
            Performative::Disposition(disposition(Some(modified), None)),
            Performative::Transfer(Transfer {
                rcv_settle_mode: Some(ReceiverSettleMode::Second),
                ..transfer(Some(1), Some(vec![1]), None)
            }),
            Performative::Transfer(Transfer {
                state: Some(DeliveryState::Accepted(Accepted {})),
                ..transfer(Some(1), Some(vec![1]), None)
            }),
            Performative::End(fe2o3_amqp_types::performatives::End { error: None }),
        ];
        for performative in others {
            let bytes = serde_amqp::to_vec(&performative).unwrap();
            assert_eq!(decode(&bytes), None, "{performative:?}");
            assert_eq!(decode(&[&bytes[..], PAYLOAD].concat()), None, "{performative:?}");
        }
    }

    /// Every encoding one byte away from a common one (each byte replaced by each value, or
    /// removed), alone and followed by a payload: where this file decodes it, the guard passes
    /// it with the same end and `serde_amqp` decodes the same performative.
    #[test]
    fn a_decoded_variant_always_equals_what_serde_amqp_decodes() {
        let mut decoded = 0;
        let encodings = common_performatives().into_iter().flat_map(|performative| {
            let bytes = serde_amqp::to_vec(&performative).unwrap();
            [[&bytes[..], PAYLOAD].concat(), bytes]
        });
        for bytes in encodings {
            for at in 0..bytes.len() {
                let mut variants: Vec<Vec<u8>> = (0..=255u8)
                    .map(|b| {
                        let mut v = bytes.clone();
                        v[at] = b;
                        v
                    })
                    .collect();
                let mut removed = bytes.clone();
                removed.remove(at);
                variants.push(removed);
                for variant in variants {
                    let (serde, hot) = both(&variant);
                    if let Some(hot) = hot {
                        decoded += 1;
                        assert_eq!(serde.as_ref(), Some(&hot), "{variant:02x?}");
                    }
                }
            }
        }
        assert!(decoded > 1000, "the variants exercise the decoder ({decoded})");
    }

    #[test]
    fn hand_written_dispositions_equal_serde_amqps() {
        let states = [
            None,
            Some(DeliveryState::Accepted(Accepted {})),
            Some(DeliveryState::Released(Released {})),
        ];
        let mut written = 0;
        for role in [Role::Sender, Role::Receiver] {
            for first in [0, 5, 300, 70_000, u32::MAX] {
                for last in [None, Some(0), Some(9), Some(70_000)] {
                    for settled in [false, true] {
                        for batchable in [false, true] {
                            for state in states.clone() {
                                let d = Disposition {
                                    role: role.clone(),
                                    first,
                                    last,
                                    settled,
                                    state,
                                    batchable,
                                };
                                let mut out = BytesMut::from(&b"before"[..]);
                                assert!(put_disposition(&mut out, &d));
                                let serde =
                                    serde_amqp::to_vec(&Performative::Disposition(d.clone()))
                                        .unwrap();
                                assert_eq!(&out[6..], &serde[..], "{d:?}");
                                assert_eq!(
                                    decode(&out[6..]),
                                    Some((Performative::Disposition(d), serde.len()))
                                );
                                written += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(written, 2 * 5 * 4 * 2 * 2 * 3);
        let rejected = Disposition {
            state: Some(DeliveryState::Rejected(Rejected { error: None })),
            ..disposition(None, None)
        };
        let mut out = BytesMut::new();
        assert!(!put_disposition(&mut out, &rejected));
        assert!(out.is_empty(), "nothing written for a state left to serde_amqp");
    }

    #[test]
    fn hand_encodings_equal_serde_amqps_and_decode_back() {
        let transfers = [
            transfer(Some(7), Some(vec![1, 2, 3, 4]), Some(false)),
            transfer(Some(300), Some(vec![5; 16]), Some(true)),
            transfer(Some(u32::MAX), Some(vec![6; 201]), None),
            transfer(Some(1), Some(vec![7; 300]), Some(false)),
            transfer(None, None, None),
        ];
        for t in transfers {
            assert!(writable(&t));
            for more in [false, true] {
                let mut out = BytesMut::new();
                let at = put_transfer(&mut out, &t);
                set_more(&mut out, at, more);
                let expected = Transfer { more, ..t.clone() };
                let serde = serde_amqp::from_slice::<Performative>(&out).unwrap();
                assert_eq!(serde, Performative::Transfer(expected.clone()));
                assert_eq!(decode(&out), Some((Performative::Transfer(expected), out.len())));
                assert_eq!(guard::check_value(&out, Limits::PERFORMATIVE), Ok(out.len()));
            }
        }
        assert!(!writable(&Transfer { batchable: true, ..transfer(None, None, None) }));
    }
}
