//! [`Secret`]: a key as a program holds it before it becomes a [`Client`](crate::Client)'s
//! `Authorization` header (a command-line flag, an environment variable).
//!
//! Invariant: a `Secret` never prints: `Debug` writes `***` (so the `Debug` of a command's
//! arguments or settings never shows it), and it has no `Display`; the text is read only with
//! [`Secret::expose`], to hand it to the client.

use std::str::FromStr;

/// A key that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Holds `key`.
    pub fn new(key: impl Into<String>) -> Self {
        Secret(key.into())
    }

    /// The key's text, to hand to [`Client::new`](crate::Client::new); never to print.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the key is empty or only whitespace (e.g. an empty environment variable).
    pub fn is_blank(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Secret::new(text))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints() {
        let key: Secret = "tsk_secret".parse().unwrap();
        assert_eq!(format!("{key:?}"), "***");
        assert_eq!(format!("{:?}", Some(key.clone())), "Some(***)");
        assert_eq!(key.expose(), "tsk_secret");
        assert!(!key.is_blank() && Secret::new(" ").is_blank());
    }
}
