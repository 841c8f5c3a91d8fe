//! How long a provider's rate-limit answer (HTTP 429) asks its caller to wait: the one reader
//! of `retry-after-ms` and `Retry-After`, shared by the proxy and the roster's reader.
//!
//! Read in order: `retry-after-ms` (milliseconds, OpenAI's SDKs' own header), `retry-after` as
//! delay-seconds (fractions allowed), `retry-after` as an HTTP-date (relative to `now_ms`, Unix
//! epoch milliseconds, a parameter: nothing here reads a clock). A value that is absent, unparsable, negative or in
//! the past gives `None`, and the caller applies its fallback. Results are capped at `max_ms`.
//!
//! Invariant: no header value can panic here, and every result is at most `max_ms`. A date
//! too far ahead for `SystemTime` (a year around 3·10^11 and beyond, or one that does not fit
//! in 64 bits at all) saturates to the cap like a huge number of seconds does: date arithmetic
//! is done on saturating integers (issue 34). The proptest of this
//! invariant runs on the proxy's header wrapper (`crates/proxy/src/retry_after.rs`).

use crate::Millis;

/// The wait the two headers' values ask for, in milliseconds, at most `max_ms`.
pub fn provider_retry_after_ms(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now_ms: Millis,
    max_ms: u64,
) -> Option<u64> {
    if let Some(ms) = retry_after_ms.and_then(|v| v.trim().parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some((ms.ceil() as u64).min(max_ms));
        }
    }
    let value = retry_after?.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0)
            .then(|| ((seconds * 1000.0).ceil() as u64).min(max_ms));
    }
    let at_ms = http_date_secs(value)?.saturating_mul(1_000);
    let wait = at_ms.checked_sub(now_ms)?;
    Some(wait.min(max_ms))
}

/// An IMF-fixdate as seconds since the epoch, saturating at `u64::MAX` for a date beyond it
/// (a year of any number of digits is read, saturating too).
pub fn http_date_secs(text: &str) -> Option<u64> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let day: u64 = day.parse().ok()?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| m == month)? as u64
        + 1;
    if year.is_empty() || !year.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let year: u64 = year.parse().unwrap_or(u64::MAX);
    let mut hms = time.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=31).contains(&day) || year < 1970 || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(
        days.saturating_mul(86_400)
            .saturating_add(h * 3600 + m * 60 + s),
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date on or after it (Howard Hinnant's
/// algorithm), saturating at `u64::MAX` for a year too large to count in days.
pub fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let (year, month, day) = (u128::from(year), u128::from(month), u128::from(day));
    let y = if month <= 2 {
        year.saturating_sub(1)
    } else {
        year
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day.saturating_sub(1);
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).saturating_sub(719_468);
    u64::try_from(days).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_is_read_relative_to_now_and_capped() {
        // Sun, 06 Nov 1994 08:49:37 GMT
        let now_ms = 784_111_777_000;
        let wait = |ms, header| provider_retry_after_ms(ms, header, now_ms, 60_000);
        assert_eq!(wait(Some(" 1500 "), Some("9")), Some(1500));
        assert_eq!(wait(Some("soon"), Some("2.5")), Some(2500));
        assert_eq!(
            wait(None, Some("Sun, 06 Nov 1994 08:49:40 GMT")),
            Some(3000)
        );
        assert_eq!(wait(None, Some("Sun, 06 Nov 1994 08:49:30 GMT")), None);
        assert_eq!(wait(None, Some("99999")), Some(60_000));
        assert_eq!(wait(None, Some("-1")), None);
        assert_eq!(wait(None, None), None);
    }
}
