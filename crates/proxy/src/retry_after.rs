//! How long an upstream 429 asks us to wait.
//!
//! Read in order: `retry-after-ms` (milliseconds, OpenAI's SDKs' own header), `retry-after` as
//! delay-seconds (fractions allowed), `retry-after` as an HTTP-date (relative to `now`). A
//! value that is absent, unparsable, negative or in the past gives `None`, and the caller
//! applies its fallback. Results are capped at `max_ms`.
//!
//! Invariant: no header value can panic here, and every result is at most `max_ms`. A date
//! too far ahead for `SystemTime` (a year around 3·10^11 and beyond, or one that does not fit
//! in 64 bits at all) saturates to the cap like a huge number of seconds does: date arithmetic
//! is done on saturating integers, never on `SystemTime` (issue 34).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
pub(crate) use turnstile_admission::days_from_civil;
use turnstile_admission::{http_date_secs, provider_retry_after_ms};

/// The wait an upstream answer asks for, in milliseconds
/// ([`turnstile_admission::provider_retry_after_ms`] on its two headers).
pub fn parse(headers: &HeaderMap, now: SystemTime, max_ms: u64) -> Option<u64> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let now_ms = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let now_ms = u64::try_from(now_ms).unwrap_or(u64::MAX);
    provider_retry_after_ms(text("retry-after-ms"), text("retry-after"), now_ms, max_ms)
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form RFC 9110 requires senders to use;
/// `None` also for a date `SystemTime` cannot hold.
pub fn parse_http_date(text: &str) -> Option<SystemTime> {
    UNIX_EPOCH.checked_add(Duration::from_secs(http_date_secs(text)?))
}

/// The proleptic Gregorian `(year, month, day)` of a day count since 1970-01-01: the inverse
/// of `days_from_civil` (also used for the caller's RFC 3339 reset instants).
pub(crate) fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(month <= 2), month, day)
}

/// Formats `at` as an IMF-fixdate (for tests).
#[cfg(test)]
pub fn format_http_date(at: SystemTime) -> String {
    format_http_date_secs(at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs())
}

/// Formats `secs` since the epoch as an IMF-fixdate, also past what `SystemTime` can hold
/// (the fake upstream's far-future dates).
pub(crate) fn format_http_date_secs(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let month_name = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(month - 1) as usize];
    format!(
        "{weekday}, {day:02} {month_name} {year} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use proptest::prelude::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn every_retry_after_form_is_read() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(
            parse(&headers(&[("retry-after-ms", "1500")]), now, 60_000),
            Some(1500)
        );
        assert_eq!(
            parse(
                &headers(&[("retry-after-ms", "250"), ("retry-after", "9")]),
                now,
                60_000
            ),
            Some(250)
        );
        assert_eq!(
            parse(&headers(&[("retry-after", "2")]), now, 60_000),
            Some(2000)
        );
        assert_eq!(
            parse(&headers(&[("retry-after", "0.5")]), now, 60_000),
            Some(500)
        );
        let date = "Sun, 06 Nov 1994 08:49:40 GMT";
        assert_eq!(
            parse(&headers(&[("retry-after", date)]), now, 60_000),
            Some(3000)
        );
        assert_eq!(
            parse(&headers(&[("retry-after", "9999")]), now, 60_000),
            Some(60_000)
        );
        assert_eq!(
            parse(&headers(&[("retry-after", "soon")]), now, 60_000),
            None
        );
        assert_eq!(parse(&headers(&[("retry-after", "-1")]), now, 60_000), None);
        assert_eq!(parse(&headers(&[]), now, 60_000), None);
    }

    #[test]
    fn http_dates_round_trip() {
        let at = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(format_http_date(at), "Sun, 06 Nov 1994 08:49:37 GMT");
        let now = UNIX_EPOCH + Duration::from_secs(1_780_000_000);
        assert_eq!(parse_http_date(&format_http_date(now)), Some(now));
    }

    /// Issue 34: a year `SystemTime` cannot hold (about 3·10^11 and beyond, up to years that
    /// do not fit in 64 bits) panicked; every such date is the cap now.
    #[test]
    fn a_far_future_http_date_saturates_to_the_cap() {
        let now = UNIX_EPOCH + Duration::from_secs(1_780_000_000);
        for year in [
            "300000000000",
            "584554049253",
            "18446744073709551615",
            "99999999999999999999999999999999",
        ] {
            let date = format!("Sun, 06 Nov {year} 08:49:37 GMT");
            assert_eq!(
                parse(&headers(&[("retry-after", &date)]), now, 3_600_000),
                Some(3_600_000),
                "{date}"
            );
            assert_eq!(parse_http_date(&date), None, "{date}");
        }
        let max = format_http_date_secs(u64::MAX);
        assert_eq!(http_date_secs(&max), Some(u64::MAX), "{max}");
    }

    /// Any value of either header, and any date-shaped value: never a panic, never above the
    /// cap.
    fn header_value() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[ -~]{0,40}",
            "-?[0-9]{0,30}(\\.[0-9]{0,20})?(e[+-]?[0-9]{1,4})?",
            "(Mon|Sun|X), [0-9]{1,3} (Jan|Feb|Dec|Foo) [0-9]{1,40} [0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3} GMT",
            (any::<u64>(), 1u64..=12, 1u64..=31).prop_map(|(year, month, day)| {
                let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep",
                    "Oct", "Nov", "Dec"][(month - 1) as usize];
                format!("Tue, {day:02} {month} {year} 23:59:60 GMT")
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        #[test]
        fn any_retry_after_is_within_the_cap_and_never_panics(
            retry_after in proptest::option::of(header_value()),
            retry_after_ms in proptest::option::of(header_value()),
            now_secs in any::<u64>(),
            max_ms in any::<u64>(),
        ) {
            let mut map = HeaderMap::new();
            for (name, value) in [("retry-after", retry_after), ("retry-after-ms", retry_after_ms)] {
                if let Some(value) = value.and_then(|v| HeaderValue::from_str(&v).ok()) {
                    map.insert(name, value);
                }
            }
            let now = UNIX_EPOCH
                .checked_add(Duration::from_secs(now_secs))
                .unwrap_or(UNIX_EPOCH);
            if let Some(ms) = parse(&map, now, max_ms) {
                prop_assert!(ms <= max_ms);
            }
        }
    }
}
