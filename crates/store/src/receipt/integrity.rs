//! Optional receipt integrity: an HMAC-SHA256 chain over the revisions of one receipt.
//!
//! Revision *n*'s MAC is `HMAC(key, mac(n−1) ‖ "\n" ‖ canonicalJson(revision n))`, with an empty
//! `mac(0)`, hex encoded. Chaining means a row cannot be replaced, removed from the middle or
//! moved to another receipt without breaking every later MAC; re-ordering breaks the contiguous
//! revision numbers, which are checked with or without a key.
//!
//! [`verify_chain`] runs on every read: rows must be revisions 1..=n, each decoding to a receipt
//! of the expected key whose `revision` equals its row, and — with a key — each MAC must verify
//! (constant-time comparison). A failure is an error; the store never returns a receipt from a
//! chain it could not verify. Without a key, MACs are neither written nor checked.
//! O(revisions) per read.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::document::{Receipt, ReceiptKey};
use super::error::ReceiptError;

type HmacSha256 = Hmac<Sha256>;

/// The host's secret key for receipt MACs. Its bytes are never printed.
#[derive(Clone)]
pub struct IntegrityKey(Vec<u8>);

impl IntegrityKey {
    /// A key of these bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        IntegrityKey(bytes.into())
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
        match HmacSha256::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => unreachable_hmac(),
        }
    }

    /// The MAC of one revision's canonical JSON, chained to the previous MAC.
    pub fn sign(&self, previous_mac: Option<&str>, canonical: &str) -> String {
        let mut mac = self.mac();
        mac.update(previous_mac.unwrap_or("").as_bytes());
        mac.update(b"\n");
        mac.update(canonical.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Whether `mac_hex` is the MAC of this revision (constant-time).
    pub fn verify(&self, previous_mac: Option<&str>, canonical: &str, mac_hex: &str) -> bool {
        let Ok(expected) = hex::decode(mac_hex) else {
            return false;
        };
        let mut mac = self.mac();
        mac.update(previous_mac.unwrap_or("").as_bytes());
        mac.update(b"\n");
        mac.update(canonical.as_bytes());
        mac.verify_slice(&expected).is_ok()
    }
}

#[cold]
fn unreachable_hmac() -> HmacSha256 {
    // Hmac<Sha256> has no key-length restriction; this branch cannot be reached. Fall back to
    // an empty-key MAC rather than panic (the verification would then fail closed).
    <HmacSha256 as hmac::digest::KeyInit>::new(&Default::default())
}

impl std::fmt::Debug for IntegrityKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IntegrityKey(<redacted>)")
    }
}

/// One stored revision: its canonical JSON and its MAC (when signed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredRevision {
    pub revision: u64,
    pub document: String,
    pub mac: Option<String>,
}

/// Encodes `receipt` for storage, signing it after `previous` when a key is given.
pub(crate) fn encode(
    key: Option<&IntegrityKey>,
    previous: Option<&StoredRevision>,
    receipt: &Receipt,
) -> Result<StoredRevision, ReceiptError> {
    let document = turnstile_admission::digest::canonical_json(receipt)?;
    let mac = key.map(|k| k.sign(previous.and_then(|p| p.mac.as_deref()), &document));
    Ok(StoredRevision {
        revision: receipt.revision,
        document,
        mac,
    })
}

/// Verifies one revision against its predecessor and decodes it.
pub(crate) fn verify_link(
    key: Option<&IntegrityKey>,
    expected_key: &ReceiptKey,
    previous: Option<&StoredRevision>,
    row: &StoredRevision,
) -> Result<Receipt, ReceiptError> {
    let expected_revision = previous.map_or(1, |p| p.revision.saturating_add(1));
    if row.revision != expected_revision {
        return Err(ReceiptError::Gap {
            expected: expected_revision,
            found: row.revision,
        });
    }
    if let Some(key) = key {
        let Some(mac) = row.mac.as_deref() else {
            return Err(ReceiptError::Unsigned {
                revision: row.revision,
            });
        };
        let previous_mac = match previous {
            Some(p) => Some(p.mac.as_deref().ok_or(ReceiptError::Unsigned {
                revision: p.revision,
            })?),
            None => None,
        };
        if !key.verify(previous_mac, &row.document, mac) {
            return Err(ReceiptError::Tampered {
                revision: row.revision,
            });
        }
    }
    let receipt: Receipt = serde_json::from_str(&row.document)?;
    if receipt.revision != row.revision {
        return Err(ReceiptError::Gap {
            expected: row.revision,
            found: receipt.revision,
        });
    }
    if receipt.project_id != expected_key.project_id
        || receipt.invocation_id != expected_key.invocation_id
    {
        return Err(ReceiptError::Tampered {
            revision: row.revision,
        });
    }
    Ok(receipt)
}

/// Verifies a whole chain (revisions 1..=n) and returns its latest receipt.
pub(crate) fn verify_chain(
    key: Option<&IntegrityKey>,
    expected_key: &ReceiptKey,
    rows: &[StoredRevision],
) -> Result<Option<Receipt>, ReceiptError> {
    let mut previous: Option<&StoredRevision> = None;
    let mut latest = None;
    for row in rows {
        latest = Some(verify_link(key, expected_key, previous, row)?);
        previous = Some(row);
    }
    Ok(latest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::state::ReceiptState;

    fn chain(key: &IntegrityKey) -> (ReceiptKey, Vec<StoredRevision>) {
        let rk = ReceiptKey::new("p", "i");
        let r1 = Receipt::acquired(&rk, "sha256:f", 1);
        let r2 = r1.successor(ReceiptState::Composed, 2);
        let s1 = encode(Some(key), None, &r1).unwrap();
        let s2 = encode(Some(key), Some(&s1), &r2).unwrap();
        (rk, vec![s1, s2])
    }

    #[test]
    fn a_signed_chain_verifies_and_a_tampered_one_does_not() {
        let key = IntegrityKey::new(b"host-key".to_vec());
        let (rk, rows) = chain(&key);
        let latest = verify_chain(Some(&key), &rk, &rows).unwrap().unwrap();
        assert_eq!(latest.state, ReceiptState::Composed);

        let mut tampered = rows.clone();
        tampered[0].document = tampered[0].document.replace("sha256:f", "sha256:g");
        assert!(matches!(
            verify_chain(Some(&key), &rk, &tampered),
            Err(ReceiptError::Tampered { revision: 1 })
        ));

        let gapped = vec![rows[1].clone()];
        assert!(matches!(
            verify_chain(Some(&key), &rk, &gapped),
            Err(ReceiptError::Gap { .. })
        ));

        let other = IntegrityKey::new(b"other".to_vec());
        assert!(verify_chain(Some(&other), &rk, &rows).is_err());
        assert!(format!("{key:?}").contains("redacted"));
    }
}
