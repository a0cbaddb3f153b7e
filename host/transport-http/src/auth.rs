//! Bearer tokens and HMAC body signatures (`X-Ferry-Signature:
//! sha256=<hex>`), compared in constant time.

use hmac::{Hmac, Mac};
use hyper::header::{AUTHORIZATION, HeaderMap};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The signature header.
pub const SIGNATURE: &str = "x-ferry-signature";

/// `sha256=<lowercase hex of HMAC-SHA256(secret, body)>`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256>>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    format!("sha256={}", hex::encode(digest))
}

/// Whether `Authorization: Bearer <token>` is there and right.
pub fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers.get(AUTHORIZATION).map(|v| v.as_bytes()) else { return false };
    let Some(given) = given.strip_prefix(b"Bearer ") else { return false };
    given.ct_eq(token.as_bytes()).into()
}

/// Whether the signature header is there and signs `body` with `secret`.
pub fn signature_matches(headers: &HeaderMap, secret: &str, body: &[u8]) -> bool {
    let Some(given) = headers.get(SIGNATURE).map(|v| v.as_bytes()) else { return false };
    let Some(hex) = given.strip_prefix(b"sha256=") else { return false };
    let Some(given) = unhex(hex) else { return false };
    let mut mac = <Hmac<Sha256>>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(body);
    mac.verify_slice(&given).is_ok()
}

fn unhex(hex: &[u8]) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    hex.chunks(2).map(|p| Some((digit(p[0])? << 4) | digit(p[1])?)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn signatures_verify_and_refuse_tampering() {
        let sig = sign("s3cret", b"body");
        assert!(sig.starts_with("sha256=") && sig.len() == 7 + 64);
        let mut h = HeaderMap::new();
        h.insert(SIGNATURE, HeaderValue::from_str(&sig).expect("header"));
        assert!(signature_matches(&h, "s3cret", b"body"));
        assert!(!signature_matches(&h, "s3cret", b"bodY"));
        assert!(!signature_matches(&h, "other", b"body"));
        h.insert(SIGNATURE, HeaderValue::from_static("sha256=zz"));
        assert!(!signature_matches(&h, "s3cret", b"body"));
        assert!(!signature_matches(&HeaderMap::new(), "s3cret", b"body"));
    }

    #[test]
    fn bearer_tokens_must_match_exactly() {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer tok"));
        assert!(bearer_matches(&h, "tok"));
        assert!(!bearer_matches(&h, "to"));
        assert!(!bearer_matches(&h, "tok2"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic tok"));
        assert!(!bearer_matches(&h, "tok"));
    }
}
