//! SigV4 verification (`auth = "verify"`): the request's signature is
//! computed again from the configured secret of its access key and
//! compared in constant time; the body is hashed here, not taken from the
//! client. Both forms SDKs use are read: the `Authorization` header, and
//! the `X-Amz-*` query parameters of a presigned request.
//!
//! A request more than 15 minutes from the server's clock is refused, so a
//! captured request cannot be replayed later.

use std::collections::BTreeMap;

use axum::http::request::Parts;
use hmac::{Hmac, Mac};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::SqsError;

/// How far a request's time may be from the server's.
pub const MAX_SKEW_SECS: i64 = 15 * 60;

/// RFC 3986 unreserved characters stay; everything else is encoded.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// Access key id → secret.
pub type Keys = BTreeMap<String, ferry_config::Secret>;

/// What one access key may do: these actions (all when empty) on these
/// queues and topics (`sqs.NAME`, `sns.NAME`, a trailing `*` matching any
/// rest; all when empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    pub actions: Vec<String>,
    pub resources: Vec<String>,
}

impl Grant {
    /// Whether the key may call `action` on `resource` (`sqs.NAME` or
    /// `sns.NAME`; `None` for an action that names neither).
    pub fn allows(&self, action: &str, resource: Option<&str>) -> bool {
        let action_ok = self.actions.is_empty() || self.actions.iter().any(|a| a == action);
        let resource_ok = self.resources.is_empty()
            || resource.is_none_or(|r| {
                self.resources.iter().any(|g| match g.strip_suffix('*') {
                    Some(prefix) => r.starts_with(prefix),
                    None => g == r,
                })
            });
        action_ok && resource_ok
    }
}

/// What a request says about its signature.
struct Claim {
    key_id: String,
    /// `date/region/service/aws4_request`.
    scope: String,
    amz_date: String,
    signed_headers: Vec<String>,
    signature: String,
    /// Presigned: the query parameters that carried the claim.
    presigned: bool,
}

fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

fn encode(s: &str) -> String {
    utf8_percent_encode(s, UNRESERVED).to_string()
}

/// The query's parameters, decoded (a `+` stays a `+`: SDKs encode spaces
/// as `%20`).
fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The region a request was signed for (the third part of its credential
/// scope, `KEY/DATE/REGION/sqs/aws4_request`), signed or presigned, whether
/// or not the endpoint verifies signatures; `None` when it was not signed
/// or names no region a queue key may carry.
pub fn signing_region(parts: &Parts) -> Option<String> {
    let claim = claim(parts).ok()?;
    let region = claim.scope.split('/').nth(1)?;
    crate::records::valid_region(region).then(|| region.to_owned())
}

fn claim(parts: &Parts) -> Result<Claim, SqsError> {
    if let Some(header) = parts.headers.get("authorization").and_then(|v| v.to_str().ok()) {
        let rest = header.strip_prefix("AWS4-HMAC-SHA256").ok_or_else(SqsError::missing_auth)?;
        let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
        for part in rest.split(',') {
            if let Some((k, v)) = part.trim().split_once('=') {
                fields.insert(k, v);
            }
        }
        let credential = fields.get("Credential").ok_or_else(SqsError::missing_auth)?;
        let (key_id, scope) = credential.split_once('/').ok_or_else(SqsError::missing_auth)?;
        let amz_date = parts
            .headers
            .get("x-amz-date")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(SqsError::missing_auth)?
            .to_owned();
        return Ok(Claim {
            key_id: key_id.to_owned(),
            scope: scope.to_owned(),
            amz_date,
            signed_headers: fields.get("SignedHeaders").unwrap_or(&"").split(';').map(str::to_owned).collect(),
            signature: fields.get("Signature").unwrap_or(&"").to_string(),
            presigned: false,
        });
    }
    let pairs = query_pairs(parts.uri.query().unwrap_or_default());
    let get = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    if get("X-Amz-Algorithm").as_deref() != Some("AWS4-HMAC-SHA256") {
        return Err(SqsError::missing_auth());
    }
    let credential = get("X-Amz-Credential").ok_or_else(SqsError::missing_auth)?;
    let (key_id, scope) = credential.split_once('/').ok_or_else(SqsError::missing_auth)?;
    Ok(Claim {
        key_id: key_id.to_owned(),
        scope: scope.to_owned(),
        amz_date: get("X-Amz-Date").ok_or_else(SqsError::missing_auth)?,
        signed_headers: get("X-Amz-SignedHeaders").unwrap_or_default().split(';').map(str::to_owned).collect(),
        signature: get("X-Amz-Signature").unwrap_or_default(),
        presigned: true,
    })
}

/// `20261201T230000Z` (SigV4's basic ISO 8601) as Unix seconds.
fn parse_amz_date(s: &str) -> Option<i64> {
    if s.len() != 16 || !s.is_ascii() || !s.ends_with('Z') || s.as_bytes()[8] != b'T' {
        return None;
    }
    let rfc3339 = format!("{}-{}-{}T{}:{}:{}Z", &s[0..4], &s[4..6], &s[6..8], &s[9..11], &s[11..13], &s[13..15]);
    ferry_core::wire::rfc3339_millis(&rfc3339).map(|ms| ms / 1000)
}

/// The canonical request SigV4 signs.
fn canonical_request(parts: &Parts, claim: &Claim, body: &[u8]) -> String {
    let path = parts.uri.path();
    let uri = if path.is_empty() {
        "/".to_owned()
    } else {
        path.split('/').map(|segment| encode(&decode(segment))).map(|s| encode(&s)).collect::<Vec<_>>().join("/")
    };
    let mut query: Vec<(String, String)> = query_pairs(parts.uri.query().unwrap_or_default())
        .into_iter()
        .filter(|(k, _)| !(claim.presigned && k == "X-Amz-Signature"))
        .map(|(k, v)| (encode(&k), encode(&v)))
        .collect();
    query.sort();
    let query = query.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
    let mut headers = String::new();
    for name in &claim.signed_headers {
        let values: Vec<String> = parts
            .headers
            .get_all(name.as_str())
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let payload = match parts.headers.get("x-amz-content-sha256").and_then(|v| v.to_str().ok()) {
        Some("UNSIGNED-PAYLOAD") if claim.presigned => "UNSIGNED-PAYLOAD".to_owned(),
        _ => hex(&Sha256::digest(body)),
    };
    format!("{}\n{uri}\n{query}\n{headers}\n{}\n{payload}", parts.method, claim.signed_headers.join(";"))
}

/// Checks the request's signature against `keys`; `now` in Unix seconds.
pub fn verify(parts: &Parts, body: &[u8], keys: &Keys, now: i64) -> Result<String, SqsError> {
    let claim = claim(parts)?;
    let Some(secret) = keys.get(&claim.key_id) else {
        return Err(SqsError::unknown_key());
    };
    let Some(at) = parse_amz_date(&claim.amz_date) else {
        return Err(SqsError::signature_mismatch());
    };
    if (now - at).abs() > MAX_SKEW_SECS {
        return Err(SqsError::expired(&claim.amz_date));
    }
    let mut scope = claim.scope.split('/');
    let (Some(date), Some(region), Some(service), Some("aws4_request"), None) =
        (scope.next(), scope.next(), scope.next(), scope.next(), scope.next())
    else {
        return Err(SqsError::signature_mismatch());
    };
    if !claim.amz_date.starts_with(date) || !claim.signed_headers.iter().any(|h| h == "host") {
        return Err(SqsError::signature_mismatch());
    }
    let canonical = canonical_request(parts, &claim, body);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{}\n{}",
        claim.amz_date,
        claim.scope,
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let key = [date, region, service, "aws4_request"]
        .iter()
        .fold(format!("AWS4{}", secret.expose()).into_bytes(), |key, part| hmac(&key, part.as_bytes()));
    let expected = hex(&hmac(&key, to_sign.as_bytes()));
    if bool::from(expected.as_bytes().ct_eq(claim.signature.as_bytes())) {
        Ok(claim.key_id)
    } else {
        Err(SqsError::signature_mismatch())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_limits_actions_and_resources() {
        let open = Grant::default();
        assert!(open.allows("DeleteQueue", Some("sqs.any")));
        let grant = Grant {
            actions: vec!["SendMessage".into(), "ListQueues".into(), "Publish".into()],
            resources: vec!["sqs.orders-*".into(), "sns.alerts".into()],
        };
        assert!(grant.allows("SendMessage", Some("sqs.orders-eu")));
        assert!(!grant.allows("SendMessage", Some("sqs.payroll")));
        assert!(!grant.allows("DeleteQueue", Some("sqs.orders-eu")));
        assert!(grant.allows("Publish", Some("sns.alerts")));
        assert!(!grant.allows("Publish", Some("sns.alerts-2")));
        assert!(grant.allows("ListQueues", None), "a list names no queue");
    }

    #[test]
    fn amz_dates_read_as_unix_seconds() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
        assert_eq!(parse_amz_date("20150830T123600Z"), Some(1_440_938_160));
        assert_eq!(parse_amz_date("2015-08-30"), None);
    }

    /// AWS's own example (General Reference, "Signature Version 4 test
    /// suite", get-vanilla): its signature must come out the same.
    #[test]
    fn the_aws_test_suite_vanilla_get_verifies() {
        let request = axum::http::Request::builder()
            .method("GET")
            .uri("/")
            .header("host", "example.amazonaws.com")
            .header("x-amz-date", "20150830T123600Z")
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
                 SignedHeaders=host;x-amz-date, \
                 Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
            )
            .body(())
            .expect("request");
        let (parts, ()) = request.into_parts();
        let keys: Keys = [("AKIDEXAMPLE".to_owned(), "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into())].into();
        let at = parse_amz_date("20150830T123600Z").expect("date");
        assert_eq!(verify(&parts, b"", &keys, at), Ok("AKIDEXAMPLE".to_owned()), "the signer is named");
        let wrong: Keys = [("AKIDEXAMPLE".to_owned(), "another secret".into())].into();
        assert_eq!(verify(&parts, b"", &wrong, at).expect_err("wrong secret").code(), "SignatureDoesNotMatch");
        let other: Keys = [("AKIDOTHER".to_owned(), "x".into())].into();
        assert_eq!(verify(&parts, b"", &other, at).expect_err("unknown key").code(), "InvalidClientTokenId");
        assert_eq!(
            verify(&parts, b"", &keys, at + MAX_SKEW_SECS + 1).expect_err("late").code(),
            "SignatureDoesNotMatch"
        );
        assert_eq!(verify(&parts, b"tampered", &keys, at).expect_err("body").code(), "SignatureDoesNotMatch");
    }
}
