//! The caller's own rate-limit headers: what the principal's own scope allows it
//! ([`CallerQuota`], computed by the core at the decision), written on its answers in the
//! spelling of its API.
//!
//! | format | headers | reset |
//! |---|---|---|
//! | OpenAI (and `POST /v1/admissions`) | `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` | a Go duration until full again: `0s`, `20ms`, `1.5s`, `6m0s`, `1h0m0s` |
//! | Anthropic | `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}` | the RFC 3339 UTC instant it is full again, rounded up to the second |
//!
//! # Invariants
//!
//! - Only the caller's figures: the provider's headers (the account's) are dropped from every
//!   forwarded answer before these are written (`upstream::response_headers`), so these are the
//!   only rate-limit headers a client sees.
//! - A kind the principal has no limit of gets no header; a principal without rate limits
//!   costs one test and no clock read.
//! - The figures are those of the admission instant (streams carry them in their head); an
//!   Anthropic reset instant is that instant plus the reset.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::Response;
use turnstile_admission::{CallerQuota, Evidence, Rejection};

use crate::error::ProxyError;
use crate::format::ApiFormat;
use crate::retry_after::civil_from_days;

/// `[limit, remaining, reset]` of requests, then of tokens, in OpenAI's spelling.
static OPENAI: [[HeaderName; 3]; 2] = [
    [
        HeaderName::from_static("x-ratelimit-limit-requests"),
        HeaderName::from_static("x-ratelimit-remaining-requests"),
        HeaderName::from_static("x-ratelimit-reset-requests"),
    ],
    [
        HeaderName::from_static("x-ratelimit-limit-tokens"),
        HeaderName::from_static("x-ratelimit-remaining-tokens"),
        HeaderName::from_static("x-ratelimit-reset-tokens"),
    ],
];

/// The same in Anthropic's spelling.
static ANTHROPIC: [[HeaderName; 3]; 2] = [
    [
        HeaderName::from_static("anthropic-ratelimit-requests-limit"),
        HeaderName::from_static("anthropic-ratelimit-requests-remaining"),
        HeaderName::from_static("anthropic-ratelimit-requests-reset"),
    ],
    [
        HeaderName::from_static("anthropic-ratelimit-tokens-limit"),
        HeaderName::from_static("anthropic-ratelimit-tokens-remaining"),
        HeaderName::from_static("anthropic-ratelimit-tokens-reset"),
    ],
];

/// Writes the caller's rate-limit headers of `quota` in `format`'s spelling; `at` is the
/// instant the figures were taken (an Anthropic reset is an instant after it).
pub fn write_caller_headers(
    headers: &mut HeaderMap,
    quota: &CallerQuota,
    format: ApiFormat,
    at: SystemTime,
) {
    let names = match format {
        ApiFormat::Openai => &OPENAI,
        ApiFormat::Anthropic => &ANTHROPIC,
    };
    for (line, [limit, remaining, reset]) in [quota.requests(), quota.tokens()].iter().zip(names) {
        let Some(line) = line else { continue };
        headers.insert(limit.clone(), HeaderValue::from(line.limit));
        headers.insert(remaining.clone(), HeaderValue::from(line.remaining));
        let text = match format {
            ApiFormat::Openai => go_duration(line.reset_ms),
            ApiFormat::Anthropic => rfc3339_seconds(at + Duration::from_millis(line.reset_ms)),
        };
        if let Ok(value) = HeaderValue::from_str(&text) {
            headers.insert(reset.clone(), value);
        }
    }
}

/// One call's caller headers, fixed at its grant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallerHeaders {
    quota: CallerQuota,
    at: SystemTime,
}

impl CallerHeaders {
    /// The figures of a grant's evidence, taken now (the clock is read only when there are some).
    pub(crate) fn at_grant(evidence: &Evidence) -> Self {
        let quota = evidence.caller;
        let at = if quota.is_empty() {
            UNIX_EPOCH
        } else {
            SystemTime::now()
        };
        CallerHeaders { quota, at }
    }

    /// Writes them into an answer's headers.
    pub(crate) fn write(&self, headers: &mut HeaderMap, format: ApiFormat) {
        if !self.quota.is_empty() {
            write_caller_headers(headers, &self.quota, format, self.at);
        }
    }
}

/// A refusal's answer in `format`, with the caller's figures at the refusal.
pub(crate) fn refused(rejection: &Rejection, format: ApiFormat) -> Response {
    let mut response = ProxyError::refused(rejection).response(format);
    CallerHeaders::at_grant(&rejection.evidence).write(response.headers_mut(), format);
    response
}

/// `ms` as Go prints a `time.Duration` of whole milliseconds (OpenAI's reset format).
fn go_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (hours, minutes) = (ms / 3_600_000, ms / 60_000 % 60);
    let (seconds, fraction) = (ms / 1_000 % 60, ms % 1_000);
    let mut text = String::with_capacity(16);
    if hours > 0 {
        text.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        text.push_str(&format!("{minutes}m"));
    }
    text.push_str(&seconds.to_string());
    if fraction > 0 {
        let digits = format!("{fraction:03}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    text.push('s');
    text
}

/// `at` rounded up to the second, as RFC 3339 UTC (`2026-02-25T20:02:32Z`).
fn rfc3339_seconds(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() + u64::from(since.subsec_nanos() > 0);
    let (days, in_day) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        in_day / 3_600,
        in_day / 60 % 60,
        in_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstile_admission::CallerLimit;

    fn quota() -> CallerQuota {
        CallerQuota::new(
            Some(CallerLimit {
                limit: 60,
                remaining: 59,
                reset_ms: 1_000,
            }),
            Some(CallerLimit {
                limit: 150_000,
                remaining: 149_984,
                reset_ms: 6,
            }),
        )
    }

    #[test]
    fn resets_read_as_go_durations() {
        for (ms, text) in [
            (0, "0s"),
            (9, "9ms"),
            (999, "999ms"),
            (1_000, "1s"),
            (1_500, "1.5s"),
            (1_020, "1.02s"),
            (360_000, "6m0s"),
            (252_172, "4m12.172s"),
            (3_600_000, "1h0m0s"),
            (83_909_144, "23h18m29.144s"),
        ] {
            assert_eq!(go_duration(ms), text, "{ms} ms");
        }
    }

    #[test]
    fn openai_spelling_with_durations() {
        let mut headers = HeaderMap::new();
        write_caller_headers(&mut headers, &quota(), ApiFormat::Openai, SystemTime::now());
        let got = |name: &str| headers[name].to_str().unwrap().to_owned();
        assert_eq!(got("x-ratelimit-limit-requests"), "60");
        assert_eq!(got("x-ratelimit-remaining-requests"), "59");
        assert_eq!(got("x-ratelimit-reset-requests"), "1s");
        assert_eq!(got("x-ratelimit-limit-tokens"), "150000");
        assert_eq!(got("x-ratelimit-remaining-tokens"), "149984");
        assert_eq!(got("x-ratelimit-reset-tokens"), "6ms");
        assert_eq!(headers.len(), 6);
    }

    #[test]
    fn anthropic_spelling_with_instants_rounded_up() {
        let mut headers = HeaderMap::new();
        // 2026-02-25T20:02:31.500Z
        let at = UNIX_EPOCH + Duration::from_millis(1_772_049_751_500);
        write_caller_headers(&mut headers, &quota(), ApiFormat::Anthropic, at);
        let got = |name: &str| headers[name].to_str().unwrap().to_owned();
        assert_eq!(got("anthropic-ratelimit-requests-limit"), "60");
        assert_eq!(got("anthropic-ratelimit-requests-remaining"), "59");
        assert_eq!(
            got("anthropic-ratelimit-requests-reset"),
            "2026-02-25T20:02:33Z"
        );
        assert_eq!(got("anthropic-ratelimit-tokens-limit"), "150000");
        assert_eq!(got("anthropic-ratelimit-tokens-remaining"), "149984");
        assert_eq!(
            got("anthropic-ratelimit-tokens-reset"),
            "2026-02-25T20:02:32Z"
        );
        assert_eq!(headers.len(), 6);
        assert_eq!(rfc3339_seconds(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
    }

    #[test]
    fn an_absent_kind_writes_nothing() {
        let mut headers = HeaderMap::new();
        let tokens_only = CallerQuota::new(None, quota().tokens());
        write_caller_headers(
            &mut headers,
            &tokens_only,
            ApiFormat::Openai,
            SystemTime::now(),
        );
        assert!(!headers.contains_key("x-ratelimit-limit-requests"));
        assert_eq!(headers.len(), 3);
        let mut headers = HeaderMap::new();
        let none = Evidence::new(
            turnstile_admission::Decision::Admit,
            turnstile_admission::Reason::Admitted,
            0,
        );
        CallerHeaders::at_grant(&none).write(&mut headers, ApiFormat::Anthropic);
        assert!(headers.is_empty());
    }
}
