//! The AMQP 1.0 transport against RabbitMQ's `rabbitmq_amqp1_0` plugin on
//! 127.0.0.1:5672. Each test uses queues of its own.

use std::time::Duration;

use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, Body, Message, MessageId, Properties};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp as AmqpTime, Value};
use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_envelope::{Envelope, HeaderValue, Timestamp};
use ferry_tests::rabbit::{Amqp10Client, Rabbit, URL10};
use ferry_tests::receiver::RunningReceiver;
use ferry_transport_amqp10::{Amqp10Profile, Amqp10ReceiverConfig, Amqp10RetryOutcome, Amqp10SenderConfig};
use ferry_transport_amqp10::{Amqp10Receiver, Amqp10Sender};

const WAIT: Duration = Duration::from_secs(10);

fn receiver_config(queue: &str) -> Amqp10ReceiverConfig {
    Amqp10ReceiverConfig {
        url: URL10.to_owned(),
        tls: None,
        address: format!("/amq/queue/{queue}"),
        credit: 10,
        retry_outcome: Amqp10RetryOutcome::Modified,
        max_message_bytes: 1024,
        reconnect_initial_ms: 100,
        reconnect_max_ms: 1000,
        profile: Amqp10Profile::Generic,
        sas_key_name: None,
        sas_key: None,
        token_lifetime_s: 3600,
        lock_renew_ms: 10_000,
        session: None,
    }
}

fn start_receiver(queue: &str) -> (RunningReceiver, Metrics) {
    let metrics = Metrics::new();
    (RunningReceiver::start(Amqp10Receiver::new("in", receiver_config(queue), metrics.clone()), 16), metrics)
}

async fn queue() -> (Rabbit, String) {
    let rabbit = Rabbit::connect().await;
    let q = ferry_tests::unique("amqp10");
    rabbit.declare_queue(&q).await;
    (rabbit, q)
}

#[tokio::test]
async fn receiver_maps_properties_and_accepts_on_ack() {
    let (rabbit, q) = queue().await;
    let mut client = Amqp10Client::connect(URL10).await;
    let mut app = ApplicationProperties::builder()
        .insert("region", SimpleValue::String("eu".into()))
        .insert("count", SimpleValue::Long(3))
        .insert("x-bridge.tenant-id", SimpleValue::String("spoofed".into()))
        .build();
    app.0.insert("raw".into(), SimpleValue::Binary(Binary::from(vec![0xca, 0xfe])));
    let message = Message::builder()
        .properties(Properties {
            message_id: Some(MessageId::String("order-1".into())),
            user_id: None,
            to: None,
            subject: Some("order.created".into()),
            reply_to: Some("replies".into()),
            correlation_id: Some(MessageId::String("corr-1".into())),
            content_type: Some(Symbol::from("application/json")),
            content_encoding: None,
            absolute_expiry_time: Some(AmqpTime::from_milliseconds(Timestamp::now().as_millis() + 600_000)),
            creation_time: Some(AmqpTime::from_milliseconds(1_700_000_000_000)),
            group_id: Some("g".into()),
            group_sequence: Some(4),
            reply_to_group_id: None,
        })
        .application_properties(app)
        .data(b"{\"n\":1}".to_vec())
        .build();
    client.send(&format!("/amq/queue/{q}"), message).await;

    let (mut running, _) = start_receiver(&q);
    let d = running.expect(WAIT).await;
    let e = &d.envelope;
    assert_eq!(e.id, "order-1");
    assert_eq!(e.subject.as_deref(), Some("order.created"));
    assert_eq!(e.payload().as_ref(), b"{\"n\":1}");
    assert_eq!(e.text_header("amqp10.message-id"), Some("order-1"));
    assert_eq!(e.text_header("amqp10.correlation-id"), Some("corr-1"));
    assert_eq!(e.text_header("amqp10.reply-to"), Some("replies"));
    assert_eq!(e.text_header("amqp10.content-type"), Some("application/json"));
    assert_eq!(e.text_header("amqp10.group-id"), Some("g"));
    assert_eq!(e.headers.get("amqp10.group-sequence"), Some(&HeaderValue::Integer(4)));
    assert_eq!(e.created_at, Timestamp(1_700_000_000_000));
    assert!(e.expires_at.is_some());
    assert_eq!(e.text_header("region"), Some("eu"));
    assert_eq!(e.headers.get("count"), Some(&HeaderValue::Integer(3)));
    assert_eq!(e.text_header("raw"), Some("cafe"));
    // Handed to the route, whose header rules decide.
    assert_eq!(e.text_header("x-bridge.tenant-id"), Some("spoofed"));
    assert_eq!(d.handle.redelivery_count(), Some(0));
    d.handle.ack().await.expect("accepted");
    running.stop().await;
    assert_eq!(rabbit.depth(&q).await, 0, "accepted message left the queue");
    client.close().await;
    rabbit.delete_queue(&q).await;
}

#[tokio::test]
async fn a_released_delivery_comes_back_counted_and_unreadable_bodies_are_rejected() {
    let (rabbit, q) = queue().await;
    let mut client = Amqp10Client::connect(URL10).await;
    let poison: Message<AmqpValue<Value>> = Message::builder().value(Value::Long(5)).build();
    client.send(&format!("/amq/queue/{q}"), poison).await;
    let good = Message::builder()
        .properties(Properties::builder().message_id(MessageId::String("m-2".into())).build())
        .value(Value::String("text body".into()))
        .build();
    client.send(&format!("/amq/queue/{q}"), good).await;

    let (mut running, metrics) = start_receiver(&q);
    let d = running.expect(WAIT).await;
    assert_eq!(d.envelope.payload().as_ref(), b"text body", "the poison message never reaches the route");
    assert_eq!(
        Metrics::count(
            &metrics.ingress_rejected,
            &[("kind", "amqp10"), ("receiver", "in"), ("reason", "unsupported_body")]
        ),
        1
    );
    d.handle.release(Duration::from_millis(50), "test").await.expect("released");
    let again = running.expect(WAIT).await;
    assert_eq!(again.envelope.id, "m-2");
    assert!(again.handle.redelivery_count() >= Some(1), "the retry is counted");
    again.handle.ack().await.expect("accepted");
    running.stop().await;
    assert_eq!(rabbit.depth(&q).await, 0);
    client.close().await;
    rabbit.delete_queue(&q).await;
}

#[tokio::test]
async fn sender_maps_the_envelope_and_refuses_a_different_address() {
    let (rabbit, q) = queue().await;
    let address = format!("/amq/queue/{q}");
    let sender = Amqp10Sender::start(
        "out",
        Amqp10SenderConfig {
            url: URL10.to_owned(),
            tls: None,
            address: address.clone(),
            durable: true,
            send_timeout_ms: 5000,
            reconnect_initial_ms: 100,
            reconnect_max_ms: 1000,
            profile: Amqp10Profile::Generic,
            sas_key_name: None,
            sas_key: None,
            token_lifetime_s: 3600,
        },
        Metrics::new(),
    );
    let mut e = Envelope::new("env-7", &b"hello"[..]);
    e.subject = Some("greeting".into());
    e.set_header("amqp10.reply-to", "back");
    e.set_header("amqp10.content-type", "text/plain");
    e.set_header("lang", "en");
    e.set_header("n", HeaderValue::Integer(9));
    e.set_header("x-bridge.route-id", "private");
    let msg = OutboundMessage::new(e.clone(), String::new());
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match sender.send(msg.clone()).await {
            Ok(()) => break,
            Err(err) if err.is_transient() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("send failed: {err}"),
        }
    }
    let wrong = sender.send(OutboundMessage::new(e, "/amq/queue/other")).await;
    assert!(!wrong.expect_err("address mismatch").is_transient());

    let mut client = Amqp10Client::connect(URL10).await;
    let got = client.receive(&address, 1, WAIT).await;
    let m = got.first().expect("message arrived");
    let p = m.properties.as_ref().expect("properties");
    assert_eq!(p.message_id, Some(MessageId::String("env-7".into())));
    assert_eq!(p.subject.as_deref(), Some("greeting"));
    assert_eq!(p.reply_to.as_deref(), Some("back"));
    assert_eq!(p.content_type.as_ref().map(|s| s.0.as_str()), Some("text/plain"));
    assert!(m.header.as_ref().is_some_and(|h| h.durable));
    let app = &m.application_properties.as_ref().expect("application properties").0;
    assert_eq!(app.get("lang"), Some(&SimpleValue::String("en".into())));
    assert_eq!(app.get("n"), Some(&SimpleValue::Long(9)));
    assert!(app.get("x-bridge.route-id").is_none());
    assert!(matches!(&m.body, Body::Data(d) if d.iter().next().is_some_and(|s| s.0.as_slice() == b"hello")));
    sender.close().await;
    client.close().await;
    rabbit.delete_queue(&q).await;
}
