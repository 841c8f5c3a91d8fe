//! The upstream HTTP client and the header rules of both directions.
//!
//! One pooled hyper client (HTTP/1.1, keep-alive, `TCP_NODELAY`, rustls with the webpki roots
//! for `https://` upstreams), shared by every call. Bodies are never copied on the way out
//! (`Full<Bytes>`) and streamed on the way back (`Incoming`).
//!
//! **Toward the upstream**: the client's headers minus its credentials (`authorization`,
//! `x-api-key`), hop-by-hop headers, cookies, `x-turnstile-*`, the OpenAI organization/project
//! headers (they belong to the client's account, not the gateway's) and `accept-encoding`
//! (`identity` is asked for, so usage can be read without decompressing); plus the upstream's
//! key from its environment variable (`Authorization: Bearer` for OpenAI, `x-api-key` for
//! Anthropic, with `anthropic-version: 2023-06-01` when the client sent none).
//!
//! **Toward the client**: the upstream's headers minus hop-by-hop ones, `content-length` on
//! streams, cookies, and the account-wide `x-ratelimit-*` / `anthropic-ratelimit-*` headers
//! (they describe the shared account and would leak other tenants' consumption).

use std::time::Duration;

use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::config::{ApiFormat, Upstream};

/// The pooled upstream client.
pub type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A client that could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up TLS for upstream calls: {0}")]
pub struct ClientError(String);

/// Builds the pooled client.
pub fn client(connect_timeout: Duration) -> Result<HttpClient, ClientError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map_err(|e| ClientError(e.to_string()))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .build(https))
}

fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

/// The headers sent upstream for a client request with `client` headers.
pub fn request_headers(client: &HeaderMap, upstream: &Upstream) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(client.len() + 4);
    for (name, value) in client {
        let n = name.as_str();
        let dropped = hop_by_hop(name)
            || matches!(
                n,
                "authorization"
                    | "x-api-key"
                    | "cookie"
                    | "accept-encoding"
                    | "openai-organization"
                    | "openai-project"
            )
            || n.starts_with("x-turnstile-");
        if !dropped {
            out.append(name.clone(), value.clone());
        }
    }
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    out.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    if let Some(key) = &upstream.api_key {
        match upstream.format {
            ApiFormat::Openai => {
                if let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {key}")) {
                    value.set_sensitive(true);
                    out.insert(header::AUTHORIZATION, value);
                }
            }
            ApiFormat::Anthropic => {
                if let Ok(mut value) = HeaderValue::from_str(key) {
                    value.set_sensitive(true);
                    out.insert(HeaderName::from_static("x-api-key"), value);
                }
            }
        }
    }
    if upstream.format == ApiFormat::Anthropic && !out.contains_key("anthropic-version") {
        out.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static("2023-06-01"),
        );
    }
    out
}

/// The upstream answer's headers as forwarded to the client.
pub fn response_headers(upstream: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(upstream.len());
    for (name, value) in upstream {
        let n = name.as_str();
        let dropped = hop_by_hop(name)
            || n == "set-cookie"
            || n.starts_with("x-ratelimit-")
            || n.starts_with("anthropic-ratelimit-")
            || n == "retry-after"
            || n == "retry-after-ms";
        if !dropped {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn credentials_never_cross_in_either_direction() {
        let upstream = Upstream {
            name: Arc::from("a"),
            format: ApiFormat::Anthropic,
            base_url: Arc::from("http://x"),
            api_key: Some(Arc::from("sk-ant-secret")),
        };
        let mut client = HeaderMap::new();
        client.insert("authorization", "Bearer tsk_abc".parse().unwrap());
        client.insert("x-api-key", "tsk_abc".parse().unwrap());
        client.insert("x-turnstile-wait-ms", "5".parse().unwrap());
        client.insert("x-stainless-lang", "python".parse().unwrap());
        let sent = request_headers(&client, &upstream);
        assert_eq!(sent["x-api-key"], "sk-ant-secret");
        assert!(!sent.contains_key("authorization"));
        assert!(!sent.contains_key("x-turnstile-wait-ms"));
        assert_eq!(sent["x-stainless-lang"], "python");
        assert_eq!(sent["anthropic-version"], "2023-06-01");

        let mut back = HeaderMap::new();
        back.insert("x-ratelimit-remaining-requests", "5".parse().unwrap());
        back.insert("x-request-id", "req_1".parse().unwrap());
        back.insert("content-length", "10".parse().unwrap());
        let shown = response_headers(&back);
        assert!(!shown.contains_key("x-ratelimit-remaining-requests"));
        assert!(!shown.contains_key("content-length"));
        assert_eq!(shown["x-request-id"], "req_1");
    }
}
