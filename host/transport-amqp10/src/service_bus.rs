//! The Azure Service Bus profile (`profile = "azure_service_bus"`).
//!
//! - Authentication: SASL ANONYMOUS, then a SAS token for the entity put on
//!   the `$cbs` node (claims-based security, fe2o3-amqp-cbs) before any
//!   link to the entity is attached. A task of the connection puts a new
//!   token when a fifth of the old one's lifetime is left; if that fails it
//!   tries again, and when the token runs out the broker ends the links,
//!   which reconnect with a fresh one.
//! - Lock renewal: `com.microsoft:renew-lock` on the entity's `$management`
//!   node, for the lock tokens of every message ferry holds.
//! - Sessions: the `com.microsoft:session-filter` on the receiving link's
//!   source.
//! - Dead-lettering: `rejected` with `com.microsoft:dead-letter`, the reason
//!   in `DeadLetterReason` and `DeadLetterErrorDescription`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::{Error as AmqpErrorBody, ErrorCondition, Fields};
use fe2o3_amqp::types::messaging::Message;
use fe2o3_amqp::types::primitives::{Array, OrderedMap, SimpleValue, Symbol, Timestamp as AmqpTime, Uuid, Value};
use fe2o3_amqp_cbs::client::CbsClient;
use fe2o3_amqp_cbs::token::CbsToken;
use fe2o3_amqp_management::client::MgmtClient;
use fe2o3_amqp_management::error::Error as MgmtError;
use fe2o3_amqp_management::{Request, Response};
use ferry_config::Secret;
use ferry_core::TransportError;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tracing::{debug, info, warn};

/// The token type Service Bus takes on `$cbs`.
pub const TOKEN_TYPE: &str = "servicebus.windows.net:sastoken";
/// The operation that renews message locks.
pub const RENEW_LOCK: &str = "com.microsoft:renew-lock";
/// The operation that renews a session's lock (a session's messages are
/// locked by it, not one by one).
pub const RENEW_SESSION_LOCK: &str = "com.microsoft:renew-session-lock";
/// The source filter that asks for one session.
pub const SESSION_FILTER: &str = "com.microsoft:session-filter";
/// The descriptor code of the session filter.
pub const SESSION_FILTER_CODE: u64 = 0x0000_0137_0000_000c;
/// The rejection condition that moves a message to the dead-letter queue.
pub const DEAD_LETTER: &str = "com.microsoft:dead-letter";
/// The delivery annotation carrying a message's lock token.
pub const LOCK_TOKEN: &str = "x-opt-lock-token";
/// Most lock tokens one renew-lock request carries.
pub const RENEW_BATCH: usize = 100;

/// The SAS credentials of a Service Bus link.
#[derive(Debug, Clone)]
pub struct Sas {
    pub key_name: String,
    pub key: Secret,
    pub lifetime: Duration,
}

/// The token's audience: the entity under the namespace, as
/// `sb://HOST/ENTITY`.
pub fn audience(url: &str, entity: &str) -> String {
    let host = url::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default();
    format!("sb://{host}/{}", entity.trim_start_matches('/'))
}

fn form_encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

impl Sas {
    /// A SAS token for `audience` valid until `expiry` (Unix seconds):
    /// `SharedAccessSignature sr=…&sig=…&se=…&skn=…`, the signature an
    /// HMAC-SHA256 under the key (its text as given) of the encoded
    /// audience, a newline and the expiry.
    pub fn token(&self, audience: &str, expiry: u64) -> String {
        let resource = form_encode(audience);
        let mut mac = Hmac::<Sha256>::new_from_slice(self.key.expose().as_bytes()).expect("HMAC takes any key length");
        mac.update(format!("{resource}\n{expiry}").as_bytes());
        let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        format!(
            "SharedAccessSignature sr={resource}&sig={}&se={expiry}&skn={}",
            form_encode(&signature),
            form_encode(&self.key_name)
        )
    }
}

fn unix_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// Puts a token for `audience` on `$cbs`; the time it expires.
async fn put_token(cbs: &mut CbsClient, sas: &Sas, audience: &str) -> Result<Duration, MgmtError> {
    let expiry = unix_now() + sas.lifetime;
    let token = sas.token(audience, expiry.as_secs());
    let expires_at = AmqpTime::from_milliseconds(i64::try_from(expiry.as_millis()).unwrap_or(i64::MAX));
    cbs.put_token(audience.to_owned(), CbsToken::new(token, TOKEN_TYPE, Some(expires_at))).await?;
    Ok(expiry)
}

/// The task that keeps a connection's token fresh; stopped when dropped.
pub struct TokenRenewal(tokio::task::JoinHandle<()>);

impl Drop for TokenRenewal {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Attaches to `$cbs` on `session`, puts the first token for `audience`
/// and starts its renewal. Errors are transient: a namespace that refuses
/// the token is retried with the link's reconnect backoff, and says why.
pub async fn authorize(
    session: &mut SessionHandle<()>,
    claims: crate::connection::Claims<'_>,
    audience: &str,
) -> Result<TokenRenewal, TransportError> {
    let count = Counting { metrics: claims.metrics.clone(), part: claims.part.to_owned() };
    let mut cbs =
        CbsClient::attach(session).await.map_err(|e| TransportError::transient(format!("attach to $cbs: {e}")))?;
    let expiry = match put_token(&mut cbs, claims.sas, audience).await {
        Ok(expiry) => expiry,
        Err(e) => {
            count.token("refused");
            return Err(TransportError::transient(format!("$cbs refused the SAS token for {audience}: {e}")));
        }
    };
    count.token("put");
    debug!(%audience, "SAS token put on $cbs");
    let (sas, audience) = (claims.sas.clone(), audience.to_owned());
    Ok(TokenRenewal(tokio::spawn(renew_tokens(cbs, sas, audience, expiry, count))))
}

/// Counts tokens put and refused for one receiver or sender.
struct Counting {
    metrics: ferry_core::metrics::Metrics,
    part: String,
}

impl Counting {
    fn token(&self, outcome: &str) {
        ferry_core::metrics::Metrics::inc(
            &self.metrics.counter_family(&crate::TOKENS),
            &[("name", &self.part), ("outcome", outcome)],
        );
    }
}

/// Puts a new token when a fifth of the current one's lifetime is left; a
/// failed put is tried again after a tenth of the lifetime (at least a
/// second) while the old token lasts.
async fn renew_tokens(mut cbs: CbsClient, sas: Sas, audience: String, mut expiry: Duration, count: Counting) {
    let margin = sas.lifetime / 5;
    loop {
        let due = expiry.saturating_sub(margin).saturating_sub(unix_now());
        tokio::time::sleep(due).await;
        match put_token(&mut cbs, &sas, &audience).await {
            Ok(next) => {
                expiry = next;
                count.token("put");
                info!(%audience, "SAS token renewed");
            }
            Err(e) => {
                count.token("refused");
                warn!(%audience, error = %e, "could not renew the SAS token; trying again");
                tokio::time::sleep((sas.lifetime / 10).max(Duration::from_secs(1))).await;
            }
        }
    }
}

/// A message's lock token: the `x-opt-lock-token` delivery annotation, or
/// else a 16-byte delivery tag read as Service Bus writes it (a .NET GUID,
/// little-endian fields).
pub fn lock_token<T>(message: &Message<T>, delivery_tag: &[u8]) -> Option<uuid::Uuid> {
    let annotated = message.delivery_annotations.as_ref().and_then(|a| {
        a.0.iter().find_map(|(k, v)| match (k, v) {
            (fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(s), Value::Uuid(u)) if s.0 == LOCK_TOKEN => {
                Some(uuid::Uuid::from_bytes(*u.as_ref()))
            }
            _ => None,
        })
    });
    annotated.or_else(|| <[u8; 16]>::try_from(delivery_tag).ok().map(uuid::Uuid::from_bytes_le))
}

/// What keeps a held message locked: its own lock token, or the lock of
/// the session it came in (its group-id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub token: Option<uuid::Uuid>,
    pub session: Option<String>,
}

impl Lock {
    /// The lock of `delivery`; its session's when the link reads a
    /// session (`in_session`).
    pub fn of<T>(delivery: &fe2o3_amqp::link::delivery::Delivery<T>, in_session: bool) -> Self {
        let message = delivery.message();
        let session = in_session.then(|| message.properties.as_ref().and_then(|p| p.group_id.clone())).flatten();
        Self { token: lock_token(message, delivery.delivery_tag().as_ref()), session }
    }
}

/// The rejection that dead-letters a message, with ferry's reason.
pub fn dead_letter(reason: &str, description: &str) -> AmqpErrorBody {
    let mut info = Fields::new();
    info.insert(Symbol::from("DeadLetterReason"), Value::String(reason.to_owned()));
    info.insert(Symbol::from("DeadLetterErrorDescription"), Value::String(description.to_owned()));
    AmqpErrorBody::new(ErrorCondition::Custom(Symbol::from(DEAD_LETTER)), Some(description.to_owned()), Some(info))
}

/// The source filter that asks for session `id`, or for the next session
/// the broker offers with `"*"`.
pub fn session_filter(session: &str) -> serde_amqp::described::Described<Value> {
    let value = if session == "*" { Value::Null } else { Value::String(session.to_owned()) };
    serde_amqp::described::Described {
        descriptor: serde_amqp::descriptor::Descriptor::Code(SESSION_FILTER_CODE),
        value,
    }
}

/// The application property that names the receiving link a management
/// request is about (Service Bus routes it to that link's entity).
fn associated_link(link_name: &str) -> fe2o3_amqp::types::messaging::ApplicationProperties {
    fe2o3_amqp::types::messaging::ApplicationProperties::builder()
        .insert("associated-link-name", SimpleValue::String(link_name.to_owned()))
        .build()
}

/// `com.microsoft:renew-lock`: the lock tokens, and the link whose
/// deliveries they are.
pub struct RenewLock {
    pub tokens: Vec<uuid::Uuid>,
    pub link_name: String,
}

/// The new lock expiry of each token, in the order asked.
pub struct RenewedLocks(pub Vec<i64>);

impl Request for RenewLock {
    const OPERATION: &'static str = RENEW_LOCK;
    type Response = RenewedLocks;
    type Body = Value;

    fn encode_application_properties(&mut self) -> Option<fe2o3_amqp::types::messaging::ApplicationProperties> {
        Some(associated_link(&self.link_name))
    }

    fn encode_body(self) -> Value {
        let tokens = self.tokens.iter().map(|t| Value::Uuid(Uuid::from(*t.as_bytes()))).collect::<Vec<_>>();
        let mut map = OrderedMap::new();
        map.insert(Value::String("lock-tokens".into()), Value::Array(Array::from(tokens)));
        Value::Map(map)
    }
}

impl Response for RenewedLocks {
    const STATUS_CODE: u16 = 200;
    type Body = Value;
    type Error = MgmtError;

    fn decode_message(message: Message<Value>) -> Result<Self, MgmtError> {
        let invalid = |what: &str| {
            MgmtError::from(fe2o3_amqp_management::error::InvalidType {
                expected: "a map with expirations".into(),
                actual: what.to_owned(),
            })
        };
        let Value::Map(map) = message.body else { return Err(invalid("another body")) };
        let Some(Value::Array(expirations)) = map.get(&Value::String("expirations".into())) else {
            return Err(invalid("no expirations"));
        };
        let times = expirations
            .iter()
            .map(|v| match v {
                Value::Timestamp(t) => Ok(t.milliseconds()),
                other => Err(invalid(&format!("{other:?}"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RenewedLocks(times))
    }
}

/// `com.microsoft:renew-session-lock`: the session whose lock is renewed.
pub struct RenewSessionLock {
    pub session: String,
    pub link_name: String,
}

/// The session lock's new expiry.
pub struct RenewedSession;

impl Request for RenewSessionLock {
    const OPERATION: &'static str = RENEW_SESSION_LOCK;
    type Response = RenewedSession;
    type Body = Value;

    fn encode_application_properties(&mut self) -> Option<fe2o3_amqp::types::messaging::ApplicationProperties> {
        Some(associated_link(&self.link_name))
    }

    fn encode_body(self) -> Value {
        let mut map = OrderedMap::new();
        map.insert(Value::String("session-id".into()), Value::String(self.session));
        Value::Map(map)
    }
}

impl Response for RenewedSession {
    const STATUS_CODE: u16 = 200;
    type Body = Value;
    type Error = MgmtError;

    fn decode_message(_: Message<Value>) -> Result<Self, MgmtError> {
        Ok(RenewedSession)
    }
}

/// Renews the locks of held messages over the entity's `$management`
/// node.
pub struct LockRenewer {
    client: MgmtClient,
    link_name: String,
}

impl LockRenewer {
    /// Attaches to `ENTITY/$management` on `session` (the connection's
    /// token covers it).
    pub async fn attach(
        session: &mut SessionHandle<()>,
        entity: &str,
        link_name: &str,
    ) -> Result<Self, TransportError> {
        let node = format!("{}/$management", entity.trim_start_matches('/'));
        let client = MgmtClient::builder()
            .management_node_address(node.clone())
            .client_node_addr(format!("{link_name}-management"))
            .attach(session)
            .await
            .map_err(|e| TransportError::transient(format!("attach to {node}: {e}")))?;
        Ok(Self { client, link_name: link_name.to_owned() })
    }

    /// Renews `locks`: each session's lock once, and the lock tokens of
    /// messages outside a session, [`RENEW_BATCH`] per request.
    pub async fn renew(&mut self, locks: &[Lock]) -> Result<(), String> {
        let mut sessions: Vec<&str> = locks.iter().filter_map(|l| l.session.as_deref()).collect();
        sessions.sort_unstable();
        sessions.dedup();
        for session in sessions {
            let request = RenewSessionLock { session: session.to_owned(), link_name: self.link_name.clone() };
            let _: RenewedSession = self.client.call(request).await.map_err(|e| format!("session {session}: {e}"))?;
        }
        let tokens: Vec<uuid::Uuid> = locks.iter().filter(|l| l.session.is_none()).filter_map(|l| l.token).collect();
        for chunk in tokens.chunks(RENEW_BATCH) {
            let request = RenewLock { tokens: chunk.to_vec(), link_name: self.link_name.clone() };
            let renewed: RenewedLocks = self.client.call(request).await.map_err(|e| e.to_string())?;
            if renewed.0.len() != chunk.len() {
                return Err(format!("{} expirations for {} lock tokens", renewed.0.len(), chunk.len()));
            }
        }
        Ok(())
    }

    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_signs_the_encoded_audience_and_expiry() {
        let sas = Sas { key_name: "Root Manage".into(), key: Secret::new("a2V5"), lifetime: Duration::from_secs(60) };
        let token = sas.token("sb://ns.example/orders", 1_700_000_000);
        let resource = "sb%3A%2F%2Fns.example%2Forders";
        let mut mac = Hmac::<Sha256>::new_from_slice(b"a2V5").expect("key");
        mac.update(format!("{resource}\n1700000000").as_bytes());
        let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        assert_eq!(
            token,
            format!("SharedAccessSignature sr={resource}&sig={}&se=1700000000&skn=Root+Manage", form_encode(&sig))
        );
        assert_eq!(audience("amqps://ns.example:5671", "/orders"), "sb://ns.example/orders");
    }

    #[test]
    fn a_lock_token_comes_from_the_annotation_or_the_delivery_tag() {
        let tag: Vec<u8> = (1..=16).collect();
        let message = Message::builder().value(Value::Null).build();
        let from_tag = lock_token(&message, &tag).expect("a 16-byte tag");
        assert_eq!(from_tag.to_string(), "04030201-0605-0807-090a-0b0c0d0e0f10", "a .NET GUID's byte order");
        assert_eq!(lock_token(&message, &[1, 2, 3]), None);
        let id = uuid::Uuid::new_v4();
        let mut annotations = fe2o3_amqp::types::messaging::DeliveryAnnotations::builder()
            .insert(Symbol::from(LOCK_TOKEN), Value::Uuid(Uuid::from(*id.as_bytes())))
            .build();
        let mut message = message;
        message.delivery_annotations = Some(std::mem::take(&mut annotations));
        assert_eq!(lock_token(&message, &tag), Some(id));
    }
}
