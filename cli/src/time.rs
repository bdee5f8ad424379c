//! Times and durations as the CLI reads and shows them: RFC 3339 timestamps (`--schedule`,
//! message times), and durations given as `30s`, `5m`, `2h`, `7d` or ISO 8601 (`PT1M`), sent
//! to the management API as ISO 8601.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{CliError, Result};

/// Milliseconds since the Unix epoch, now.
pub fn now_millis() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

/// A duration flag as ISO 8601: `90s` → `PT90S`, `5m` → `PT5M`, `2h` → `PT2H`, `7d` → `P7D`;
/// ISO 8601 text (`PT1M`, `P10675199DT2H48M5.4775807S`) is passed on as given.
pub fn iso_duration(text: &str) -> Result<String> {
    let t = text.trim();
    if t.starts_with(['P', 'p']) && t.len() > 1 {
        return Ok(t.to_ascii_uppercase());
    }
    let bad =
        || CliError::usage(format!("`{text}` is not a duration (e.g. 30s, 5m, 2h, 7d, PT1M)"));
    let split = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = t.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    match unit {
        "s" => Ok(format!("PT{n}S")),
        "m" => Ok(format!("PT{n}M")),
        "h" => Ok(format!("PT{n}H")),
        "d" => Ok(format!("P{n}D")),
        _ => Err(bad()),
    }
}

/// An ISO 8601 duration (`P1DT2H3M4.5S`; no years, months or weeks) in milliseconds, to
/// compare durations written differently (`PT60S` and `PT1M`).
pub fn duration_millis(text: &str) -> Option<u128> {
    let rest = text.trim().strip_prefix(['P', 'p'])?;
    let (days, time) = match rest.split_once(['T', 't']) {
        Some((d, t)) => (d, t),
        None => (rest, ""),
    };
    let mut total: f64 = 0.0;
    let mut any = false;
    for (part, units) in [
        (days, &[('D', 86_400_000.0)][..]),
        (time, &[('H', 3_600_000.0), ('M', 60_000.0), ('S', 1000.0)][..]),
    ] {
        let mut number = String::new();
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                number.push(c);
                continue;
            }
            let factor = units.iter().find(|(u, _)| u.eq_ignore_ascii_case(&c))?.1;
            total += number.parse::<f64>().ok()? * factor;
            number.clear();
            any = true;
        }
        if !number.is_empty() {
            return None;
        }
    }
    any.then_some(total.round() as u128)
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Parses an RFC 3339 timestamp (`2026-12-07T14:00:00Z`, fractions and offsets allowed) into
/// milliseconds since the Unix epoch.
pub fn parse_rfc3339(text: &str) -> Result<i64> {
    let bad =
        || CliError::usage(format!("`{text}` is not an RFC 3339 time (e.g. 2026-12-07T14:00:00Z)"));
    let t = text.trim();
    let num = |s: &str| s.parse::<i64>().map_err(|_| bad());
    let (date, rest) = t.split_once(['T', 't', ' ']).ok_or_else(bad)?;
    let mut d = date.split('-');
    let (year, month, day) = (
        num(d.next().ok_or_else(bad)?)?,
        num(d.next().ok_or_else(bad)?)?,
        num(d.next().ok_or_else(bad)?)?,
    );
    let zone_at = rest.rfind(['Z', 'z', '+', '-']).ok_or_else(bad)?;
    let (clock, zone) = rest.split_at(zone_at);
    let offset_minutes = match zone {
        "Z" | "z" => 0,
        _ => {
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let (h, m) = zone[1..].split_once(':').ok_or_else(bad)?;
            sign * (num(h)? * 60 + num(m)?)
        }
    };
    let mut c = clock.split(':');
    let (hour, minute) = (num(c.next().ok_or_else(bad)?)?, num(c.next().ok_or_else(bad)?)?);
    let seconds = c.next().ok_or_else(bad)?;
    let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, ""));
    let millis_part = format!("{fraction:0<3}");
    let millis = num(millis_part.get(..3).ok_or_else(bad)?)?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return Err(bad());
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + num(whole)? - offset_minutes * 60;
    Ok(secs * 1000 + millis)
}

/// Formats milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds.
pub fn format_rfc3339(millis: i64) -> String {
    let secs = millis.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        millis.rem_euclid(1000)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_become_iso_8601() {
        assert_eq!(iso_duration("90s").unwrap(), "PT90S");
        assert_eq!(iso_duration("5m").unwrap(), "PT5M");
        assert_eq!(iso_duration("7d").unwrap(), "P7D");
        assert_eq!(iso_duration("pt1m").unwrap(), "PT1M");
        for bad in ["", "m", "5y", "x5s"] {
            assert!(iso_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn iso_durations_compare_by_length() {
        assert_eq!(duration_millis("PT1M"), duration_millis("PT60S"));
        assert_eq!(duration_millis("P1DT1S"), Some(86_401_000));
        assert_eq!(duration_millis("PT0.5S"), Some(500));
        assert_eq!(duration_millis("P10675199DT2H48M5.4775807S").map(|m| m > 0), Some(true));
        for bad in ["", "P", "1M", "PT5", "PT5Q", "P2W"] {
            assert_eq!(duration_millis(bad), None, "{bad}");
        }
    }

    #[test]
    fn rfc3339_round_trips_and_honours_offsets() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(parse_rfc3339("2026-12-07T14:00:00.5Z").unwrap(), 1_796_652_000_500);
        assert_eq!(parse_rfc3339("2026-12-07T15:00:00+01:00").unwrap(), 1_796_652_000_000);
        assert_eq!(format_rfc3339(1_796_652_000_500), "2026-12-07T14:00:00.500Z");
        let leap = parse_rfc3339("2024-02-29T23:59:59Z").unwrap();
        assert_eq!(format_rfc3339(leap), "2024-02-29T23:59:59.000Z");
        for bad in ["2026-12-07", "2026-13-01T00:00:00Z", "tomorrow", "2026-12-07T14:00:00"] {
            assert!(parse_rfc3339(bad).is_err(), "{bad}");
        }
    }
}
