//! ISO 8601 / RFC 3339 times as Patroni and patronictl write them, parsed and formatted by hand.

/// Unix ms of an ISO 8601 / RFC 3339 time as Patroni and patronictl write it:
/// `YYYY-MM-DDTHH:MM[:SS[.frac]]` then `Z`, `±HH:MM` or `±HHMM` (a space may replace the `T`).
/// Hand-parsed: this one format does not justify a date-time crate.
pub fn parse_rfc3339_ms(s: &str) -> Result<u64, String> {
    let bad = |why: &str| format!("not an ISO 8601 time ({why}): {s:?}");
    let b = s.trim().as_bytes();
    let num = |from: usize, len: usize| -> Result<i64, String> {
        let part = b.get(from..from + len).ok_or_else(|| bad("too short"))?;
        if !part.iter().all(u8::is_ascii_digit) {
            return Err(bad("expected digits"));
        }
        Ok(part
            .iter()
            .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0')))
    };
    let expect = |at: usize, chars: &[u8]| -> Result<(), String> {
        match b.get(at) {
            Some(c) if chars.contains(c) => Ok(()),
            _ => Err(bad("unexpected separator")),
        }
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    expect(4, b"-")?;
    expect(7, b"-")?;
    expect(10, b"Tt ")?;
    let (hour, minute) = (num(11, 2)?, num(14, 2)?);
    expect(13, b":")?;
    let mut at = 16;
    let mut second = 0;
    let mut frac_ms = 0;
    if b.get(at) == Some(&b':') {
        second = num(at + 1, 2)?;
        at += 3;
        if matches!(b.get(at), Some(b'.') | Some(b',')) {
            at += 1;
            let digits = b[at..].iter().take_while(|c| c.is_ascii_digit()).count();
            if digits == 0 {
                return Err(bad("empty fraction"));
            }
            // Milliseconds: the first three digits, padded.
            let mut ms = 0;
            for i in 0..3 {
                ms = ms * 10
                    + if i < digits {
                        i64::from(b[at + i] - b'0')
                    } else {
                        0
                    };
            }
            frac_ms = ms;
            at += digits;
        }
    }
    let offset_min = match b.get(at) {
        Some(b'Z') | Some(b'z') if at + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) => {
            let oh = num(at + 1, 2)?;
            let om_at = if b.get(at + 3) == Some(&b':') {
                at + 4
            } else {
                at + 3
            };
            let om = num(om_at, 2)?;
            if om_at + 2 != b.len() || oh > 23 || om > 59 {
                return Err(bad("bad offset"));
            }
            let m = oh * 60 + om;
            if *sign == b'-' {
                -m
            } else {
                m
            }
        }
        // Patroni rejects naive times; so do we rather than guess a zone.
        _ => return Err(bad("missing or malformed time zone")),
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad("field out of range"));
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_min * 60;
    let ms = secs * 1000 + frac_ms;
    u64::try_from(ms).map_err(|_| bad("before 1970"))
}

/// Unix ms as Python's `isoformat()` writes a UTC time (Patroni's `scheduled_restart.schedule`):
/// `2030-01-01T12:00:00+00:00`, with `.ffffff` when there are milliseconds.
pub fn format_rfc3339_ms(ms: u64) -> String {
    let secs = i64::try_from(ms / 1000).unwrap_or(i64::MAX);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let frac = match ms % 1000 {
        0 => String::new(),
        f => format!(".{:06}", f * 1000),
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{frac}+00:00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_as_isoformat_and_round_trips() {
        assert_eq!(
            format_rfc3339_ms(1_893_456_000_000),
            "2030-01-01T00:00:00+00:00"
        );
        assert_eq!(
            format_rfc3339_ms(951_782_400_250),
            "2000-02-29T00:00:00.250000+00:00"
        );
        for ms in [0, 1_477_918_800_000, 1_709_164_799_999, 4_102_444_800_001] {
            assert_eq!(parse_rfc3339_ms(&format_rfc3339_ms(ms)), Ok(ms));
        }
    }

    #[test]
    fn rfc3339_parses_patroni_forms() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_rfc3339_ms("2000-02-29T12:30:15.250Z"),
            Ok(951_827_415_250)
        );
        assert_eq!(
            parse_rfc3339_ms("2000-02-29 13:30:15.250123+01:00"),
            Ok(951_827_415_250)
        );
        assert_eq!(
            parse_rfc3339_ms("2000-02-29T07:30-0500"),
            Ok(951_827_400_000)
        );
        assert!(parse_rfc3339_ms("2000-02-29T12:30:15").is_err());
        assert!(parse_rfc3339_ms("2000-13-01T00:00Z").is_err());
        assert!(parse_rfc3339_ms("1969-12-31T23:59:59Z").is_err());
        assert!(parse_rfc3339_ms("soon").is_err());
    }
}
