//! Tests of `quota_headers.rs`: real header samples of both providers (from the design note,
//! `../shared/design/provider-quota.md`, and the sources it cites), every value form, and
//! property tests over arbitrary strings (never a panic, never a wrong value).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;

use super::*;

include!("../benches/support/quota_samples.rs");

fn at(rfc3339: &str) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(parse_rfc3339_ms(rfc3339).unwrap())
}

fn w(remaining: u64, resets_in_ms: u64, limit: Option<u64>) -> Option<QuotaWindow> {
    Some(QuotaWindow {
        remaining,
        resets_in_ms,
        limit,
    })
}

#[test]
fn a_real_openai_answer_is_read() {
    let got = super::read(&headers(&sample("openai")), SystemTime::now());
    assert_eq!(got.malformed, 0);
    assert_eq!(got.quota.requests, w(59, 1_000, Some(60)));
    assert_eq!(got.quota.tokens, w(149_984, 360_000, Some(150_000)));
}

#[test]
fn a_real_anthropic_answer_is_read_against_its_date() {
    // Received a little later than its Date: the resets are taken against the Date.
    let received = at("2026-02-25T20:02:31.900Z");
    let got = super::read(&headers(&sample("anthropic")), received);
    assert_eq!(got.malformed, 0);
    assert_eq!(got.quota.requests, w(49, 1_000, Some(50)));
    assert_eq!(got.quota.tokens, w(36_000, 5_000, Some(38_000)));
}

#[test]
fn anthropic_without_a_total_takes_the_tighter_of_input_and_output_less_the_rounding() {
    let only_split: Vec<_> = sample("anthropic")
        .into_iter()
        .filter(|(name, _)| !name.starts_with("anthropic-ratelimit-tokens-") && *name != "date")
        .collect();
    let got = super::read(&headers(&only_split), at("2026-02-25T20:02:31Z"));
    // Output 8000 (rounded: at least 7500 left) is tighter than input 28000.
    assert_eq!(got.quota.tokens, w(7_500, 5_000, Some(8_000)));
    assert_eq!(got.quota.requests, w(49, 1_000, Some(50)));
}

#[test]
fn sentinels_and_malformed_values_are_ignored_and_counted() {
    // Azure Responses sent -1 / -1 / 0 (openai/openai-dotnet#838).
    let got = super::read(
        &headers(&[
            ("x-ratelimit-remaining-requests", "-1"),
            ("x-ratelimit-remaining-tokens", "-1"),
            ("x-ratelimit-reset-requests", "0s"),
            ("x-ratelimit-reset-tokens", "soon"),
        ]),
        SystemTime::now(),
    );
    assert!(got.quota.is_empty());
    assert_eq!(got.malformed, 3);
    // A past Anthropic reset (tidyllm fixture: reset a second before Date) clamps at 0.
    let got = super::read(
        &headers(&[
            ("date", "Wed, 25 Feb 2026 12:41:00 GMT"),
            ("anthropic-ratelimit-requests-remaining", "999"),
            ("anthropic-ratelimit-requests-reset", "2026-02-25T12:40:59Z"),
            ("anthropic-ratelimit-tokens-remaining", "12x"),
            ("anthropic-ratelimit-tokens-reset", "2026-02-30T00:00:00Z"),
        ]),
        SystemTime::now(),
    );
    assert_eq!(got.quota.requests, w(999, 0, None));
    assert_eq!(got.quota.tokens, None);
    assert_eq!(got.malformed, 2);
}

#[test]
fn absent_headers_and_remaining_without_reset_are_no_observation() {
    let got = super::read(
        &headers(&[("content-type", "text/plain")]),
        SystemTime::now(),
    );
    assert_eq!(got, QuotaRead::default());
    // Azure often sends only the remaining counts: nothing to time a window with.
    let got = super::read(
        &headers(&[
            ("x-ratelimit-remaining-requests", "79"),
            ("x-ratelimit-remaining-tokens", "61353"),
        ]),
        SystemTime::now(),
    );
    assert!(got.quota.is_empty());
    assert_eq!(got.malformed, 0);
}

#[test]
fn go_durations_of_every_form() {
    for (text, ms) in [
        ("1s", 1_000),
        ("6m0s", 360_000),
        ("20ms", 20),
        ("1m30.5s", 90_500),
        ("4m12.172s", 252_172),
        ("23h18m29.144s", 83_909_144),
        ("0s", 0),
        ("0", 0),
        ("9ms", 9),
        ("12ms", 12),
        ("1.5us", 1),
        ("250µs", 1),
        ("999ns", 1),
        ("2h", 7_200_000),
        (".5s", 500),
    ] {
        assert_eq!(parse_duration_ms(text), Some(ms), "{text}");
    }
    for text in [
        "", "s", "1", "1x", "-1s", "+1s", "1.s.", "1 s", "1s ", "1..5s", "1e3ms",
    ] {
        assert_eq!(parse_duration_ms(text), None, "{text:?}");
    }
}

#[test]
fn rfc3339_instants_with_fractions_and_offsets() {
    let base = parse_rfc3339_ms("2026-02-25T20:02:32Z").unwrap();
    assert_eq!(base, 1_772_049_752_000);
    assert_eq!(
        parse_rfc3339_ms("2026-02-25T20:02:32.25Z"),
        Some(base + 250)
    );
    assert_eq!(
        parse_rfc3339_ms("2026-02-25T20:02:32.0001Z"),
        Some(base + 1)
    );
    assert_eq!(parse_rfc3339_ms("2026-02-25T21:02:32+01:00"), Some(base));
    assert_eq!(parse_rfc3339_ms("2026-02-25t19:32:32-00:30"), Some(base));
    assert_eq!(
        parse_rfc3339_ms("2024-02-29T00:00:00Z").map(|_| ()),
        Some(())
    );
    for text in [
        "2025-02-29T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-02-25T24:00:00Z",
        "2026-02-25T20:02:32",
        "2026-02-25T20:02:32.Z",
        "2026-02-25T20:02:32+0100",
        "1969-12-31T23:59:59Z",
        "Wed, 25 Feb 2026 20:02:32 GMT",
        "",
    ] {
        assert_eq!(parse_rfc3339_ms(text), None, "{text:?}");
    }
}

#[test]
fn the_fake_upstreams_formats_read_back() {
    for ms in [0, 7, 999, 1_000, 2_000, 1_500, 90_500, 360_000, 3_599_999] {
        assert_eq!(parse_duration_ms(&format_duration(ms)), Some(ms), "{ms}");
    }
    let now = UNIX_EPOCH + Duration::from_secs(1_780_000_123);
    assert_eq!(
        parse_rfc3339_ms(&format_rfc3339(now)),
        Some(1_780_000_123_000)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>(), ascii in "[0-9a-zµ.:+TZ -]{0,24}") {
        let _ = parse_duration_ms(&text);
        let _ = parse_duration_ms(&ascii);
        let _ = parse_rfc3339_ms(&text);
        let _ = parse_rfc3339_ms(&ascii);
        let _ = parse_count(&text);
    }

    #[test]
    fn a_duration_reads_as_the_sum_of_its_parts(
        h in 0u64..48, m in 0u64..60, s in 0u64..60, frac in 0u64..1000,
    ) {
        let text = format!("{h}h{m}m{s}.{frac:03}s");
        let ms = ((h * 60 + m) * 60 + s) * 1000 + frac;
        prop_assert_eq!(parse_duration_ms(&text), Some(ms));
    }

    #[test]
    fn an_instant_reads_as_the_one_it_formats(secs in 0u64..4_000_000_000) {
        let at = UNIX_EPOCH + Duration::from_secs(secs);
        prop_assert_eq!(parse_rfc3339_ms(&format_rfc3339(at)), Some(secs * 1000));
    }

    /// Any value in any rate-limit header: never a panic, and every window read is exactly
    /// what its own headers say (or no window and a count).
    #[test]
    fn arbitrary_values_never_give_a_wrong_window(
        values in proptest::collection::vec(
            prop_oneof!["[0-9]{1,6}", "-1", "[0-9]{1,3}(ms|s|m[0-9]s)", "[ -~]{0,12}"], 6),
    ) {
        let names = [
            "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests", "x-ratelimit-limit-tokens",
            "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
        ];
        let pairs: Vec<(&str, &str)> =
            names.iter().copied().zip(values.iter().map(String::as_str)).collect();
        let got = super::read(&headers(&pairs), SystemTime::now());
        // Values are read trimmed, as HTTP fields are.
        let values: Vec<&str> = values.iter().map(|v| v.trim()).collect();
        let expect = |limit: &str, remaining: &str, reset: &str| {
            Some(QuotaWindow {
                remaining: parse_count(remaining)?,
                resets_in_ms: parse_duration_ms(reset)?,
                limit: parse_count(limit),
            })
        };
        prop_assert_eq!(got.quota.requests, expect(values[0], values[1], values[2]));
        prop_assert_eq!(got.quota.tokens, expect(values[3], values[4], values[5]));
        let bad = [
            parse_count(values[0]).is_none(), parse_count(values[1]).is_none(),
            parse_duration_ms(values[2]).is_none(), parse_count(values[3]).is_none(),
            parse_count(values[4]).is_none(), parse_duration_ms(values[5]).is_none(),
        ];
        prop_assert_eq!(got.malformed as usize, bad.iter().filter(|b| **b).count());
    }
}
