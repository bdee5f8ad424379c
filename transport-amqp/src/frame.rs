//! AMQP 1.0 framing: protocol headers, frame boundaries, and performatives encoded and decoded
//! with `fe2o3-amqp-types` / `serde_amqp`.
//!
//! Our own rather than fe2o3's `Transport`: we need to serve SASL and plain headers on one port,
//! reject short or oversized frames without panicking, split outgoing transfers ourselves (so
//! session transfer ids stay exact), and keep transfer payloads as received bytes.
//!
//! Read room starts at 2 KiB and doubles while reads fill it, up to 64 KiB; an idle
//! connection's tick gives its empty read buffer back, so an idle connection holds little.
//!
//! **Architecture Invariant:** nothing here panics on input: every length is checked before it
//! is used, and malformed input is a [`FrameError`] that closes the connection. A performative
//! reaches `serde_amqp` only as a slice that [`guard::check_value`] has passed, so no declared
//! length or count makes the decoder allocate more than the frame carries.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use fe2o3_amqp::frames::sasl;
use fe2o3_amqp_types::definitions::Handle;
use fe2o3_amqp_types::performatives::{Performative, Transfer};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::guard::{self, Limits};

mod hot;

/// Frame type of AMQP frames.
const TYPE_AMQP: u8 = 0x00;
/// Frame type of SASL frames.
const TYPE_SASL: u8 = 0x01;
/// The smallest frame every peer must accept.
pub const MIN_MAX_FRAME_SIZE: u32 = 512;

/// The 8-byte protocol header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolHeader {
    /// `AMQP 0 1 0 0`
    Amqp,
    /// `AMQP 3 1 0 0`
    Sasl,
    /// `AMQP 2 1 0 0` (TLS upgrade) or another version: refused.
    Other([u8; 8]),
}

impl ProtocolHeader {
    pub fn parse(bytes: [u8; 8]) -> Self {
        match bytes {
            [b'A', b'M', b'Q', b'P', 0, 1, 0, 0] => ProtocolHeader::Amqp,
            [b'A', b'M', b'Q', b'P', 3, 1, 0, 0] => ProtocolHeader::Sasl,
            other => ProtocolHeader::Other(other),
        }
    }

    pub fn bytes(self) -> [u8; 8] {
        match self {
            ProtocolHeader::Amqp => *b"AMQP\x00\x01\x00\x00",
            ProtocolHeader::Sasl => *b"AMQP\x03\x01\x00\x00",
            ProtocolHeader::Other(b) => b,
        }
    }
}

/// Why framing failed. All of these close the connection.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed by the peer")]
    Closed,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {size} bytes exceeds the maximum of {max}")]
    TooLarge { size: u32, max: u32 },
    #[error("malformed frame: {0}")]
    Malformed(String),
    #[error("cannot decode frame body: {0}")]
    Decode(String),
}

/// A frame as read: its channel and body (performative and, for transfers, the payload).
#[derive(Debug)]
pub enum InFrame {
    /// An empty frame (heartbeat).
    Empty,
    Amqp {
        channel: u16,
        performative: Box<Performative>,
        payload: Bytes,
    },
    Sasl(sasl::Frame),
}

/// Reads frames from a byte stream, with a limit on their size.
#[derive(Debug)]
pub struct FrameReader<R> {
    io: R,
    buf: BytesMut,
    max_frame_size: u32,
    /// How much room a read asks for: from [`MIN_READ_CHUNK`], doubled whenever a read fills
    /// all the room it had (the peer is sending faster), up to [`MAX_READ_CHUNK`].
    chunk: usize,
    /// Whether anything was read since the last [`FrameReader::release_idle_buffer`].
    active: bool,
}

/// The read room of a new or idle connection: enough for the handshake's frames.
const MIN_READ_CHUNK: usize = 2 * 1024;
/// The read room of a busy connection.
const MAX_READ_CHUNK: usize = 64 * 1024;

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(io: R) -> Self {
        FrameReader {
            io,
            buf: BytesMut::new(),
            max_frame_size: MIN_MAX_FRAME_SIZE,
            chunk: MIN_READ_CHUNK,
            active: false,
        }
    }

    /// Gives the read buffer's memory back when nothing is buffered, so an idle connection
    /// holds none; when nothing was read since the last call, reads start small again.
    pub fn release_idle_buffer(&mut self) {
        if !self.active {
            self.chunk = MIN_READ_CHUNK;
        }
        self.active = false;
        if self.buf.is_empty() && self.buf.capacity() > 0 {
            self.buf = BytesMut::new();
        }
    }

    /// Bytes of read buffer held (for tests and measurements).
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    pub fn set_max_frame_size(&mut self, max: u32) {
        self.max_frame_size = max.max(MIN_MAX_FRAME_SIZE);
    }

    async fn fill(&mut self, want: usize) -> Result<(), FrameError> {
        while self.buf.len() < want {
            let room = self.buf.capacity() - self.buf.len();
            if room < want - self.buf.len() || room < MIN_READ_CHUNK / 2 {
                self.buf.reserve((want - self.buf.len()).max(self.chunk));
            }
            let room = self.buf.capacity() - self.buf.len();
            let n = self.io.read_buf(&mut self.buf).await?;
            if n == 0 {
                return Err(FrameError::Closed);
            }
            self.active = true;
            if n == room {
                self.chunk = (self.chunk * 2).min(MAX_READ_CHUNK);
            }
        }
        Ok(())
    }

    /// Reads the 8-byte protocol header.
    pub async fn read_header(&mut self) -> Result<ProtocolHeader, FrameError> {
        self.fill(8).await?;
        let mut header = [0u8; 8];
        self.buf.copy_to_slice(&mut header);
        Ok(ProtocolHeader::parse(header))
    }

    /// Whether a whole frame (or a size that `read_frame` refuses at once) is already
    /// buffered, so `read_frame` needs no I/O.
    pub fn has_frame(&self) -> bool {
        if self.buf.len() < 4 {
            return false;
        }
        let size = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        size > self.max_frame_size || size < 8 || self.buf.len() >= size as usize
    }

    /// Reads the next frame.
    pub async fn read_frame(&mut self) -> Result<InFrame, FrameError> {
        self.fill(4).await?;
        let size = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        if size > self.max_frame_size {
            return Err(FrameError::TooLarge { size, max: self.max_frame_size });
        }
        if size < 8 {
            return Err(FrameError::Malformed(format!("frame size {size} is below 8")));
        }
        self.fill(size as usize).await?;
        let mut frame = self.buf.split_to(size as usize);
        let doff = frame[4];
        let kind = frame[5];
        let channel = u16::from_be_bytes([frame[6], frame[7]]);
        let body_start = usize::from(doff) * 4;
        if doff < 2 || body_start > frame.len() {
            return Err(FrameError::Malformed(format!("data offset {doff} out of range")));
        }
        frame.advance(body_start);
        if frame.is_empty() {
            return Ok(InFrame::Empty);
        }
        // Transfers and dispositions by hand (`hot.rs`, which reads only shapes it checks in
        // full, so they need no guard); the payload after them is the message codec's.
        if kind == TYPE_AMQP {
            if let Some((performative, end)) = hot::decode(&frame) {
                frame.advance(end);
                let performative = Box::new(performative);
                return Ok(InFrame::Amqp { channel, performative, payload: frame.freeze() });
            }
        }
        // Every length and count in the performative is checked against the frame before
        // `serde_amqp` sees it (see `guard`); the payload after it is the message codec's.
        let end = guard::check_value(&frame, Limits::PERFORMATIVE)
            .map_err(|e| FrameError::Decode(e.to_string()))?;
        let body = frame.split_to(end).freeze();
        match kind {
            TYPE_AMQP => {
                let performative = match serde_amqp::from_slice::<Performative>(&body) {
                    Ok(p) => p,
                    Err(e) => lenient::disposition(&body)
                        .ok_or_else(|| FrameError::Decode(e.to_string()))?,
                };
                Ok(InFrame::Amqp {
                    channel,
                    performative: Box::new(performative),
                    payload: frame.freeze(),
                })
            }
            TYPE_SASL => {
                let sasl = serde_amqp::from_slice::<sasl::Frame>(&body)
                    .map_err(|e| FrameError::Decode(e.to_string()))?;
                Ok(InFrame::Sasl(sasl))
            }
            other => Err(FrameError::Malformed(format!("unknown frame type {other}"))),
        }
    }
}

fn begin_frame(out: &mut BytesMut, kind: u8, channel: u16) -> usize {
    let start = out.len();
    out.put_u32(0); // size, patched by `end_frame`
    out.put_u8(2);
    out.put_u8(kind);
    out.put_u16(channel);
    start
}

fn end_frame(out: &mut BytesMut, start: usize) {
    let size = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

fn serialize_into<T: Serialize>(out: &mut BytesMut, value: &T) {
    let mut serializer = serde_amqp::ser::Serializer::from(out.writer());
    // Serializing a performative into memory cannot fail: every type here is plain data.
    value.serialize(&mut serializer).expect("performatives serialize into memory");
}

/// Appends an AMQP frame carrying `performative` to `out`.
pub fn write_performative(out: &mut BytesMut, channel: u16, performative: &Performative) {
    let start = begin_frame(out, TYPE_AMQP, channel);
    // Dispositions (one per message each way) by hand when `hot.rs` can write them.
    let written = match performative {
        Performative::Disposition(d) => hot::put_disposition(out, d),
        _ => false,
    };
    if !written {
        serialize_into(out, performative);
    }
    end_frame(out, start);
}

/// Appends an empty (heartbeat) frame.
pub fn write_empty(out: &mut BytesMut) {
    let start = begin_frame(out, TYPE_AMQP, 0);
    end_frame(out, start);
}

/// Appends a SASL frame.
pub fn write_sasl(out: &mut BytesMut, frame: &sasl::Frame) {
    let start = begin_frame(out, TYPE_SASL, 0);
    serialize_into(out, frame);
    end_frame(out, start);
}

/// The transfer that starts delivery `delivery_id` of a whole message (message format 0) on
/// link `handle`, as [`write_transfer`] takes it.
pub fn delivery_transfer(handle: u32, delivery_id: u32, tag: Vec<u8>, settled: bool) -> Transfer {
    Transfer {
        handle: Handle(handle),
        delivery_id: Some(delivery_id),
        delivery_tag: Some(tag.into()),
        message_format: Some(0),
        settled: Some(settled),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    }
}

/// Appends a transfer, split into as many frames as `max_frame_size` needs; the first frame
/// carries the delivery fields, continuations only the handle (and `more`). Returns the number
/// of frames written (each uses one transfer id of the session).
///
/// A delivery's transfer (nothing past its first six fields) is written by hand (`hot.rs`),
/// others through serde_amqp.
pub fn write_transfer(
    out: &mut BytesMut,
    channel: u16,
    transfer: Transfer,
    mut payload: Bytes,
    max_frame_size: u32,
) -> u32 {
    if !hot::writable(&transfer) {
        return write_transfer_serialized(out, channel, transfer, payload, max_frame_size);
    }
    let continuation = continuation_of(&transfer);
    let mut performative = &transfer;
    let mut frames = 0;
    loop {
        frames += 1;
        let start = begin_frame(out, TYPE_AMQP, channel);
        let more_at = hot::put_transfer(out, performative);
        let room = (max_frame_size as usize).saturating_sub(out.len() - start).max(1);
        let last = payload.len() <= room;
        hot::set_more(out, more_at, !last);
        out.extend_from_slice(&payload.split_to(room.min(payload.len())));
        end_frame(out, start);
        if last {
            return frames;
        }
        performative = &continuation;
    }
}

/// The transfer of each frame after a delivery's first: its link, `more`, and its `batchable`.
fn continuation_of(first: &Transfer) -> Transfer {
    Transfer {
        handle: first.handle.clone(),
        delivery_id: None,
        delivery_tag: None,
        message_format: None,
        settled: None,
        more: true,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: first.batchable,
    }
}

/// [`write_transfer`] through serde_amqp, for a transfer with a state or flags past `more`.
fn write_transfer_serialized(
    out: &mut BytesMut,
    channel: u16,
    transfer: Transfer,
    mut payload: Bytes,
    max_frame_size: u32,
) -> u32 {
    let mut first = Some(transfer.clone());
    let continuation = continuation_of(&transfer);
    let mut frames = 0;
    loop {
        let mut performative = first.take().unwrap_or_else(|| continuation.clone());
        frames += 1;
        // Try it as the last frame first: that is the common case, and `more = false` encodes
        // no larger than `more = true`.
        performative.more = false;
        let start = begin_frame(out, TYPE_AMQP, channel);
        serialize_into(out, &Performative::Transfer(performative.clone()));
        let used = out.len() - start;
        if used + payload.len() <= max_frame_size as usize {
            out.extend_from_slice(&payload);
            end_frame(out, start);
            return frames;
        }
        out.truncate(start);
        performative.more = true;
        let start = begin_frame(out, TYPE_AMQP, channel);
        serialize_into(out, &Performative::Transfer(performative));
        let used = out.len() - start;
        let room = (max_frame_size as usize).saturating_sub(used).max(1);
        out.extend_from_slice(&payload.split_to(room.min(payload.len())));
        end_frame(out, start);
    }
}

/// Decoding of what strict typed decoding refuses but clients send.
mod lenient {
    use fe2o3_amqp_types::definitions::{Error, ErrorCondition, Fields, Role};
    use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Modified, Rejected, Released};
    use fe2o3_amqp_types::performatives::{Disposition, Performative};
    use fe2o3_amqp_types::primitives::{OrderedMap, Symbol, Value};
    use serde_amqp::descriptor::Descriptor;

    /// A disposition whose error info or annotations use string keys where the spec says
    /// symbols (rhea, the js SDK's AMQP stack, sends `rejected` info that way).
    pub(super) fn disposition(body: &[u8]) -> Option<Performative> {
        let Value::Described(d) = serde_amqp::from_slice::<Value>(body).ok()? else { return None };
        if d.descriptor != Descriptor::Code(0x15) {
            return None;
        }
        let Value::List(fields) = d.value else { return None };
        let get = |i: usize| fields.get(i).cloned().unwrap_or(Value::Null);
        let role = match get(0) {
            Value::Bool(true) => Role::Receiver,
            Value::Bool(false) => Role::Sender,
            _ => return None,
        };
        let first = uint(&get(1))?;
        let last = uint(&get(2));
        let settled = matches!(get(3), Value::Bool(true));
        let state = delivery_state(get(4));
        let batchable = matches!(get(5), Value::Bool(true));
        Some(Performative::Disposition(Disposition {
            role,
            first,
            last,
            settled,
            state,
            batchable,
        }))
    }

    fn uint(v: &Value) -> Option<u32> {
        match v {
            Value::Uint(n) => Some(*n),
            Value::Ulong(n) => u32::try_from(*n).ok(),
            Value::Ubyte(n) => Some(u32::from(*n)),
            Value::Ushort(n) => Some(u32::from(*n)),
            _ => None,
        }
    }

    fn fields(v: Value) -> Option<Fields> {
        let Value::Map(map) = v else { return None };
        let mut out = OrderedMap::new();
        for (k, v) in map {
            let key = match k {
                Value::Symbol(s) => s,
                Value::String(s) => Symbol::from(s),
                _ => continue,
            };
            out.insert(key, v);
        }
        Some(out)
    }

    fn delivery_state(v: Value) -> Option<DeliveryState> {
        let Value::Described(d) = v else { return None };
        let Descriptor::Code(code) = d.descriptor else { return None };
        let list = match d.value {
            Value::List(l) => l,
            _ => Vec::new(),
        };
        let get = |i: usize| list.get(i).cloned().unwrap_or(Value::Null);
        Some(match code {
            0x24 => DeliveryState::Accepted(Accepted {}),
            0x26 => DeliveryState::Released(Released {}),
            0x27 => DeliveryState::Modified(Modified {
                delivery_failed: match get(0) {
                    Value::Bool(b) => Some(b),
                    _ => None,
                },
                undeliverable_here: match get(1) {
                    Value::Bool(b) => Some(b),
                    _ => None,
                },
                message_annotations: fields(get(2)),
            }),
            0x25 => DeliveryState::Rejected(Rejected { error: error(get(0)) }),
            _ => return None,
        })
    }

    fn error(v: Value) -> Option<Error> {
        let Value::Described(d) = v else { return None };
        let Value::List(list) = d.value else { return None };
        let get = |i: usize| list.get(i).cloned().unwrap_or(Value::Null);
        let condition = match get(0) {
            Value::Symbol(s) => s,
            Value::String(s) => Symbol::from(s),
            _ => return None,
        };
        let description = match get(1) {
            Value::String(s) => Some(s),
            _ => None,
        };
        Some(Error {
            condition: ErrorCondition::Custom(condition),
            description,
            info: fields(get(2)).map(Box::new),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp_types::performatives::{Close, Open};

    fn transfer() -> Transfer {
        delivery_transfer(1, 7, vec![1, 2, 3, 4], false)
    }

    #[tokio::test]
    async fn read_buffers_start_small_grow_with_traffic_and_are_given_back_when_idle() {
        let mut bytes = Vec::new();
        let mut out = BytesMut::new();
        write_empty(&mut out);
        for _ in 0..40 {
            write_transfer(&mut out, 0, transfer(), Bytes::from(vec![7u8; 3000]), 1 << 20);
        }
        bytes.extend_from_slice(&out);
        let mut reader = FrameReader::new(&bytes[..]);
        reader.set_max_frame_size(1 << 20);
        assert_eq!(reader.buffer_capacity(), 0, "a new connection holds no read buffer");
        reader.read_frame().await.unwrap();
        assert!(reader.buffer_capacity() <= 8 * 1024, "{}", reader.buffer_capacity());
        while reader.read_frame().await.is_ok() {}
        assert!(reader.chunk > MIN_READ_CHUNK, "reads grew with traffic");
        reader.release_idle_buffer();
        assert_eq!(reader.buffer_capacity(), 0, "an idle connection gives its buffer back");
        reader.release_idle_buffer();
        assert_eq!(reader.chunk, MIN_READ_CHUNK, "and starts small again");
    }

    async fn read_all(bytes: Vec<u8>, max: u32) -> Vec<Result<InFrame, FrameError>> {
        let mut reader = FrameReader::new(&bytes[..]);
        reader.set_max_frame_size(max);
        let mut frames = Vec::new();
        loop {
            match reader.read_frame().await {
                Err(FrameError::Closed) => return frames,
                other => {
                    let stop = other.is_err();
                    frames.push(other);
                    if stop {
                        return frames;
                    }
                }
            }
        }
    }

    fn open() -> Performative {
        Performative::Open(Open {
            container_id: "c".into(),
            hostname: None,
            max_frame_size: 65536.into(),
            channel_max: 65535.into(),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        })
    }

    #[tokio::test]
    async fn performatives_round_trip() {
        let mut out = BytesMut::new();
        write_performative(&mut out, 3, &open());
        write_empty(&mut out);
        write_performative(&mut out, 0, &Performative::Close(Close { error: None }));
        let frames = read_all(out.to_vec(), 65536).await;
        assert_eq!(frames.len(), 3);
        assert!(matches!(
            &frames[0],
            Ok(InFrame::Amqp { channel: 3, performative, .. }) if matches!(**performative, Performative::Open(_))
        ));
        assert!(matches!(&frames[1], Ok(InFrame::Empty)));
        assert!(matches!(
            &frames[2],
            Ok(InFrame::Amqp { performative, .. }) if matches!(**performative, Performative::Close(_))
        ));
    }

    #[tokio::test]
    async fn transfers_split_to_the_frame_size_and_reassemble() {
        let payload = Bytes::from((0..10_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let transfer = transfer();
        let mut out = BytesMut::new();
        let count = write_transfer(&mut out, 1, transfer, payload.clone(), 1024);
        let frames = read_all(out.to_vec(), 1024).await;
        assert_eq!(frames.len() as u32, count);
        assert!(count >= 10);
        let mut joined = Vec::new();
        for (i, frame) in frames.into_iter().enumerate() {
            let Ok(InFrame::Amqp { performative, payload, .. }) = frame else {
                panic!("frame {i} is not a transfer")
            };
            let Performative::Transfer(t) = *performative else {
                panic!("frame {i} is not a transfer")
            };
            assert_eq!(t.more, i + 1 < count as usize, "more flag of frame {i}");
            assert_eq!(t.delivery_id.is_some(), i == 0);
            joined.extend_from_slice(&payload);
        }
        assert_eq!(joined, payload.to_vec());
    }

    #[tokio::test]
    async fn malformed_frames_are_errors_not_panics() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("size below 8", vec![0, 0, 0, 5, 2, 0, 0, 0]),
            ("size 0", vec![0, 0, 0, 0]),
            ("doff 0", vec![0, 0, 0, 8, 0, 0, 0, 0]),
            ("doff past end", vec![0, 0, 0, 8, 9, 0, 0, 0]),
            ("unknown type", vec![0, 0, 0, 9, 2, 7, 0, 0, 1]),
            ("garbage body", vec![0, 0, 0, 12, 2, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]),
            ("oversized", vec![0, 0x10, 0, 0, 2, 0, 0, 0]),
        ];
        for (name, bytes) in cases {
            let frames = read_all(bytes, 4096).await;
            assert!(matches!(frames.last(), Some(Err(_))), "{name}: {frames:?}");
        }
        // Random garbage never panics.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let len = (seed % 64) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = read_all(bytes, 4096).await;
        }
    }

    #[tokio::test]
    async fn rejected_disposition_with_string_keyed_info_is_accepted() {
        use fe2o3_amqp_types::messaging::DeliveryState;
        use fe2o3_amqp_types::primitives::{OrderedMap, Value};
        use serde_amqp::described::Described;
        use serde_amqp::descriptor::Descriptor;
        let described = |code: u64, fields: Vec<Value>| {
            Value::Described(Box::new(Described {
                descriptor: Descriptor::Code(code),
                value: Value::List(fields),
            }))
        };
        let mut info = OrderedMap::new();
        info.insert(Value::String("DeadLetterReason".into()), Value::String("R".into()));
        let error = described(
            0x1d,
            vec![Value::Symbol("com.microsoft:dead-letter".into()), Value::Null, Value::Map(info)],
        );
        let disposition = described(
            0x15,
            vec![
                Value::Bool(true),
                Value::Uint(4),
                Value::Null,
                Value::Bool(false),
                described(0x25, vec![error]),
            ],
        );
        let body = serde_amqp::to_vec(&disposition).unwrap();
        let mut frame = ((8 + body.len()) as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&[2, 0, 0, 1]);
        frame.extend_from_slice(&body);
        let frames = read_all(frame, 4096).await;
        let Some(Ok(InFrame::Amqp { performative, .. })) = frames.into_iter().next() else {
            panic!("no frame")
        };
        let Performative::Disposition(d) = *performative else { panic!("not a disposition") };
        assert_eq!(d.first, 4);
        let Some(DeliveryState::Rejected(r)) = d.state else { panic!("not rejected") };
        let info = r.error.unwrap().info.unwrap();
        assert_eq!(info.get("DeadLetterReason"), Some(&Value::String("R".into())));
    }
}
