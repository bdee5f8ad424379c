//! The byte-level reader: constructors by width class, primitive values decoded, lists and maps
//! left encoded. Borrows from the input and allocates nothing.

use super::{CodecError, Result, MAX_DEPTH};

pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(super) fn truncated(&self) -> CodecError {
        CodecError::new(format!("truncated AMQP encoding at byte {}", self.pos))
    }

    pub(super) fn u8(&mut self) -> Result<u8> {
        let b = *self.buf.get(self.pos).ok_or_else(|| self.truncated())?;
        self.pos += 1;
        Ok(b)
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| self.truncated())?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(super) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub(super) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Skips one complete value (constructor included).
    pub(super) fn skip_value(&mut self, depth: u32) -> Result<()> {
        let code = self.u8()?;
        if code == 0x00 {
            let depth = depth
                .checked_sub(1)
                .ok_or_else(|| CodecError::new("described types nested too deeply"))?;
            self.skip_value(depth)?;
            return self.skip_value(depth);
        }
        self.skip_body(code)
    }

    /// Skips the bytes that follow the format code `code`, by its width class.
    pub(super) fn skip_body(&mut self, code: u8) -> Result<()> {
        let n = match code >> 4 {
            0x4 => 0,
            0x5 => 1,
            0x6 => 2,
            0x7 => 4,
            0x8 => 8,
            0x9 => 16,
            0xa | 0xc | 0xe => self.u8()? as usize,
            0xb | 0xd | 0xf => self.u32()? as usize,
            _ => {
                return Err(CodecError::new(format!(
                    "invalid AMQP format code {code:#04x} at byte {}",
                    self.pos - 1
                )))
            }
        };
        self.take(n).map(|_| ())
    }

    /// Reads one value, decoding the primitive types and the list/map framing.
    pub(super) fn value(&mut self) -> Result<Val<'a>> {
        let code = self.u8()?;
        Ok(match code {
            0x00 => {
                self.skip_value(MAX_DEPTH)?;
                self.skip_value(MAX_DEPTH)?;
                Val::Other
            }
            0x40 => Val::Null,
            0x41 => Val::Bool(true),
            0x42 => Val::Bool(false),
            0x56 => Val::Bool(self.u8()? != 0),
            0x50 => Val::UByte(self.u8()?),
            0x60 => Val::UShort(u16::from_be_bytes(self.array()?)),
            0x70 => Val::UInt(self.u32()?),
            0x52 => Val::UInt(self.u8()?.into()),
            0x43 => Val::UInt(0),
            0x80 => Val::ULong(self.u64()?),
            0x53 => Val::ULong(self.u8()?.into()),
            0x44 => Val::ULong(0),
            0x51 => Val::Byte(i8::from_be_bytes(self.array()?)),
            0x61 => Val::Short(i16::from_be_bytes(self.array()?)),
            0x71 => Val::Int(i32::from_be_bytes(self.array()?)),
            0x54 => Val::Int(i8::from_be_bytes(self.array()?).into()),
            0x81 => Val::Long(i64::from_be_bytes(self.array()?)),
            0x55 => Val::Long(i8::from_be_bytes(self.array()?).into()),
            0x72 => Val::Float(f32::from_bits(self.u32()?)),
            0x82 => Val::Double(f64::from_bits(self.u64()?)),
            0x73 => Val::Char(self.u32()?),
            0x83 => Val::Timestamp(i64::from_be_bytes(self.array()?)),
            0x98 => Val::Uuid(self.array()?),
            0xa0 => Val::Binary(self.var8()?),
            0xb0 => Val::Binary(self.var32()?),
            0xa1 => Val::String(self.var8()?),
            0xb1 => Val::String(self.var32()?),
            0xa3 => Val::Symbol(self.var8()?),
            0xb3 => Val::Symbol(self.var32()?),
            0x45 => Val::List(Compound { count: 0, items: &[] }),
            0xc0 => Val::List(self.compound8()?),
            0xd0 => Val::List(self.compound32()?),
            0xc1 => Val::Map(self.map(true)?),
            0xd1 => Val::Map(self.map(false)?),
            other => {
                self.skip_body(other)?;
                Val::Other
            }
        })
    }

    /// Reads one value and returns it with its encoded bytes.
    pub(super) fn value_with_bytes(&mut self) -> Result<(Val<'a>, &'a [u8])> {
        let start = self.pos;
        let v = self.value()?;
        Ok((v, &self.buf[start..self.pos]))
    }

    pub(super) fn var8(&mut self) -> Result<&'a [u8]> {
        let n = self.u8()? as usize;
        self.take(n)
    }

    pub(super) fn var32(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    pub(super) fn compound8(&mut self) -> Result<Compound<'a>> {
        let body = self.var8()?;
        let (&count, items) =
            body.split_first().ok_or_else(|| CodecError::new("compound value without a count"))?;
        Compound::new(count.into(), items)
    }

    pub(super) fn compound32(&mut self) -> Result<Compound<'a>> {
        let body = self.var32()?;
        if body.len() < 4 {
            return Err(CodecError::new("compound value without a count"));
        }
        let (count, items) = body.split_at(4);
        let count = u32::from_be_bytes([count[0], count[1], count[2], count[3]]);
        Compound::new(count as usize, items)
    }

    pub(super) fn map(&mut self, small: bool) -> Result<Compound<'a>> {
        let c = if small { self.compound8()? } else { self.compound32()? };
        if c.count % 2 != 0 {
            return Err(CodecError::new("map with an odd number of items"));
        }
        Ok(c)
    }
}

/// A decoded value; compound and exotic values stay undecoded.
#[derive(Debug, Clone, Copy)]
pub(super) enum Val<'a> {
    Null,
    Bool(bool),
    UByte(u8),
    UShort(u16),
    UInt(u32),
    ULong(u64),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Char(u32),
    Timestamp(i64),
    Uuid([u8; 16]),
    Binary(&'a [u8]),
    String(&'a [u8]),
    Symbol(&'a [u8]),
    List(Compound<'a>),
    Map(Compound<'a>),
    /// Decimals, arrays, described values and codes this codec does not know (skipped by width).
    Other,
}

impl Val<'_> {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub(super) fn as_u64(&self) -> Option<u64> {
        match *self {
            Val::UByte(v) => Some(v.into()),
            Val::UShort(v) => Some(v.into()),
            Val::UInt(v) => Some(v.into()),
            Val::ULong(v) => Some(v),
            Val::Byte(v) => u64::try_from(v).ok(),
            Val::Short(v) => u64::try_from(v).ok(),
            Val::Int(v) => u64::try_from(v).ok(),
            Val::Long(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, if it is an integer (or timestamp) of any width.
    pub(super) fn as_i64(&self) -> Option<i64> {
        match *self {
            Val::Byte(v) => Some(v.into()),
            Val::Short(v) => Some(v.into()),
            Val::Int(v) => Some(v.into()),
            Val::Long(v) | Val::Timestamp(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }
}

/// A list's or map's items, still encoded.
#[derive(Debug, Clone, Copy)]
pub(super) struct Compound<'a> {
    pub(super) count: usize,
    pub(super) items: &'a [u8],
}

impl<'a> Compound<'a> {
    pub(super) fn new(count: usize, items: &'a [u8]) -> Result<Self> {
        // Every item takes at least one byte; this bounds loops over `count`.
        if count > items.len() {
            return Err(CodecError::new("compound value claims more items than its size allows"));
        }
        Ok(Self { count, items })
    }

    pub(super) fn reader(&self) -> Reader<'a> {
        Reader::new(self.items)
    }
}

pub(super) fn utf8<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|_| CodecError::new(format!("{what} is not valid UTF-8")))
}
