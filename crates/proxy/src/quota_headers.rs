//! The provider's rate-limit headers on a proxied answer, read into the core's
//! [`ProviderQuota`]. (A 429's `retry-after` / `retry-after-ms` stay read once, by
//! `retry_after.rs`, as the lane's pause: a stronger hold than any window.)
//!
//! # What it reads
//!
//! | family | headers | reset |
//! |---|---|---|
//! | OpenAI (and Azure OpenAI) | `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` | a Go duration: `1s`, `6m0s`, `20ms`, `1m30.5s` (units `h m s ms us µs ns`) |
//! | Anthropic | `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}` | an RFC 3339 instant, taken relative to the answer's `Date` (same clock), else to the receive time; clamped at 0 |
//!
//! A window (kind requests or tokens) is observed when its `remaining` and `reset` both parse;
//! `limit` is optional. Anthropic's token window is `tokens-*` when present (the most
//! restrictive limit in force), else the tighter of `input-tokens-*` and `output-tokens-*`,
//! whose remaining counts are rounded to the nearest thousand by the provider (500 is taken
//! off, so the window never says more than is left). Other headers of the families
//! (`-project-tokens`, `-tokens_usage_based`, `unified-*`, priority tiers) are not read.
//!
//! # Invariants
//!
//! - Every header is optional: absent means no observation, never zero.
//! - A value that does not parse (negative, empty, non-numeric, a duration without a unit, an
//!   impossible date) is ignored, and counted in [`QuotaRead::malformed`]; its window is not
//!   observed. Parsing never panics and never yields a value the text does not say (durations
//!   and instants are computed in integers, rounded up to the millisecond).
//! - One pass over the answer's headers; nothing is allocated.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use turnstile_admission::{ProviderQuota, QuotaWindow};

use crate::retry_after;
use crate::Proxy;

/// What one answer's headers said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuotaRead {
    /// The provider's announced quota (empty when the answer carried none).
    pub quota: ProviderQuota,
    /// Rate-limit header values present but unusable (ignored).
    pub malformed: u32,
}

/// The three headers of one window, as text.
#[derive(Default, Clone, Copy)]
struct Triple<'a> {
    limit: Option<&'a str>,
    remaining: Option<&'a str>,
    reset: Option<&'a str>,
}

impl<'a> Triple<'a> {
    fn set(&mut self, field: &str, value: &'a str) {
        match field {
            "limit" => self.limit = Some(value),
            "remaining" => self.remaining = Some(value),
            "reset" => self.reset = Some(value),
            _ => {}
        }
    }

    fn is_empty(&self) -> bool {
        self.limit.is_none() && self.remaining.is_none() && self.reset.is_none()
    }
}

/// Reads the rate-limit headers of one answer of the call on `lane` of `workspace`, counts
/// them, and hands what they announced to the driver (one command, only when they announced
/// something).
pub(crate) fn observe(proxy: &Proxy, workspace: &Arc<str>, lane: &str, headers: &HeaderMap) {
    let read = read(headers, SystemTime::now());
    let observed = !read.quota.is_empty();
    proxy
        .metrics
        .lane(lane)
        .quota_read(read.malformed, observed);
    if observed {
        // Replicas: a window the provider says is spent holds the lane on every replica until
        // its reset (the shared pause); a window with some left is this replica's to apply.
        let spent = [read.quota.requests, read.quota.tokens]
            .into_iter()
            .flatten()
            .filter(|w| w.remaining == 0 && w.resets_in_ms > 0)
            .map(|w| w.resets_in_ms)
            .max();
        if let (Some(shared), Some(ms)) = (&proxy.shared, spent) {
            shared.hold(workspace, lane, ms);
        }
        // A driver that stopped has nothing to hold; the call's own answer goes on.
        let _ = proxy
            .driver
            .observe_provider_quota(workspace, lane, read.quota);
    }
}

/// How a family states its resets.
#[derive(Clone, Copy)]
enum Reset {
    /// A Go duration from now (OpenAI).
    Duration,
    /// An RFC 3339 instant, relative to `reference` (epoch ms: the `Date` header, else the
    /// receive time) (Anthropic).
    Instant { reference: u64 },
}

/// Reads the provider's rate-limit headers of one answer received at `received`.
pub fn read(headers: &HeaderMap, received: SystemTime) -> QuotaRead {
    // [requests, tokens] of OpenAI; [requests, tokens, input-tokens, output-tokens] of Anthropic.
    let mut openai = [Triple::default(); 2];
    let mut anthropic = [Triple::default(); 4];
    let mut malformed = 0u32;
    for (name, value) in headers {
        let name = name.as_str();
        if let Some(rest) = name.strip_prefix("x-ratelimit-") {
            let Some((field, kind)) = rest.split_once('-') else {
                continue;
            };
            let slot = match kind {
                "requests" => 0,
                "tokens" => 1,
                _ => continue,
            };
            match value.to_str() {
                Ok(text) => openai[slot].set(field, text.trim()),
                Err(_) => malformed += 1,
            }
        } else if let Some(rest) = name.strip_prefix("anthropic-ratelimit-") {
            let Some((kind, field)) = rest.rsplit_once('-') else {
                continue;
            };
            let slot = match kind {
                "requests" => 0,
                "tokens" => 1,
                "input-tokens" => 2,
                "output-tokens" => 3,
                _ => continue,
            };
            match value.to_str() {
                Ok(text) => anthropic[slot].set(field, text.trim()),
                Err(_) => malformed += 1,
            }
        }
    }
    let mut quota = ProviderQuota::default();
    if openai.iter().any(|t| !t.is_empty()) {
        quota.requests = window(&openai[0], Reset::Duration, 0, &mut malformed);
        quota.tokens = window(&openai[1], Reset::Duration, 0, &mut malformed);
    }
    if anthropic.iter().any(|t| !t.is_empty()) {
        let date = headers
            .get("date")
            .and_then(|v| v.to_str().ok())
            .and_then(retry_after::parse_http_date);
        let reference = epoch_ms(date.unwrap_or(received));
        let reset = Reset::Instant { reference };
        quota.requests = quota
            .requests
            .or(window(&anthropic[0], reset, 0, &mut malformed));
        let total = window(&anthropic[1], reset, 0, &mut malformed);
        let input = window(&anthropic[2], reset, ROUNDING, &mut malformed);
        let output = window(&anthropic[3], reset, ROUNDING, &mut malformed);
        quota.tokens = quota.tokens.or(total).or(tighter(input, output));
    }
    QuotaRead { quota, malformed }
}

/// What Anthropic's rounding to the nearest thousand may have added to a remaining count.
const ROUNDING: u64 = 500;

/// The window of one triple, when its remaining count and reset parse; every value present
/// that does not parse is counted in `malformed`.
fn window(
    triple: &Triple<'_>,
    reset: Reset,
    rounding: u64,
    malformed: &mut u32,
) -> Option<QuotaWindow> {
    let mut parsed = |text: Option<&str>, parse: &dyn Fn(&str) -> Option<u64>| match text {
        None => None,
        Some(text) => {
            let value = parse(text);
            *malformed += u32::from(value.is_none());
            value
        }
    };
    let limit = parsed(triple.limit, &parse_count);
    let remaining = parsed(triple.remaining, &parse_count);
    let resets_in_ms = parsed(triple.reset, &|text| match reset {
        Reset::Duration => parse_duration_ms(text),
        Reset::Instant { reference } => {
            parse_rfc3339_ms(text).map(|at| at.saturating_sub(reference))
        }
    });
    Some(QuotaWindow {
        remaining: remaining?.saturating_sub(rounding),
        resets_in_ms: resets_in_ms?,
        limit,
    })
}

/// The window that admits less: the smaller remaining count (the later reset on a tie).
fn tighter(a: Option<QuotaWindow>, b: Option<QuotaWindow>) -> Option<QuotaWindow> {
    match (a, b) {
        (Some(a), Some(b)) => Some(
            if (a.remaining, std::cmp::Reverse(a.resets_in_ms))
                <= (b.remaining, std::cmp::Reverse(b.resets_in_ms))
            {
                a
            } else {
                b
            },
        ),
        (a, b) => a.or(b),
    }
}

fn epoch_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A count: ASCII digits only (no sign, no fraction).
pub fn parse_count(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A Go duration (`1s`, `6m0s`, `20ms`, `1m30.5s`, `4m12.172s`, `0`), in milliseconds rounded
/// up. No sign; every number needs a unit (except a lone `0`); units `h m s ms us µs ns`.
pub fn parse_duration_ms(text: &str) -> Option<u64> {
    if text == "0" {
        return Some(0);
    }
    let mut rest = text.as_bytes();
    if rest.is_empty() {
        return None;
    }
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let (int, after) = rest.split_at(int_len);
        let (frac, after) = match after.split_first() {
            Some((b'.', after)) => {
                let len = after.iter().take_while(|b| b.is_ascii_digit()).count();
                after.split_at(len)
            }
            _ => (&after[..0], after),
        };
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        let unit_len = after
            .iter()
            .take_while(|b| !b.is_ascii_digit() && **b != b'.')
            .count();
        let (unit, after) = after.split_at(unit_len);
        let unit_ns: u128 = match unit {
            b"h" => 3_600_000_000_000,
            b"m" => 60_000_000_000,
            b"s" => 1_000_000_000,
            b"ms" => 1_000_000,
            // `us`, `µs` (U+00B5) and `μs` (U+03BC), as Go accepts them.
            b"us" | [0xC2, 0xB5, b's'] | [0xCE, 0xBC, b's'] => 1_000,
            b"ns" => 1,
            _ => return None,
        };
        let int = digits(int)?;
        // A fraction of the unit, rounded up to the nanosecond (18 digits are plenty).
        let frac = &frac[..frac.len().min(18)];
        let scale = 10u128.pow(frac.len() as u32);
        let frac_ns = (digits(frac)? * unit_ns).div_ceil(scale);
        total_ns = total_ns.checked_add(int.checked_mul(unit_ns)?.checked_add(frac_ns)?)?;
        rest = after;
    }
    u64::try_from(total_ns.div_ceil(1_000_000)).ok()
}

/// Digits as a number (empty: 0); `None` past 38 digits.
fn digits(text: &[u8]) -> Option<u128> {
    text.iter().try_fold(0u128, |n, &b| {
        n.checked_mul(10)?.checked_add(u128::from(b - b'0'))
    })
}

/// An RFC 3339 instant (`2026-02-25T20:02:32Z`, with fractions and offsets), in epoch
/// milliseconds rounded up; `None` for anything else, an impossible date, or before 1970.
pub fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<u64> {
        let part = b.get(range)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')))
    };
    let at = |i: usize, expected: &[u8]| b.get(i).is_some_and(|c| expected.contains(c));
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt ") && at(13, b":") && at(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if year < 1970
        || !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut frac_ms = 0u64;
    if at(i, b".") {
        let len = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        let frac = &b[i + 1..i + 1 + len];
        let ms = frac
            .iter()
            .take(3)
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        let ms = ms * 10u64.pow(3u32.saturating_sub(len as u32));
        let beyond = frac.iter().skip(3).any(|&d| d != b'0');
        frac_ms = ms + u64::from(beyond);
        i += 1 + len;
    }
    let offset_s: i64 = match b.get(i) {
        Some(b'Z' | b'z') if b.len() == i + 1 => 0,
        Some(&sign @ (b'+' | b'-')) if b.len() == i + 6 && at(i + 3, b":") => {
            let (h, m) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            let seconds = (h * 3600 + m * 60) as i64;
            if sign == b'+' {
                seconds
            } else {
                -seconds
            }
        }
        _ => return None,
    };
    let days = retry_after::days_from_civil(year, month, day);
    let local = (days * 86_400 + hour * 3600 + minute * 60 + second) as i64;
    let utc = u64::try_from(local - offset_s).ok()?;
    Some(utc * 1000 + frac_ms)
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `at` as RFC 3339 UTC with seconds (`2026-02-25T20:02:32Z`), as Anthropic sends resets (for
/// the fake upstream and tests).
pub fn format_rfc3339(at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (year, month, day) = retry_after::civil_from_days(secs / 86_400);
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `ms` as a Go duration, as OpenAI sends resets (`20ms`, `2s`, `1m30.5s`) (for the fake
/// upstream and tests).
pub fn format_duration(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (minutes, rest) = (ms / 60_000, ms % 60_000);
    let seconds = if rest % 1000 == 0 {
        format!("{}s", rest / 1000)
    } else {
        let text = format!("{}.{:03}", rest / 1000, rest % 1000);
        format!("{}s", text.trim_end_matches('0'))
    };
    if minutes == 0 {
        seconds
    } else {
        format!("{minutes}m{seconds}")
    }
}

#[cfg(test)]
#[path = "quota_headers_tests.rs"]
mod tests;
