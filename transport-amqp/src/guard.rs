//! A bounds check of encoded AMQP values, run before any bytes reach `serde_amqp`.
//!
//! `serde_amqp` 0.18 trusts the lengths and counts it reads: its stream reader sizes a buffer to a
//! string's or binary's declared length before it reads a byte, so a frame of a few hundred bytes
//! that declares a gigabyte-long string makes the broker allocate and zero a gigabyte — before the
//! client has authenticated. This module walks the encoding first, without allocating, and refuses
//! it unless every value lies inside the bytes that carry it:
//!
//! * every variable-width value (binary, string, symbol) fits in what remains of its container;
//! * every list, map and array fits too, and its count is possible for its size: each item of a
//!   list or map takes at least one byte, each array element its constructor's fixed width (an
//!   element of width zero — null, true, uint0 — is charged one byte, so counts stay bounded);
//! * described values and containers nest at most [`Limits::max_depth`] deep, and the whole
//!   encoding holds at most [`Limits::max_values`] values — what decoding into `Value`s costs is
//!   then bounded by the bytes received;
//! * only format codes that AMQP 1.0 defines appear.
//!
//! Only encodings that pass are decoded, and only from a slice (`serde_amqp::from_slice`), never
//! through its stream reader.
//!
//! **Architecture Invariant:** this code allocates nothing and recurses at most `max_depth`
//! levels, whatever the input.

/// How much an encoding may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Nesting of described values, lists, maps and arrays.
    pub max_depth: u32,
    /// Values in all, counting every item of every container.
    pub max_values: usize,
}

impl Limits {
    /// For a performative (open, attach, flow, …) or a SASL frame: what clients send is a few
    /// dozen values.
    pub const PERFORMATIVE: Limits = Limits { max_depth: 16, max_values: 4096 };

    /// For a message of `len` bytes decoded into values (`$management` and `$cbs` requests):
    /// at least 4,096 values, and one per four bytes beyond that.
    pub fn message(len: usize) -> Limits {
        Limits { max_depth: 32, max_values: 4096usize.max(len / 4) }
    }
}

/// Why an encoding was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} at byte {at}")]
pub struct GuardError {
    pub what: &'static str,
    pub at: usize,
}

/// Checks the one value at the start of `bytes` and returns where it ends.
pub fn check_value(bytes: &[u8], limits: Limits) -> Result<usize, GuardError> {
    let mut walker = Walker { buf: bytes, pos: 0, values: 0, limits };
    walker.value(0)?;
    Ok(walker.pos)
}

/// Checks that `bytes` is a sequence of whole values (a message's sections, say).
pub fn check_values(bytes: &[u8], limits: Limits) -> Result<(), GuardError> {
    let mut walker = Walker { buf: bytes, pos: 0, values: 0, limits };
    while walker.pos < bytes.len() {
        walker.value(0)?;
    }
    Ok(())
}

/// How the bytes after a format code are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A fixed number of bytes (zero for null, true, false, uint0, ulong0, list0).
    Fixed(usize),
    /// A length of this many bytes, then that many bytes.
    Variable(usize),
    /// A list (or map when `map`): size and count of this many bytes each, then the items.
    Compound { width: usize, map: bool },
    /// An array: size and count of this many bytes each, one element constructor, the elements.
    Array(usize),
}

/// The shape of every format code AMQP 1.0 defines (types section 1.6); `None` for the others.
fn shape(code: u8) -> Option<Shape> {
    Some(match code {
        0x40..=0x45 => Shape::Fixed(0),
        0x50..=0x56 => Shape::Fixed(1),
        0x60 | 0x61 => Shape::Fixed(2),
        0x70..=0x74 => Shape::Fixed(4),
        0x80..=0x84 => Shape::Fixed(8),
        0x94 | 0x98 => Shape::Fixed(16),
        0xa0 | 0xa1 | 0xa3 => Shape::Variable(1),
        0xb0 | 0xb1 | 0xb3 => Shape::Variable(4),
        0xc0 => Shape::Compound { width: 1, map: false },
        0xc1 => Shape::Compound { width: 1, map: true },
        0xd0 => Shape::Compound { width: 4, map: false },
        0xd1 => Shape::Compound { width: 4, map: true },
        0xe0 => Shape::Array(1),
        0xf0 => Shape::Array(4),
        _ => return None,
    })
}

struct Walker<'a> {
    buf: &'a [u8],
    pos: usize,
    values: usize,
    limits: Limits,
}

impl Walker<'_> {
    fn fail<T>(&self, what: &'static str) -> Result<T, GuardError> {
        Err(GuardError { what, at: self.pos })
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn skip(&mut self, n: usize) -> Result<(), GuardError> {
        if n > self.remaining() {
            return self.fail("length beyond the end of the encoding");
        }
        self.pos += n;
        Ok(())
    }

    fn byte(&mut self) -> Result<u8, GuardError> {
        let Some(&b) = self.buf.get(self.pos) else {
            return self.fail("encoding cut short");
        };
        self.pos += 1;
        Ok(b)
    }

    /// Reads a big-endian unsigned number of `width` (1 or 4) bytes.
    fn number(&mut self, width: usize) -> Result<usize, GuardError> {
        if width > self.remaining() {
            return self.fail("encoding cut short");
        }
        let n = self.buf[self.pos..self.pos + width]
            .iter()
            .fold(0usize, |n, &b| (n << 8) | usize::from(b));
        self.pos += width;
        Ok(n)
    }

    fn count_value(&mut self) -> Result<(), GuardError> {
        self.values += 1;
        if self.values > self.limits.max_values {
            return self.fail("more values than allowed");
        }
        Ok(())
    }

    fn deeper(&self, depth: u32) -> Result<u32, GuardError> {
        if depth >= self.limits.max_depth {
            return self.fail("values nested too deeply");
        }
        Ok(depth + 1)
    }

    /// One value, constructor included.
    fn value(&mut self, depth: u32) -> Result<(), GuardError> {
        self.count_value()?;
        let code = self.constructor(depth)?;
        self.body(code, depth)
    }

    /// A constructor: a format code, or `0x00` + a descriptor value + a format code. Returns the
    /// format code.
    fn constructor(&mut self, depth: u32) -> Result<u8, GuardError> {
        let mut code = self.byte()?;
        let mut depth = depth;
        while code == 0x00 {
            depth = self.deeper(depth)?;
            self.value(depth)?;
            code = self.byte()?;
        }
        Ok(code)
    }

    /// The bytes that follow format code `code`.
    fn body(&mut self, code: u8, depth: u32) -> Result<(), GuardError> {
        let Some(layout) = shape(code) else {
            self.pos -= 1;
            return self.fail("unknown format code");
        };
        match layout {
            Shape::Fixed(n) => self.skip(n),
            Shape::Variable(width) => {
                let len = self.number(width)?;
                self.skip(len)
            }
            Shape::Compound { width, map } => {
                let (count, end) = self.sized(width)?;
                if map && count % 2 != 0 {
                    return self.fail("map with an odd number of items");
                }
                let depth = self.deeper(depth)?;
                for _ in 0..count {
                    self.value(depth)?;
                    if self.pos > end {
                        return self.fail("item beyond its container's size");
                    }
                }
                self.end_at(end)
            }
            Shape::Array(width) => {
                let (count, end) = self.sized(width)?;
                let depth = self.deeper(depth)?;
                if count == 0 {
                    // An empty array may still carry its element constructor.
                    if self.pos < end {
                        self.constructor(depth)?;
                    }
                    return self.end_at(end);
                }
                let element = self.constructor(depth)?;
                match shape(element) {
                    Some(Shape::Fixed(n)) => {
                        let size = count.checked_mul(n).filter(|&s| s <= end - self.pos.min(end));
                        let Some(size) = size else {
                            return self.fail("array elements beyond the array's size");
                        };
                        self.values = self.values.saturating_add(count);
                        if self.values > self.limits.max_values {
                            return self.fail("more values than allowed");
                        }
                        self.skip(size)?;
                    }
                    Some(_) => {
                        for _ in 0..count {
                            self.count_value()?;
                            self.body(element, depth)?;
                            if self.pos > end {
                                return self.fail("element beyond its array's size");
                            }
                        }
                    }
                    None => {
                        self.pos -= 1;
                        return self.fail("unknown format code");
                    }
                }
                self.end_at(end)
            }
        }
    }

    /// A container's size and count (each `width` bytes). The size must fit in what remains,
    /// and the count in the bytes that follow it: each list or map item takes at least a byte,
    /// and so is each array element charged, even one of width zero (null, true, uint0), so
    /// that no count outgrows the bytes that carry it. Returns the count and where the
    /// container ends.
    fn sized(&mut self, width: usize) -> Result<(usize, usize), GuardError> {
        let size = self.number(width)?;
        if size > self.remaining() {
            return self.fail("container size beyond the end of the encoding");
        }
        if size < width {
            return self.fail("container too small for its count");
        }
        let end = self.pos + size;
        let count = self.number(width)?;
        if count > end - self.pos {
            return self.fail("container claims more items than its size allows");
        }
        Ok((count, end))
    }

    fn end_at(&mut self, end: usize) -> Result<(), GuardError> {
        if self.pos != end {
            return self.fail("container size does not match its items");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::definitions::{Fields, Role};
    use fe2o3_amqp_types::messaging::message::__private::Serializable;
    use fe2o3_amqp_types::messaging::{
        AmqpValue, ApplicationProperties, Body, Message, MessageAnnotations, Properties, Source,
    };
    use fe2o3_amqp_types::performatives::{Attach, Disposition, Open, Performative};
    use fe2o3_amqp_types::primitives::{Array, OrderedMap, Symbol, Uuid, Value};

    use super::*;

    fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
        serde_amqp::to_vec(value).expect("serialize")
    }

    fn attach() -> Performative {
        let mut filter = fe2o3_amqp_types::messaging::FilterSet::new();
        filter.insert(Symbol::from("com.microsoft:session-filter"), Value::Null);
        let mut properties = Fields::new();
        properties.insert(Symbol::from("com.microsoft:timeout"), Value::Uint(60_000));
        Performative::Attach(Attach {
            name: "receiver-link".into(),
            handle: 1.into(),
            role: Role::Receiver,
            snd_settle_mode: Default::default(),
            rcv_settle_mode: Default::default(),
            source: Some(Box::new(Source::builder().address("orders").filter(filter).build())),
            target: None,
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: None,
            max_message_size: Some(1024),
            offered_capabilities: None,
            desired_capabilities: Some(Array(vec![Symbol::from("com.microsoft:session")])),
            properties: Some(properties),
        })
    }

    #[test]
    fn what_fe2o3_encodes_passes_whole() {
        let open = Performative::Open(Open {
            container_id: "client".into(),
            hostname: Some("localhost".into()),
            max_frame_size: 65_536.into(),
            channel_max: 255.into(),
            idle_time_out: Some(60_000),
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        });
        let disposition = Performative::Disposition(Disposition {
            role: Role::Receiver,
            first: 7,
            last: Some(9),
            settled: true,
            state: Some(fe2o3_amqp_types::messaging::DeliveryState::Accepted(
                fe2o3_amqp_types::messaging::Accepted {},
            )),
            batchable: false,
        });
        for performative in [open, attach(), disposition] {
            let bytes = encode(&performative);
            assert_eq!(check_value(&bytes, Limits::PERFORMATIVE), Ok(bytes.len()));
            // What follows the performative (a transfer's payload) is not looked at.
            let mut with_payload = bytes.clone();
            with_payload.extend_from_slice(&[0xff, 0xff]);
            assert_eq!(check_value(&with_payload, Limits::PERFORMATIVE), Ok(bytes.len()));
        }

        let mut body = OrderedMap::new();
        let tokens: Vec<Uuid> = (0..100u8).map(|i| Uuid::from([i; 16])).collect();
        body.insert(
            Value::String("lock-tokens".into()),
            Value::Array(Array(tokens.into_iter().map(Value::Uuid).collect())),
        );
        body.insert(
            Value::String("sequence-numbers".into()),
            Value::Array(Array((0..50i64).map(Value::Long).collect())),
        );
        body.insert(Value::String("empty".into()), Value::Array(Array(Vec::new())));
        body.insert(
            Value::String("list".into()),
            Value::List(vec![Value::Null, Value::Bool(true)]),
        );
        let message = Message::builder()
            .properties(Properties::builder().message_id(String::from("m1")).build())
            .message_annotations(MessageAnnotations::builder().insert("x-opt-a", 1i64).build())
            .application_properties(
                ApplicationProperties::builder().insert("operation", "com.microsoft:peek").build(),
            )
            .body(Body::Value(AmqpValue(Value::Map(body))))
            .build();
        let bytes = encode(&Serializable(message));
        assert_eq!(check_values(&bytes, Limits::message(bytes.len())), Ok(()));
    }

    fn refused(bytes: &[u8], what: &str) {
        let err = check_value(bytes, Limits::PERFORMATIVE).expect_err(what);
        assert!(err.to_string().contains(what), "{bytes:02x?}: {err}");
    }

    #[test]
    fn declared_lengths_and_counts_beyond_the_bytes_are_refused() {
        let huge = 0x4000_0000u32.to_be_bytes();
        let cat = |parts: &[&[u8]]| parts.concat();
        refused(&[0xa1, 0x05, b'a'], "length beyond the end");
        refused(&cat(&[&[0xb1], &huge, b"abc"]), "length beyond the end");
        refused(&cat(&[&[0xb0], &huge]), "length beyond the end");
        refused(&cat(&[&[0xb3], &huge]), "length beyond the end");
        refused(&[0xb1, 0, 0], "cut short");
        refused(&cat(&[&[0xd0], &huge, &[0, 0, 0, 1, 0x40]]), "container size beyond");
        refused(&cat(&[&[0xd0], &[0, 0, 0, 5], &[0xff; 4], &[0x40]]), "more items than its size");
        refused(&[0xc0, 0x02, 0x05, 0x40], "more items than its size");
        refused(&[0xc1, 0x04, 0x03, 0x40, 0x40, 0x40], "odd number");
        refused(&[0xc0, 0x00], "too small for its count");
        refused(&[0xc0, 0x03, 0x01, 0xa1, 0x05], "length beyond the end");
        refused(&[0xc0, 0x03, 0x01, 0x40, 0x40], "does not match its items");
        // Arrays: the count against the element width, zero-width elements charged a byte.
        refused(&cat(&[&[0xf0], &[0, 0, 0, 5], &[0xff; 4], &[0x40]]), "more items than its size");
        refused(&[0xe0, 0x04, 0x03, 0x81, 0, 0], "array elements beyond");
        refused(&[0xe0, 0x03, 0x02, 0xb1, 0, 0], "cut short");
        refused(&[0xe0, 0x02, 0x01, 0x57], "unknown format code");
        assert_eq!(
            check_value(&[0xe0, 0x03, 0x02, 0x40, 0x00], Limits::PERFORMATIVE),
            Err(GuardError { what: "container size does not match its items", at: 4 })
        );
        assert_eq!(check_value(&[0xe0, 0x02, 0x01, 0x40], Limits::PERFORMATIVE), Ok(4));
        assert_eq!(check_value(&[0xe0, 0x01, 0x00], Limits::PERFORMATIVE), Ok(3));
        refused(&[0x57], "unknown format code");
        refused(&[], "cut short");
    }

    #[test]
    fn depth_and_value_count_are_limited() {
        let mut deep = vec![0x00; 17];
        deep.push(0x40);
        refused(&deep, "nested too deeply");
        let mut nested = vec![0x40];
        for _ in 0..17 {
            let mut outer = vec![0xc0, nested.len() as u8 + 1, 0x01];
            outer.extend_from_slice(&nested);
            nested = outer;
        }
        refused(&nested, "nested too deeply");

        let mut many = vec![0xd0];
        many.extend_from_slice(&(4u32 + 5000).to_be_bytes());
        many.extend_from_slice(&5000u32.to_be_bytes());
        many.resize(many.len() + 5000, 0x40);
        refused(&many, "more values than allowed");
        assert_eq!(check_value(&many, Limits::message(many.len() * 4)), Ok(many.len()));

        let mut longs = vec![0xf0];
        longs.extend_from_slice(&(5u32 + 8 * 5000).to_be_bytes());
        longs.extend_from_slice(&5000u32.to_be_bytes());
        longs.push(0x81);
        longs.resize(longs.len() + 8 * 5000, 7);
        refused(&longs, "more values than allowed");
        assert_eq!(check_value(&longs, Limits::message(longs.len())), Ok(longs.len()));
    }

    #[test]
    fn random_bytes_never_panic() {
        let valid = encode(&attach());
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mut bytes = valid.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % bytes.len();
                bytes[at] = next() as u8;
            }
            bytes.truncate(1 + (next() as usize) % bytes.len());
            if let Ok(end) = check_value(&bytes, Limits::PERFORMATIVE) {
                assert!(end <= bytes.len());
                // What passes decodes (or fails) without trouble.
                let _ = serde_amqp::from_slice::<Performative>(&bytes[..end]);
            }
        }
    }
}
