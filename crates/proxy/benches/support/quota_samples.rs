// The real rate-limit header samples (`quota_header_samples.txt`) as header maps: included by
// the parser's tests (`src/quota_headers_tests.rs`) and its benchmark (`quota_headers.rs`).

/// The real answers, one `provider|name: value` a line.
const SAMPLES: &str = include_str!("quota_header_samples.txt");

/// The sample answer of `provider`, as (name, value) pairs.
fn sample(provider: &str) -> Vec<(&'static str, &'static str)> {
    SAMPLES
        .lines()
        .filter_map(|line| {
            line.strip_prefix(provider)?
                .strip_prefix('|')?
                .split_once(": ")
        })
        .collect()
}

/// A header map of `pairs` (a pair that is not a valid header is left out).
fn headers(pairs: &[(&str, &str)]) -> axum::http::HeaderMap {
    let mut map = axum::http::HeaderMap::new();
    for (name, value) in pairs {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::try_from(*name),
            axum::http::HeaderValue::from_str(value),
        ) {
            map.append(name, value);
        }
    }
    map
}
