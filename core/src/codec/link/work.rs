//! A call's dispositions and a transaction's work ([`Work`]), as the link encodes them.

use std::sync::Arc;

use super::{lock_token, read_sequence_numbers, read_sub_queue, sequence_numbers, sub_queue};
use crate::codec::message::{decode_body, encode_body};
use crate::codec::primitives::{DecodeResult, Reader, Writer};
use crate::codec::properties::{decode_properties, encode_properties};
use crate::message::Disposition;
use crate::partition::Work;
use crate::types::SequenceNumber;

pub(super) fn encode_disposition(w: &mut Writer, d: &Disposition) {
    match d {
        Disposition::Complete => w.u8(0),
        Disposition::Abandon { properties } => {
            w.u8(1);
            encode_properties(w, properties);
        }
        Disposition::Release => w.u8(2),
        Disposition::Defer { properties } => {
            w.u8(3);
            encode_properties(w, properties);
        }
        Disposition::DeadLetter { reason, description, properties } => {
            w.u8(4);
            w.opt_str(reason);
            w.opt_str(description);
            encode_properties(w, properties);
        }
    }
}

pub(super) fn decode_disposition(r: &mut Reader<'_>) -> DecodeResult<Disposition> {
    Ok(match r.u8()? {
        0 => Disposition::Complete,
        1 => Disposition::Abandon { properties: decode_properties(r)? },
        2 => Disposition::Release,
        3 => Disposition::Defer { properties: decode_properties(r)? },
        4 => Disposition::DeadLetter {
            reason: r.opt(Reader::str)?,
            description: r.opt(Reader::str)?,
            properties: decode_properties(r)?,
        },
        _ => return Err(r.corrupted("disposition")),
    })
}

pub(super) fn encode_work(w: &mut Writer, work: &Work) {
    match work {
        Work::Send(m) => {
            w.u8(0);
            w.bytes(&encode_body(m));
        }
        Work::Transfer(m) => {
            w.u8(1);
            w.bytes(&encode_body(m));
        }
        Work::Schedule(n, m) => {
            w.u8(2);
            w.i64(n.0);
            w.bytes(&encode_body(m));
        }
        Work::Cancel(numbers) => {
            w.u8(3);
            sequence_numbers(w, numbers);
        }
        Work::Settle { queue, token, disposition } => {
            w.u8(4);
            w.u8(sub_queue(*queue));
            w.array(token.0.as_bytes());
            encode_disposition(w, disposition);
        }
        Work::SessionState { session, state } => {
            w.u8(5);
            w.str(session);
            w.opt_bytes(state);
        }
    }
}

pub(super) fn decode_work(r: &mut Reader<'_>) -> DecodeResult<Work> {
    Ok(match r.u8()? {
        0 => Work::Send(Arc::new(decode_body(&r.bytes()?)?)),
        1 => Work::Transfer(Arc::new(decode_body(&r.bytes()?)?)),
        2 => {
            let n = SequenceNumber(r.i64()?);
            Work::Schedule(n, Arc::new(decode_body(&r.bytes()?)?))
        }
        3 => Work::Cancel(read_sequence_numbers(r)?),
        4 => Work::Settle {
            queue: read_sub_queue(r)?,
            token: lock_token(r)?,
            disposition: decode_disposition(r)?,
        },
        5 => Work::SessionState { session: Arc::from(r.str()?), state: r.opt(Reader::bytes)? },
        _ => return Err(r.corrupted("transaction work")),
    })
}
