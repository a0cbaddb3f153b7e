//! [`RedisStreams`], this crate's entry in the daemon's transport table.

use std::sync::Arc;

use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::fidelity::{CONTENT_TYPE, EXTRA, Find, ID, Probe, SUBJECT, TEXT_VALUE, extras, feature, table, text};
use ferry_core::ports::{OutboundMessage, Receiver, Sender};
use ferry_core::transport::{KeyProblem, Parts, TypedTransport};
use ferry_core::wire::toml_value::Value;
use ferry_core::wire::{Admitted, View};
use ferry_envelope::Timestamp;

use crate::config::{RedisStreamsReceiverConfig, RedisStreamsSenderConfig};
use crate::link::probe;
use crate::{RedisReceiver, RedisSender, entry, fixture, ingress};

/// Redis Streams (`type = "redis_streams"`).
pub struct RedisStreams;

/// `XINFO STREAM key`'s length and groups, as a sentence.
async fn stream_facts(conn: &mut redis::aio::MultiplexedConnection, stream: &str) -> Result<String, TransportError> {
    let mut cmd = redis::cmd("XINFO");
    cmd.arg("STREAM").arg(stream);
    let info: redis::Value = cmd.query_async(conn).await.map_err(|e| {
        if e.to_string().contains("no such key") {
            TransportError::transient(format!("stream {stream:?} does not exist"))
        } else {
            TransportError::transient(format!("XINFO STREAM {stream:?}: {e}"))
        }
    })?;
    let pairs: Vec<(String, &redis::Value)> = match &info {
        redis::Value::Array(flat) => {
            flat.chunks_exact(2).filter_map(|p| entry::text(&p[0]).map(|k| (k, &p[1]))).collect()
        }
        redis::Value::Map(map) => map.iter().filter_map(|(k, v)| entry::text(k).map(|k| (k, v))).collect(),
        _ => Vec::new(),
    };
    let number = |name: &str| match pairs.iter().find(|(k, _)| k == name).map(|(_, v)| *v) {
        Some(redis::Value::Int(n)) => *n,
        _ => 0,
    };
    Ok(format!("stream {stream:?} holds {} entries in {} groups", number("length"), number("groups")))
}

#[async_trait]
impl TypedTransport for RedisStreams {
    type ReceiverConfig = RedisStreamsReceiverConfig;
    type SenderConfig = RedisStreamsSenderConfig;
    const KIND: &'static str = "redis_streams";

    fn check_receiver(&self, _: &str, config: &RedisStreamsReceiverConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn check_sender(&self, _: &str, config: &RedisStreamsSenderConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn receiver(
        &self,
        name: &str,
        config: &RedisStreamsReceiverConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Receiver>, String> {
        let mut config = config.clone();
        config.consumer.get_or_insert_with(|| parts.instance.to_owned());
        Ok(Arc::new(RedisReceiver::new(name, config, parts.metrics.clone())))
    }

    fn sender(
        &self,
        name: &str,
        config: &RedisStreamsSenderConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Sender>, String> {
        Ok(RedisSender::start(name, config.clone(), parts.metrics.clone()))
    }

    /// Reads the stream's length and groups without reading an entry (a
    /// read would make it pending).
    async fn probe_receiver(&self, _: &str, config: &RedisStreamsReceiverConfig) -> Result<String, TransportError> {
        let (mut conn, version) = probe(&config.url, config.tls.as_ref()).await?;
        let facts = match stream_facts(&mut conn, &config.stream).await {
            Ok(facts) => facts,
            Err(_) if !config.group_passive => {
                format!("stream {:?} does not exist yet; it is made with group {:?}", config.stream, config.group)
            }
            Err(e) => return Err(e),
        };
        Ok(format!("Redis {version}; {facts}"))
    }

    async fn probe_sender(&self, _: &str, config: &RedisStreamsSenderConfig) -> Result<String, TransportError> {
        let (mut conn, version) = probe(&config.url, config.tls.as_ref()).await?;
        match config.stream.as_deref().filter(|s| !s.contains('{')) {
            Some(stream) => {
                let mut cmd = redis::cmd("TYPE");
                cmd.arg(stream);
                let kind: String = cmd
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| TransportError::transient(format!("TYPE {stream:?}: {e}")))?;
                match kind.as_str() {
                    "stream" => Ok(format!("Redis {version}; {}", stream_facts(&mut conn, stream).await?)),
                    "none" => Ok(format!("Redis {version}; stream {stream:?} is made by the first message")),
                    other => Err(TransportError::permanent(format!(
                        "key {stream:?} holds a {other}, not a stream: every XADD would fail"
                    ))),
                }
            }
            None => Ok(format!("Redis {version}; the bindings' streams are checked as messages go")),
        }
    }

    fn fixture_receive(
        &self,
        config: &RedisStreamsReceiverConfig,
        input: Value,
        now: Timestamp,
    ) -> Result<Admitted, String> {
        fixture::receive(input, config, now)
    }

    fn fixture_send(
        &self,
        config: &RedisStreamsSenderConfig,
        msg: &OutboundMessage,
        _: Timestamp,
    ) -> Result<View, TransportError> {
        fixture::send(config, msg)
    }

    fn fidelity_probe(&self, config: &RedisStreamsReceiverConfig) -> Probe {
        let mut fields: Vec<(String, Value)> = vec![
            (config.id_field.clone(), text(ID)),
            (ingress::CONTENT_TYPE.into(), text(CONTENT_TYPE)),
            ("gobridge.subject".into(), text(SUBJECT)),
            ("probe-text".into(), text(TEXT_VALUE)),
        ];
        fields.extend(extras().into_iter().map(|(k, v)| (k, text(&v))));
        let input = table(&[("payload".into(), text("{}")), ("fields".into(), table(&fields))]);
        let features = vec![
            feature("identity (id field)", Find::Value(ID)),
            feature("subject (gobridge.subject field)", Find::Value(SUBJECT)),
            feature("content type", Find::Value(CONTENT_TYPE)),
            feature("header", Find::Name("probe-text")),
            feature("other headers (12)", Find::Extras),
        ];
        Probe { input, features, extras_in: EXTRA + 1 }
    }

    fn lossy_note(&self) -> &'static str {
        "a header named like the sender's payload, identity or content_type field cannot be sent"
    }

    fn outage_note(&self) -> &'static str {
        "no connection, a timeout, or a server that takes nothing now (LOADING, BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, READONLY, OOM, too many clients)"
    }
}
