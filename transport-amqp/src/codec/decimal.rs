//! Decimal application properties, as Service Bus carries them.
//!
//! Service Bus reads application properties into .NET values and writes them back with its own
//! AMQP library, so a `decimal32`, `decimal64` or `decimal128` property comes back as a
//! `decimal128` in *that library's* layout, not the sender's bytes:
//!
//! ```text
//! byte 0      sign << 7 | (exponent >> 9)        exponent = 6176 − scale (biased)
//! byte 1      (exponent & 0x7f) << 1
//! bytes 2–3   0
//! bytes 4–15  the .NET decimal's 96-bit coefficient: high, middle, low 32-bit words, big-endian
//! ```
//!
//! That is not IEEE 754's layout (byte 0 there holds `exponent >> 7`), and the python SDK's
//! decoder is written against it: it cannot decode the IEEE form its own encoder sends (1.2345 →
//! `decimal.Overflow`). A stored message therefore keeps its decimal properties re-encoded at
//! send time, once (the two layouts are not distinguishable afterwards).
//!
//! Reading follows the service: the sender's value is taken as IEEE 754 (binary integer
//! significand) and must fit a .NET decimal — a coefficient below 2^96 and a scale of 0 to 28
//! once a positive exponent is multiplied out. Anything else (NaN, infinities, a larger
//! coefficient or exponent) cannot be carried and refuses the send.

use bytes::BufMut;

use super::encode::put_map;
use super::read::{Reader, Val};
use super::{CodecError, Result, APPLICATION_PROPERTIES};

const DECIMAL32: u8 = 0x74;
const DECIMAL64: u8 = 0x84;
const DECIMAL128: u8 = 0x94;

/// Largest scale a .NET decimal has.
const MAX_SCALE: i32 = 28;
/// A .NET decimal's coefficient is 96 bits wide.
const COEFFICIENT_LIMIT: u128 = 1 << 96;
const DECIMAL128_BIAS: i32 = 6176;

/// A finite decimal: `(-1)^negative × coefficient × 10^exponent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Decimal {
    pub(super) negative: bool,
    pub(super) coefficient: u128,
    pub(super) exponent: i32,
}

/// Whether an encoded application-properties map has a decimal value at its top level.
pub(super) fn has_decimal(map_value: &[u8]) -> Result<bool> {
    let Val::Map(map) = Reader::new(map_value).value()? else {
        return Err(CodecError::new("application-properties is not a map"));
    };
    let mut r = map.reader();
    for _ in 0..map.count / 2 {
        r.value()?;
        let (_, value) = r.value_with_bytes()?;
        if matches!(value.first(), Some(&(DECIMAL32 | DECIMAL64 | DECIMAL128))) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Writes an application-properties section (`00 53 74` and the map) whose decimal values are
/// re-encoded as Service Bus writes them; every other entry is copied byte for byte.
pub(super) fn put_app_properties_service_decimals(
    out: &mut impl BufMut,
    map_value: &[u8],
) -> Result<()> {
    let Val::Map(map) = Reader::new(map_value).value()? else {
        return Err(CodecError::new("application-properties is not a map"));
    };
    let mut r = map.reader();
    let mut items = Vec::with_capacity(map.items.len() + 16);
    for _ in 0..map.count / 2 {
        let (key, key_bytes) = r.value_with_bytes()?;
        let (_, value) = r.value_with_bytes()?;
        items.put_slice(key_bytes);
        match value.split_first() {
            Some((&code @ (DECIMAL32 | DECIMAL64 | DECIMAL128), bytes)) => {
                let name = match key {
                    Val::String(k) | Val::Symbol(k) => String::from_utf8_lossy(k).into_owned(),
                    _ => "?".to_owned(),
                };
                let refuse = |why: &str| {
                    CodecError::new(format!(
                        "application property {name:?} is a decimal Service Bus cannot carry \
                         ({why}; it must fit a .NET decimal: a coefficient below 2^96 and at \
                         most 28 decimal places)"
                    ))
                };
                let value = read_ieee(code, bytes).ok_or_else(|| refuse("not a finite value"))?;
                let (negative, coefficient, scale) = to_dotnet(value)
                    .or_else(|| read_service_layout(code, bytes).and_then(to_dotnet))
                    .ok_or_else(|| refuse("out of range"))?;
                put_service_decimal128(&mut items, negative, coefficient, scale);
            }
            _ => items.put_slice(value),
        }
    }
    out.put_slice(&[0x00, 0x53, APPLICATION_PROPERTIES]);
    put_map(out, map.count, &items);
    Ok(())
}

/// An IEEE 754 decimal (binary integer significand) of format `code` from its value bytes
/// (exactly 4, 8 or 16 of them, which the reader already checked); `None` for NaN and infinities.
pub(super) fn read_ieee(code: u8, bytes: &[u8]) -> Option<Decimal> {
    // (width in bits, exponent bits, exponent bias)
    let (width, exponent_bits, bias) = match code {
        DECIMAL32 => (32u32, 8u32, 101i32),
        DECIMAL64 => (64, 10, 398),
        DECIMAL128 => (128, 14, DECIMAL128_BIAS),
        _ => return None,
    };
    let bytes = bytes.get(..(width / 8) as usize)?;
    let mut bits: u128 = 0;
    for &b in bytes {
        bits = (bits << 8) | u128::from(b);
    }
    let negative = bits >> (width - 1) & 1 == 1;
    let combination = (bits >> (width - 3)) & 0b11;
    let exponent_mask = (1u128 << exponent_bits) - 1;
    let (biased, coefficient) = if combination != 0b11 {
        // s, exponent, then the coefficient's low (width − 1 − exponent_bits) bits.
        let significand_bits = width - 1 - exponent_bits;
        let exponent = (bits >> significand_bits) & exponent_mask;
        (exponent, bits & ((1u128 << significand_bits) - 1))
    } else {
        if (bits >> (width - 5)) & 0b11 == 0b11 {
            return None; // infinity or NaN
        }
        // s 11, exponent, then the coefficient's low bits after an implicit `100`.
        let significand_bits = width - 3 - exponent_bits;
        let exponent = (bits >> significand_bits) & exponent_mask;
        (exponent, (0b100u128 << significand_bits) | (bits & ((1u128 << significand_bits) - 1)))
    };
    let exponent = i32::try_from(biased).ok()? - bias;
    Some(Decimal { negative, coefficient, exponent })
}

/// A `decimal128` in Service Bus's own layout (module docs), as a client that passes a received
/// property through sends it back. Read as IEEE it would have an exponent below −4500; the
/// service's .NET reader takes it anyway (its scale is a byte, so the difference, a multiple of
/// 256, drops out), and so does ironbus, keeping such a value what it was.
pub(super) fn read_service_layout(code: u8, bytes: &[u8]) -> Option<Decimal> {
    let bytes: &[u8; 16] = bytes.get(..16)?.try_into().ok()?;
    if code != DECIMAL128 || bytes[0] & 0x7f != 0x0c || bytes[2] != 0 || bytes[3] != 0 {
        return None;
    }
    let biased = (i32::from(bytes[0] & 0x7f) << 9) | i32::from(bytes[1] >> 1);
    let coefficient = bytes[4..].iter().fold(0u128, |c, &b| (c << 8) | u128::from(b));
    Some(Decimal {
        negative: bytes[0] & 0x80 != 0,
        coefficient,
        exponent: biased - DECIMAL128_BIAS,
    })
}

/// The .NET decimal equal to `value`: `(negative, coefficient < 2^96, scale 0..=28)`, or `None`
/// when there is none.
pub(super) fn to_dotnet(value: Decimal) -> Option<(bool, u128, u8)> {
    let Decimal { negative, mut coefficient, exponent } = value;
    if exponent > 0 {
        for _ in 0..exponent {
            coefficient = coefficient.checked_mul(10).filter(|c| *c < COEFFICIENT_LIMIT)?;
        }
    }
    let scale = (-exponent).max(0);
    if coefficient >= COEFFICIENT_LIMIT || scale > MAX_SCALE {
        return None;
    }
    Some((negative, coefficient, u8::try_from(scale).ok()?))
}

/// A `decimal128` (constructor included) in Service Bus's layout (module docs).
pub(super) fn put_service_decimal128(
    out: &mut impl BufMut,
    negative: bool,
    coefficient: u128,
    scale: u8,
) {
    let exponent = DECIMAL128_BIAS - i32::from(scale);
    out.put_u8(DECIMAL128);
    // exponent is 6148..=6176: both shifted parts fit a byte.
    out.put_u8(u8::from(negative) << 7 | (exponent >> 9) as u8);
    out.put_u8(((exponent & 0x7f) << 1) as u8);
    out.put_slice(&[0, 0]);
    let words = [(coefficient >> 64) as u32, (coefficient >> 32) as u32, coefficient as u32];
    for word in words {
        out.put_u32(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(negative: bool, coefficient: u128, scale: u8) -> Vec<u8> {
        let mut out = Vec::new();
        put_service_decimal128(&mut out, negative, coefficient, scale);
        out
    }

    #[test]
    fn python_decimal128_reads_as_its_value() {
        // azure-servicebus 7.15.0 encodes Decimal("1.2345") as this IEEE decimal128.
        let sent = hex("3038000000000000000000000000 3039");
        let value = read_ieee(DECIMAL128, &sent).unwrap();
        assert_eq!(value, Decimal { negative: false, coefficient: 12345, exponent: -4 });
        assert_eq!(to_dotnet(value), Some((false, 12345, 4)));
    }

    #[test]
    fn service_layout_is_what_the_python_sdk_decodes() {
        // Byte 0 holds exponent >> 9 (6172 >> 9 = 12), byte 1 its low 7 bits shifted by one;
        // the coefficient is the last 12 bytes.
        assert_eq!(service(false, 12345, 4), hex("94 0c38 0000 00000000 00000000 00003039"));
        assert_eq!(service(true, 15, 1), hex("94 8c3e 0000 00000000 00000000 0000000f"));
        assert_eq!(
            service(false, (1 << 96) - 1, 0),
            hex("94 0c40 0000 ffffffff ffffffff ffffffff")
        );
    }

    #[test]
    fn the_service_layout_reads_back_as_the_same_value() {
        for (negative, coefficient, scale) in [(false, 12345, 4), (true, 15, 1), (false, 7, 0)] {
            let bytes = service(negative, coefficient, scale);
            let ieee = read_ieee(DECIMAL128, &bytes[1..]).unwrap();
            assert_eq!(to_dotnet(ieee), None, "as IEEE it is out of range");
            let value = read_service_layout(DECIMAL128, &bytes[1..]).unwrap();
            assert_eq!(to_dotnet(value), Some((negative, coefficient, scale)));
        }
        // An IEEE value is never taken for the service's layout.
        assert_eq!(
            read_service_layout(DECIMAL128, &hex("3038000000000000000000000000 3039")),
            None
        );
    }

    #[test]
    fn decimal64_and_decimal32_read_as_their_values() {
        // 1.5 as decimal64: exponent −1 + 398 = 397 in bits 62..53, coefficient 15.
        let bits: u64 = (397 << 53) | 15;
        let value = read_ieee(DECIMAL64, &bits.to_be_bytes()).unwrap();
        assert_eq!(value, Decimal { negative: false, coefficient: 15, exponent: -1 });
        // −7 as decimal32: sign, exponent 101 in bits 30..23, coefficient 7.
        let bits: u32 = (1 << 31) | (101 << 23) | 7;
        let value = read_ieee(DECIMAL32, &bits.to_be_bytes()).unwrap();
        assert_eq!(value, Decimal { negative: true, coefficient: 7, exponent: 0 });
        // The `11` combination form: implicit 100 before the coefficient's low 21 bits.
        let bits: u32 = (0b11 << 29) | (101 << 21) | 1;
        let value = read_ieee(DECIMAL32, &bits.to_be_bytes()).unwrap();
        assert_eq!(value.coefficient, (0b100 << 21) | 1);
        assert_eq!(value.exponent, 0);
    }

    #[test]
    fn positive_exponents_are_multiplied_out() {
        let value = Decimal { negative: false, coefficient: 12, exponent: 3 };
        assert_eq!(to_dotnet(value), Some((false, 12_000, 0)));
    }

    #[test]
    fn values_a_dotnet_decimal_cannot_hold_are_refused() {
        let too_precise = Decimal { negative: false, coefficient: 1, exponent: -29 };
        assert_eq!(to_dotnet(too_precise), None);
        let too_large = Decimal { negative: false, coefficient: 1, exponent: 29 };
        assert_eq!(to_dotnet(too_large), None);
        let too_wide = Decimal { negative: false, coefficient: 1 << 96, exponent: 0 };
        assert_eq!(to_dotnet(too_wide), None);
        // NaN and infinity.
        assert_eq!(read_ieee(DECIMAL32, &[0x7c, 0, 0, 0]), None);
        assert_eq!(read_ieee(DECIMAL32, &[0x78, 0, 0, 0]), None);
        assert_eq!(read_ieee(DECIMAL128, &[0xf8; 16]), None);
    }

    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect()
    }
}
