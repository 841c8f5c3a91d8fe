//! The listen address as a person writes it (`--listen`, `listen` in the configuration file):
//! `HOST:PORT` with an IP address (`127.0.0.1:8686`, `0.0.0.0:8686`, `[::1]:8686`), a host
//! name that resolves (`localhost:8686`), or a port alone (`8686`, which means loopback,
//! `127.0.0.1`, the safe default: a port alone never exposes the service on every interface).
//!
//! Invariants: the answer is one socket address; a host name resolving to several addresses
//! takes the first IPv4 one (else the first), so `localhost` is `127.0.0.1` where it has one;
//! anything else is a [`ListenError`] whose message says what is accepted.

use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};

/// A listen address that is none of the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "listen address {given:?} is not HOST:PORT or a port ({why}); e.g. 127.0.0.1:8686, \
     0.0.0.0:8686, localhost:8686 or 8686 (loopback)"
)]
pub struct ListenError {
    given: String,
    why: &'static str,
}

/// Parses a listen address (see the module docs).
pub fn parse_listen(text: &str) -> Result<SocketAddr, ListenError> {
    let text = text.trim();
    let error = |why| ListenError {
        given: text.to_owned(),
        why,
    };
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let port = text
            .parse::<u16>()
            .map_err(|_| error("a port is at most 65535"))?;
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(error("no port"));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(error("the port must be a number up to 65535 after a host"));
    }
    let addresses: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|_| error("the host name does not resolve"))?
        .collect();
    addresses
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addresses.first())
        .copied()
        .ok_or_else(|| error("the host name does not resolve"))
}

/// `listen` in the configuration file: the same forms.
pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<SocketAddr, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(deserializer)?;
    parse_listen(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_accepted_form_gives_one_address() {
        let cases = [
            ("127.0.0.1:8686", "127.0.0.1:8686"),
            ("0.0.0.0:8686", "0.0.0.0:8686"),
            ("[::1]:8686", "[::1]:8686"),
            ("8686", "127.0.0.1:8686"),
            (" 8686 ", "127.0.0.1:8686"),
            ("localhost:8686", "127.0.0.1:8686"),
        ];
        for (given, expected) in cases {
            assert_eq!(
                parse_listen(given).map(|a| a.to_string()),
                Ok(expected.to_owned()),
                "{given}"
            );
        }
    }

    #[test]
    fn the_configuration_file_takes_the_same_forms() {
        let config: crate::Config = toml::from_str("listen = \"8686\"").unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8686");
        let error = toml::from_str::<crate::Config>("listen = \"localhost\"").unwrap_err();
        assert!(error.to_string().contains("e.g. 127.0.0.1:8686"), "{error}");
    }

    #[test]
    fn anything_else_is_refused_with_what_is_accepted() {
        for given in [
            "",
            "localhost",
            "99999",
            "host:port",
            ":8686",
            "no-such-host.invalid:1",
        ] {
            let error = parse_listen(given).unwrap_err();
            let text = error.to_string();
            assert!(text.contains("e.g. 127.0.0.1:8686"), "{given}: {text}");
        }
    }
}
