//! The time formats of the HTTP APIs: RFC 1123 dates in `BrokerProperties` and custom-property
//! headers, ISO 8601 timestamps and durations in the ATOM descriptions.
//!
//! Hand-written (civil-date arithmetic on Unix milliseconds) because each format is a small,
//! fixed subset and the clients' quirks matter more than generality: whole seconds and `GMT` in
//! RFC 1123 output (the Rust REST crate rejects fractions and `UTC`), `+0000` accepted on input,
//! and `TimeSpan.MaxValue` spelled the way .NET spells it.

use std::time::Duration;

use ironbus_core::description::TIME_SPAN_MAX;
use ironbus_core::Timestamp;

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] =
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const MS_PER_DAY: i64 = 86_400_000;

/// .NET's `TimeSpan.MaxValue` as an XML duration, what Service Bus shows for "never".
pub const TIME_SPAN_MAX_XML: &str = "P10675199DT2H48M5.4775807S";
/// `TimeSpan.MaxValue` in seconds, what Service Bus shows as a message's TimeToLive for "never".
pub const TIME_SPAN_MAX_SECONDS: f64 = 922_337_203_685.477_5;

/// Days since 1970-01-01 → (year, month 1-12, day 1-31). Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// (year, month, day) → days since 1970-01-01. Hinnant's `days_from_civil`.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Clamps "never" (and anything past year 9999) to 9999-12-31T23:59:59.
fn clamp(t: Timestamp) -> i64 {
    const MAX: i64 = 253_402_300_799_000;
    t.as_millis().clamp(-62_135_596_800_000, MAX)
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`, whole seconds.
pub fn rfc1123(t: Timestamp) -> String {
    let ms = clamp(t);
    let days = ms.div_euclid(MS_PER_DAY);
    let secs = ms.rem_euclid(MS_PER_DAY) / 1000;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[m as usize - 1],
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Parses `Sun, 06 Nov 1994 08:49:37 GMT` (also `+0000`, `UTC`, `Z`, and without the weekday).
pub fn parse_rfc1123(text: &str) -> Option<Timestamp> {
    let text = text.trim();
    let text = match text.split_once(',') {
        Some((_, rest)) => rest.trim(),
        None => text,
    };
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [day, month, year, time, zone] = parts.as_slice() else { return None };
    if !matches!(*zone, "GMT" | "UTC" | "Z" | "+0000" | "-0000" | "+00:00") {
        return None;
    }
    let day: u32 = day.parse().ok()?;
    let month = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(month))? as u32 + 1;
    let year: i64 = year.parse().ok()?;
    let mut hms = time.split(':');
    let (h, mi, s): (i64, i64, i64) =
        (hms.next()?.parse().ok()?, hms.next()?.parse().ok()?, hms.next()?.parse().ok()?);
    if hms.next().is_some() || !(1..=31).contains(&day) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    if !(1..=9999).contains(&year) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(Timestamp::from_millis((days * 86_400 + h * 3600 + mi * 60 + s) * 1000))
}

/// `2024-01-01T10:00:00.123Z`.
pub fn iso8601(t: Timestamp) -> String {
    let ms = clamp(t);
    let days = ms.div_euclid(MS_PER_DAY);
    let in_day = ms.rem_euclid(MS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let secs = in_day / 1000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        in_day % 1000
    )
}

/// Parses an XML Schema `dateTime`: `2024-01-01T10:00:00Z`, with optional fractional seconds
/// and a `Z`, `+hh:mm` or `-hh:mm` zone (none means UTC).
pub fn parse_iso8601(text: &str) -> Option<Timestamp> {
    parse_iso8601_zoned(text).map(|(at, _)| at)
}

/// [`parse_iso8601`], and whether the text named a zone (without one, .NET reads it as
/// `DateTimeKind.Unspecified`).
pub fn parse_iso8601_zoned(text: &str) -> Option<(Timestamp, bool)> {
    let text = text.trim();
    let (date, time) = text.split_once('T')?;
    let mut ymd = date.splitn(3, '-');
    let (y, mo, d): (i64, u32, u32) =
        (ymd.next()?.parse().ok()?, ymd.next()?.parse().ok()?, ymd.next()?.parse().ok()?);
    let (clock, offset_minutes, zoned) = if let Some(t) = time.strip_suffix('Z') {
        (t, 0i64, true)
    } else if let Some(at) = time.rfind(['+', '-']) {
        let (t, zone) = time.split_at(at);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let (zh, zm) = zone[1..].split_once(':')?;
        (t, sign * (zh.parse::<i64>().ok()? * 60 + zm.parse::<i64>().ok()?), true)
    } else {
        (time, 0, false)
    };
    let mut hms = clock.splitn(3, ':');
    let (h, mi): (i64, i64) = (hms.next()?.parse().ok()?, hms.next()?.parse().ok()?);
    let seconds: f64 = hms.next()?.parse().ok()?;
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || seconds >= 61.0 {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    let millis = (days * 86_400 + h * 3600 + mi * 60 - offset_minutes * 60) * 1000
        + (seconds * 1000.0).floor() as i64;
    Some((Timestamp::from_millis(millis), zoned))
}

/// An XML Schema duration: `PT1M`, `P1DT2H`, `PT0.5S`; [`TIME_SPAN_MAX_XML`] for "never".
pub fn xml_duration(d: Duration) -> String {
    if d >= TIME_SPAN_MAX {
        return TIME_SPAN_MAX_XML.to_owned();
    }
    let total = d.as_secs();
    let (days, h, m, s) = (total / 86_400, total / 3600 % 24, total / 60 % 60, total % 60);
    let millis = d.subsec_millis();
    let mut out = String::from("P");
    if days > 0 {
        out.push_str(&format!("{days}D"));
    }
    if h > 0 || m > 0 || s > 0 || millis > 0 || days == 0 {
        out.push('T');
        if h > 0 {
            out.push_str(&format!("{h}H"));
        }
        if m > 0 {
            out.push_str(&format!("{m}M"));
        }
        if s > 0 || millis > 0 || (h == 0 && m == 0) {
            if millis > 0 {
                out.push_str(&format!("{s}.{millis:03}S"));
            } else {
                out.push_str(&format!("{s}S"));
            }
        }
    }
    out
}

/// Parses an XML Schema duration with days, hours, minutes and (fractional) seconds (`PT45S`,
/// `P1D`, `PT1M30S`, `P10675199DT2H48M5.477539S`). Years and months have no fixed length and
/// are refused. Anything at or within a second of `TimeSpan.MaxValue` is "never"
/// ([`TIME_SPAN_MAX`]), because clients round it.
pub fn parse_xml_duration(text: &str) -> Option<Duration> {
    let rest = text.trim().strip_prefix('P')?;
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut seconds = 0f64;
    let mut any = false;
    let mut take = |mut part: &str, units: &[(char, f64)]| -> Option<()> {
        for &(unit, scale) in units {
            if let Some(end) = part.find(unit) {
                let number = &part[..end];
                if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
                    return None;
                }
                seconds += number.parse::<f64>().ok()? * scale;
                any = true;
                part = &part[end + 1..];
            }
        }
        part.is_empty().then_some(())
    };
    take(date, &[('D', 86_400.0)])?;
    if let Some(time) = time {
        if time.is_empty() {
            return None;
        }
        take(time, &[('H', 3600.0), ('M', 60.0), ('S', 1.0)])?;
    }
    if !any || !seconds.is_finite() {
        return None;
    }
    if seconds + 1.0 >= TIME_SPAN_MAX.as_secs_f64() {
        return Some(TIME_SPAN_MAX);
    }
    Some(Duration::from_secs_f64(seconds))
}

/// Parses a .NET TimeSpan string `[d.]hh:mm:ss[.fffffff]` (batch sends' `TimeToLiveTimeSpan`).
pub fn parse_time_span(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (days, rest) = match text.split_once(':') {
        Some((head, tail)) => match head.split_once('.') {
            Some((d, h)) => (d.parse::<u64>().ok()?, format!("{h}:{tail}")),
            None => (0, text.to_owned()),
        },
        None => return None,
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let [h, m, s] = parts.as_slice() else { return None };
    let (h, m): (u64, u64) = (h.parse().ok()?, m.parse().ok()?);
    let s: f64 = s.parse().ok()?;
    if m > 59 || !(0.0..60.0).contains(&s) {
        return None;
    }
    let whole = days.checked_mul(86_400)?.checked_add(h.checked_mul(3600)?)?.checked_add(m * 60)?;
    Some(Duration::from_secs(whole) + Duration::from_secs_f64(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1123_round_trips_whole_seconds() {
        let t = Timestamp::from_millis(784_111_777_000);
        assert_eq!(rfc1123(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse_rfc1123("Sun, 06 Nov 1994 08:49:37 GMT"), Some(t));
        assert_eq!(parse_rfc1123("Sun, 06 Nov 1994 08:49:37 +0000"), Some(t));
        assert_eq!(rfc1123(Timestamp::from_millis(784_111_777_999)), rfc1123(t));
        assert_eq!(parse_rfc1123("06 Nov 1994 08:49:37"), None);
        assert_eq!(parse_rfc1123("Sun, 32 Nov 1994 08:49:37 GMT"), None);
        assert_eq!(rfc1123(Timestamp::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn iso8601_has_millis_and_z() {
        assert_eq!(iso8601(Timestamp::from_millis(1_704_103_200_123)), "2024-01-01T10:00:00.123Z");
        assert_eq!(iso8601(Timestamp::from_millis(0)), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn durations_parse_and_print() {
        let secs = Duration::from_secs;
        for (text, want) in [
            ("PT45S", secs(45)),
            ("P1D", secs(86_400)),
            ("PT1M30S", secs(90)),
            ("PT1M", secs(60)),
            ("P2DT3H", secs(2 * 86_400 + 3 * 3600)),
            ("PT0.5S", Duration::from_millis(500)),
            ("P10675199DT2H48M5.477539S", TIME_SPAN_MAX),
            ("P10675199DT2H48M5.4775807S", TIME_SPAN_MAX),
        ] {
            assert_eq!(parse_xml_duration(text), Some(want), "{text}");
        }
        for bad in ["", "P", "PT", "1M", "P1Y", "PT-5S", "PTxS", "P1DT", "PT5"] {
            assert_eq!(parse_xml_duration(bad), None, "{bad}");
        }
        assert_eq!(xml_duration(secs(60)), "PT1M");
        assert_eq!(xml_duration(secs(90)), "PT1M30S");
        assert_eq!(xml_duration(secs(86_400)), "P1D");
        assert_eq!(xml_duration(Duration::ZERO), "PT0S");
        assert_eq!(xml_duration(Duration::from_millis(1500)), "PT1.500S");
        assert_eq!(xml_duration(TIME_SPAN_MAX), TIME_SPAN_MAX_XML);
        for d in [secs(5), secs(600), secs(7 * 86_400), Duration::from_millis(20_250)] {
            assert_eq!(parse_xml_duration(&xml_duration(d)), Some(d));
        }
    }

    #[test]
    fn time_spans_parse() {
        assert_eq!(parse_time_span("0.00:05:00"), Some(Duration::from_secs(300)));
        assert_eq!(parse_time_span("01:00:00"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_time_span("1.00:00:01.5"), Some(Duration::from_millis(86_401_500)));
        assert_eq!(parse_time_span("abc"), None);
        assert_eq!(parse_time_span("00:61:00"), None);
        assert_eq!(parse_time_span("99999999999999999.00:00:00"), None);
        assert_eq!(parse_time_span("1.99999999999999999999:00:00"), None);
    }
}
