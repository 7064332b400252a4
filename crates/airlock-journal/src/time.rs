//! RFC 3339 timestamps in UTC to the second, without a date crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, as `YYYY-MM-DDTHH:MM:SSZ`. A clock before 1970 reads as the epoch.
pub(crate) fn now_rfc3339() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format_rfc3339(secs)
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_rfc3339(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// Parses exactly the form [`format_rfc3339`] writes (and nothing else:
/// no offsets, no fractions, no leap second), back to seconds.
pub(crate) fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || b[19] != b'Z'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<u64> {
        let s = &b[from..to];
        if !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        s.iter().try_fold(0u64, |acc, d| Some(acc * 10 + u64::from(d - b'0')))
    };
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hh, mm, ss) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if y < 1970 || !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) || hh > 23 || mm > 59 || ss > 59 {
        return None;
    }
    Some(days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60 + ss)
}

fn days_in_month(y: u64, m: u64) -> u64 {
    match m {
        2 if (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// The inverse of [`civil_from_days`], for dates from 1970 on.
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        // Values checked against `date -u -d @N +%Y-%m-%dT%H:%M:%SZ`.
        for (secs, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (68_169_599, "1972-02-28T23:59:59Z"),
            (68_169_600, "1972-02-29T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (978_307_199, "2000-12-31T23:59:59Z"),
            (1_709_208_000, "2024-02-29T12:00:00Z"),
            (4_102_444_799, "2099-12-31T23:59:59Z"),
            (4_107_542_400, "2100-03-01T00:00:00Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
        ] {
            assert_eq!(format_rfc3339(secs), text, "{secs}");
            assert_eq!(parse_rfc3339(text), Some(secs), "{text}");
        }
    }

    #[test]
    fn round_trips_every_day_for_five_centuries() {
        for day in 0..200_000u64 {
            let secs = day * 86_400 + (day * 7919) % 86_400;
            assert_eq!(parse_rfc3339(&format_rfc3339(secs)), Some(secs));
        }
    }

    #[test]
    fn parse_refuses_other_forms() {
        for text in [
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2100-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:60Z",
            "2024-01-01T00:00:00+00:00",
            "2024-01-01T00:00:00.5Z",
            "2024-01-01t00:00:00Z",
            "1969-12-31T23:59:59Z",
            "+024-01-01T00:00:00Z",
            "",
        ] {
            assert_eq!(parse_rfc3339(text), None, "{text}");
        }
    }

    #[test]
    fn now_is_well_formed() {
        assert!(parse_rfc3339(&now_rfc3339()).is_some());
    }
}
