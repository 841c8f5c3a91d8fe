//! What every call to an upstream sends the same way, and the header rules of both directions.
//!
//! Calls go out through the connection pool ([`crate::pool`]: HTTP/1.1 keep-alive,
//! `TCP_NODELAY`, rustls with the webpki roots for `https://` upstreams). Bodies are never
//! copied on the way out (`Full<Bytes>`) and streamed on the way back. What is the same for
//! every call to an upstream (its origin, each endpoint's path, the credential and `Host`
//! headers, its idle connections) is built once at start ([`Outbound`]); headers are filtered
//! in place in both directions (no new map per call).
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

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::uri::{PathAndQuery, Uri};

use crate::config::{Route, Upstream};
use crate::deployments::Rotation;
use crate::format::ApiFormat;
use crate::pool::Idle;
use crate::request::Endpoint;

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

/// What every call to one upstream sends the same way, built once when the service starts: the
/// origin it connects to, the path of each endpoint under the base URL, the credential header
/// and the upstream's idle connections. A base URL that does not make a valid URI leaves that
/// endpoint's path empty (each call to it answers 502).
#[derive(Clone)]
pub struct Outbound {
    /// Scheme and authority (`None`: the base URL makes no valid URI).
    origin: Option<Uri>,
    /// Origin-form (`/v1/chat/completions`), as an HTTP/1 request line takes it; indexed by
    /// [`Endpoint::index`].
    paths: [Option<Uri>; Endpoint::ALL.len()],
    /// This upstream's idle keep-alive connections (shared by the routes of its models).
    pub idle: Arc<Idle>,
    /// `Authorization: Bearer …` (OpenAI) or `x-api-key` (Anthropic), marked sensitive.
    credential: Option<(HeaderName, HeaderValue)>,
    /// The `Host` header, exactly as the pooled client would derive it from the URI per call.
    host: Option<HeaderValue>,
    format: ApiFormat,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("origin", &self.origin)
            .field("paths", &self.paths)
            .field("credential", &self.credential.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

impl Outbound {
    /// Builds the parts of an upstream with base URL `base_url` (no trailing slash).
    pub fn new(format: ApiFormat, base_url: &str, api_key: Option<&str>) -> Self {
        let uris = Endpoint::ALL
            .map(|endpoint| Uri::try_from(format!("{base_url}{}", endpoint.upstream_path())).ok());
        let origin = uris.iter().flatten().next().and_then(|uri| {
            let mut parts = uri.clone().into_parts();
            parts.path_and_query = Some(PathAndQuery::from_static("/"));
            Uri::from_parts(parts).ok()
        });
        let paths = uris
            .clone()
            .map(|uri| Some(Uri::from(uri?.into_parts().path_and_query?)));
        let credential = api_key.and_then(|key| {
            let (name, value) = match format {
                ApiFormat::Openai => (header::AUTHORIZATION, format!("Bearer {key}")),
                ApiFormat::Anthropic => (HeaderName::from_static("x-api-key"), key.to_owned()),
            };
            let mut value = HeaderValue::from_str(&value).ok()?;
            value.set_sensitive(true);
            Some((name, value))
        });
        let host = uris.iter().flatten().next().and_then(host_header);
        Outbound {
            origin,
            paths,
            idle: Arc::default(),
            credential,
            host,
            format,
        }
    }

    /// The outbound parts of a resolved upstream.
    pub fn of(upstream: &Upstream) -> Self {
        Outbound::new(
            upstream.format,
            &upstream.base_url,
            upstream.api_key.as_deref(),
        )
    }

    /// The origin (scheme and authority) and the origin-form path of `endpoint` on this upstream
    /// (`None`: the base URL makes no valid URI).
    pub fn target(&self, endpoint: Endpoint) -> Option<(&Uri, Uri)> {
        Some((self.origin.as_ref()?, self.paths[endpoint.index()].clone()?))
    }
}

/// A model's route as the proxy serves it: the configured [`Route`], the [`Outbound`] of each
/// deployment's upstream (shared, idle connections included, by every route of that upstream)
/// and the choice among its deployments ([`Rotation`]).
#[derive(Debug)]
pub struct Routed {
    /// The route, as configured.
    pub route: Route,
    /// What every call to each deployment's upstream sends the same way, in the route's order.
    pub outbounds: Vec<Outbound>,
    /// The choice among the deployments.
    pub rotation: Rotation,
}

impl Routed {
    /// The routes of `routes`, each upstream's [`Outbound`] built once and shared by the routes
    /// of its models.
    pub fn all(routes: impl IntoIterator<Item = (String, Route)>) -> HashMap<String, Routed> {
        let mut outbounds: HashMap<Arc<str>, Outbound> = HashMap::new();
        routes
            .into_iter()
            .map(|(model, route)| {
                let of_route = route
                    .deployments
                    .iter()
                    .map(|deployment| {
                        outbounds
                            .entry(deployment.upstream.name.clone())
                            .or_insert_with(|| Outbound::of(&deployment.upstream))
                            .clone()
                    })
                    .collect();
                let rotation = Rotation::new(&route);
                (
                    model,
                    Routed {
                        route,
                        outbounds: of_route,
                        rotation,
                    },
                )
            })
            .collect()
    }
}

/// The `Host` header of `uri`: the host, and the port unless it is the scheme's default.
fn host_header(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let secure = matches!(uri.scheme_str(), Some("https" | "wss"));
    let value = match uri.port() {
        Some(port) if !matches!((port.as_u16(), secure), (443, true) | (80, false)) => {
            HeaderValue::from_str(&format!("{host}:{port}"))
        }
        _ => HeaderValue::from_str(host),
    };
    value.ok()
}

/// Whether a client header stays out of the upstream request.
fn dropped_upstream(name: &HeaderName) -> bool {
    let n = name.as_str();
    hop_by_hop(name)
        || matches!(
            n,
            "authorization"
                | "x-api-key"
                | "cookie"
                | "accept-encoding"
                | "openai-organization"
                | "openai-project"
        )
        || n.starts_with("x-turnstile-")
}

/// Whether an upstream header stays out of the client's answer.
fn dropped_downstream(name: &HeaderName) -> bool {
    let n = name.as_str();
    hop_by_hop(name)
        || n == "set-cookie"
        || n.starts_with("x-ratelimit-")
        || n.starts_with("anthropic-ratelimit-")
        || n == "retry-after"
        || n == "retry-after-ms"
}

/// Removes every header `dropped` names (all of its values), in place: no new map, no copied
/// values, and no list allocated for the names found (up to eight are held on the stack; a
/// map with more to drop is scanned again).
fn remove_where(headers: &mut HeaderMap, dropped: fn(&HeaderName) -> bool) {
    const HELD: usize = 8;
    loop {
        let mut found: [Option<HeaderName>; HELD] = Default::default();
        let mut count = 0;
        for name in headers.keys().filter(|name| dropped(name)) {
            if count == HELD {
                break;
            }
            found[count] = Some(name.clone());
            count += 1;
        }
        for name in found.iter().flatten() {
            headers.remove(name);
        }
        if count < HELD {
            return;
        }
    }
}

/// Turns the client's request headers into the headers sent upstream, in place.
pub fn request_headers(headers: &mut HeaderMap, outbound: &Outbound) {
    remove_where(headers, dropped_upstream);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    if let Some((name, value)) = &outbound.credential {
        headers.insert(name.clone(), value.clone());
    }
    if let Some(host) = &outbound.host {
        headers.insert(header::HOST, host.clone());
    }
    if outbound.format == ApiFormat::Anthropic && !headers.contains_key("anthropic-version") {
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static("2023-06-01"),
        );
    }
}

/// Turns the upstream answer's headers into the headers forwarded to the client, in place.
pub fn response_headers(headers: &mut HeaderMap) {
    remove_where(headers, dropped_downstream);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_cross_in_either_direction() {
        let outbound = Outbound::new(ApiFormat::Anthropic, "http://x", Some("sk-ant-secret"));
        let mut client = HeaderMap::new();
        client.insert("authorization", "Bearer tsk_abc".parse().unwrap());
        client.insert("x-api-key", "tsk_abc".parse().unwrap());
        client.insert("x-turnstile-wait-ms", "5".parse().unwrap());
        client.insert("x-stainless-lang", "python".parse().unwrap());
        let mut sent = client.clone();
        request_headers(&mut sent, &outbound);
        assert_eq!(sent["x-api-key"], "sk-ant-secret");
        assert!(!sent.contains_key("authorization"));
        assert!(!sent.contains_key("x-turnstile-wait-ms"));
        assert_eq!(sent["x-stainless-lang"], "python");
        assert_eq!(sent["anthropic-version"], "2023-06-01");
        assert_eq!(sent["content-type"], "application/json");
        assert_eq!(sent["accept-encoding"], "identity");
        assert!(sent["x-api-key"].is_sensitive());
        let (origin, path) = outbound.target(Endpoint::Messages).unwrap();
        assert_eq!(
            (origin.to_string(), path.to_string()),
            ("http://x/".to_owned(), "/v1/messages".to_owned())
        );
        let openai = Outbound::new(ApiFormat::Openai, "http://x/v1", Some("sk-1"));
        let mut sent = client.clone();
        request_headers(&mut sent, &openai);
        assert_eq!(sent["authorization"], "Bearer sk-1");
        assert!(!sent.contains_key("x-api-key") && !sent.contains_key("anthropic-version"));
        let (origin, path) = openai.target(Endpoint::ChatCompletions).unwrap();
        assert_eq!(
            (origin.to_string(), path.to_string()),
            ("http://x/".to_owned(), "/v1/chat/completions".to_owned())
        );
        let https = Outbound::new(ApiFormat::Openai, "https://a.example:8443/api/v1", None);
        let (origin, path) = https.target(Endpoint::Embeddings).unwrap();
        assert_eq!(
            (origin.to_string(), path.to_string()),
            (
                "https://a.example:8443/".to_owned(),
                "/api/v1/embeddings".to_owned()
            )
        );
        assert_eq!(sent["host"], "x");
        for (base, host) in [
            ("http://127.0.0.1:8080/v1", "127.0.0.1:8080"),
            ("http://a.example:80", "a.example"),
            ("https://a.example:443/v1", "a.example"),
            ("https://a.example:80", "a.example:80"),
            ("http://[::1]:9/v1", "[::1]:9"),
        ] {
            let mut sent = HeaderMap::new();
            request_headers(&mut sent, &Outbound::new(ApiFormat::Openai, base, None));
            assert_eq!(sent["host"], host, "{base}");
        }
        assert!(Outbound::new(ApiFormat::Openai, "http://bad host", None)
            .target(Endpoint::Embeddings)
            .is_none());

        let mut back = HeaderMap::new();
        back.insert("x-ratelimit-remaining-requests", "5".parse().unwrap());
        back.insert("x-request-id", "req_1".parse().unwrap());
        back.insert("content-length", "10".parse().unwrap());
        back.append("set-cookie", "a=1".parse().unwrap());
        back.append("set-cookie", "b=2".parse().unwrap());
        back.append("x-multi", "1".parse().unwrap());
        back.append("x-multi", "2".parse().unwrap());
        let mut shown = back.clone();
        response_headers(&mut shown);
        assert!(!shown.contains_key("x-ratelimit-remaining-requests"));
        assert!(!shown.contains_key("content-length"));
        assert_eq!(shown["x-request-id"], "req_1");
        assert!(!shown.contains_key("set-cookie"));
        assert_eq!(shown.get_all("x-multi").iter().count(), 2);

        let mut many = HeaderMap::new();
        for i in 0..20 {
            let name = HeaderName::try_from(format!("x-ratelimit-{i}")).unwrap();
            many.insert(name, "1".parse().unwrap());
        }
        many.insert("x-request-id", "req_2".parse().unwrap());
        response_headers(&mut many);
        assert_eq!(many.len(), 1, "{many:?}");
    }
}
