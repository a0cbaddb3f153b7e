//! Seed inputs for each target, made with the encoders real peers use
//! (rumqttc, amq-protocol, serde_amqp) and by hand where a peer lies (a
//! short string that is not UTF-8). They start cargo-fuzz's corpora and
//! run in `cargo test` with the committed corpus.

use bytes::BytesMut;

/// Every reserved header, with a value a publisher made up.
const FORGED: &[(&str, &str)] = &[
    ("x-bridge.correlation-id", "forged"),
    ("x-bridge.correlation-data", "Zm9yZ2Vk"),
    ("x-bridge.content-type", "forged/type"),
    ("x-bridge.generated-id", "true"),
    ("x-bridge.route-id", "forged"),
    ("x-bridge.tenant-id", "forged"),
    ("x-bridge.forwarded-hop", "99"),
    ("x-bridge.dedup-id", "forged"),
];

/// A wire-format document with typed headers, forged reserved ones among
/// them.
fn document() -> String {
    let mut headers = serde_json::Map::new();
    for (k, v) in FORGED {
        headers.insert((*k).to_owned(), serde_json::Value::String((*v).to_owned()));
    }
    headers.insert("count".into(), serde_json::json!(3));
    headers.insert("ratio".into(), serde_json::json!(0.5));
    headers.insert("ok".into(), serde_json::json!(true));
    headers.insert("at".into(), serde_json::json!({"time_ms": 1_700_000_000_000i64}));
    headers.insert("raw".into(), serde_json::json!({"base64": "AP8Q"}));
    headers.insert("gobridge.subject".into(), serde_json::json!("order.created"));
    serde_json::json!({"headers": headers, "body": "hello"}).to_string()
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn mqtt() -> Vec<Vec<u8>> {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::{Publish, PublishProperties};
    let mut out = Vec::new();
    let mut user: Vec<(String, String)> = FORGED.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    user.push(("mqtt.message-id".into(), "m-1".into()));
    user.push(("gobridge.subject".into(), "reading.taken".into()));
    let variants = [
        PublishProperties {
            user_properties: user.clone(),
            correlation_data: Some(bytes::Bytes::from_static(&[0, 159, 255])),
            content_type: Some("application/json".into()),
            response_topic: Some("replies/1".into()),
            message_expiry_interval: Some(30),
            ..Default::default()
        },
        PublishProperties { correlation_data: Some(bytes::Bytes::from_static(b"corr-1")), ..Default::default() },
        PublishProperties::default(),
    ];
    for (i, props) in variants.into_iter().enumerate() {
        let payload = if i == 2 { document().into_bytes() } else { b"{\"c\":21.5}".to_vec() };
        let mut publish = Publish::new("sensors/kitchen", QoS::AtLeastOnce, payload, Some(props));
        publish.pkid = 7;
        let mut buf = BytesMut::new();
        if publish.write(&mut buf).is_ok() {
            out.push(buf.to_vec());
        }
    }
    out
}

fn amqp091() -> Vec<Vec<u8>> {
    use amq_protocol::frame::WriteContext;
    use lapin::BasicProperties;
    use lapin::types::{AMQPValue, FieldArray, FieldTable};
    let mut headers = FieldTable::default();
    for (k, v) in FORGED {
        headers.insert((*k).into(), AMQPValue::LongString((*v).into()));
    }
    headers.insert("n".into(), AMQPValue::LongLongInt(-4));
    headers.insert("flag".into(), AMQPValue::Boolean(true));
    headers.insert("at".into(), AMQPValue::Timestamp(7));
    let mut nested = FieldTable::default();
    nested.insert("inner".into(), AMQPValue::ShortString("deep".into()));
    headers.insert("x-death".into(), AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(nested)])));
    let full = BasicProperties::default()
        .with_message_id("m-1".into())
        .with_correlation_id("corr-1".into())
        .with_content_type("application/json".into())
        .with_reply_to("replies".into())
        .with_expiration("60000".into())
        .with_timestamp(1_700_000_000)
        .with_priority(3)
        .with_delivery_mode(2)
        .with_headers(headers);
    let mut out = Vec::new();
    for props in [full, BasicProperties::default()] {
        if let Ok(ctx) = amq_protocol::protocol::basic::gen_properties(&props)(WriteContext::from(Vec::new())) {
            let mut bytes = ctx.write;
            bytes.extend_from_slice(b"body after the properties");
            out.push(bytes);
        }
    }
    // A message_id that is not UTF-8, as a lying peer sends it: the
    // property flags (message_id only), then the short string.
    out.push([&[0x00, 0x80][..], &[3, b'a', 0xff, b'b']].concat());
    // A header name that is not UTF-8.
    let table = [&[2, b'k', 0xc3][..], b"S", &[0, 0, 0, 1, b'v']].concat();
    let mut bytes = vec![0x20, 0x00];
    bytes.extend_from_slice(&(table.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&table);
    out.push(bytes);
    out
}

fn amqp10() -> Vec<Vec<u8>> {
    use fe2o3_amqp::types::messaging::message::__private::Serializable;
    use fe2o3_amqp::types::messaging::{ApplicationProperties, Message, MessageId, Properties};
    use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol};
    let mut app = ApplicationProperties::builder();
    for (k, v) in FORGED {
        app = app.insert(*k, SimpleValue::String((*v).to_owned()));
    }
    app = app.insert("count", SimpleValue::Long(3));
    let properties = Properties {
        message_id: Some(MessageId::String("m-10".into())),
        correlation_id: Some(MessageId::Binary(Binary::from(vec![0u8, 159]))),
        content_type: Some(Symbol::from("application/json")),
        subject: Some("order.created".into()),
        ..Default::default()
    };
    let mut out = Vec::new();
    let full =
        Message::builder().properties(properties).application_properties(app.build()).data(b"{}".to_vec()).build();
    if let Ok(bytes) = serde_amqp::to_vec(&Serializable(full)) {
        out.push(bytes);
    }
    let wire = Message::builder().data(document().into_bytes()).build();
    if let Ok(bytes) = serde_amqp::to_vec(&Serializable(wire)) {
        out.push(bytes);
    }
    let value = Message::builder().value("text".to_owned()).build();
    if let Ok(bytes) = serde_amqp::to_vec(&Serializable(value)) {
        out.push(bytes);
    }
    out
}

fn http_request(head: &str, body: &str) -> Vec<u8> {
    format!("{head}\r\ncontent-length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

fn sqs_requests() -> Vec<Vec<u8>> {
    let send = serde_json::json!({
        "QueueUrl": "http://127.0.0.1:9324/000000000000/orders",
        "MessageBody": "m",
        "MessageAttributes": {"color": {"DataType": "String", "StringValue": "red"},
                              "raw": {"DataType": "Binary", "BinaryValue": "AP8Q"}},
        "MessageSystemAttributes": {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-2"}}
    });
    let batch = serde_json::json!({
        "QueueUrl": "http://127.0.0.1:9324/000000000000/orders",
        "Entries": [{"Id": "a", "MessageBody": "x", "MessageAttributes": [1, 2]}]
    });
    vec![
        http_request(
            "POST / HTTP/1.1\r\nhost: 127.0.0.1:9324\r\nx-amz-target: AmazonSQS.SendMessage\r\ncontent-type: application/x-amz-json-1.0",
            &send.to_string(),
        ),
        http_request(
            "POST / HTTP/1.1\r\nhost: 127.0.0.1:9324\r\nx-amz-target: AmazonSQS.SendMessageBatch\r\ncontent-type: application/x-amz-json-1.0",
            &batch.to_string(),
        ),
        http_request(
            "POST / HTTP/1.1\r\nhost: 127.0.0.1:9324\r\ncontent-type: application/x-www-form-urlencoded",
            "Action=SendMessage&QueueUrl=http%3A%2F%2Fh%2F0%2Forders&MessageBody=m&MessageAttribute.1.Name=c&MessageAttribute.1.Value.DataType=String&MessageAttribute.1.Value.StringValue=red",
        ),
        http_request("GET /?Action=ListQueues&QueueNamePrefix=o HTTP/1.1\r\nhost: h", ""),
    ]
}

fn sigv4_requests() -> Vec<Vec<u8>> {
    vec![
        http_request(
            "POST / HTTP/1.1\r\nhost: 127.0.0.1:9324\r\nx-amz-date: 20231114T221320Z\r\nx-amz-target: AmazonSQS.ListQueues\r\n\
             authorization: AWS4-HMAC-SHA256 Credential=AKIDFUZZ/20231114/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date;x-amz-target, Signature=0000000000000000000000000000000000000000000000000000000000000000",
            "{}",
        ),
        http_request(
            "GET /?Action=ListQueues&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDFUZZ%2F20231114%2Fus-east-1%2Fsqs%2Faws4_request&X-Amz-Date=20231114T221320Z&X-Amz-Expires=300&X-Amz-SignedHeaders=host&X-Amz-Signature=abcd HTTP/1.1\r\nhost: h",
            "",
        ),
    ]
}

fn webhooks() -> Vec<Vec<u8>> {
    let mut head = String::from("POST /in HTTP/1.1\r\nhost: h\r\ncontent-type: text/plain\r\nidempotency-key: k-1");
    for (k, v) in FORGED {
        head.push_str(&format!("\r\nx-ferry-{k}: {v}"));
    }
    head.push_str("\r\nx-ferry-gobridge.subject: order.created");
    vec![http_request(&head, "hello"), http_request("POST /in HTTP/1.1\r\nhost: h", &document())]
}

fn simplemq() -> Vec<Vec<u8>> {
    let mqbridge = serde_json::json!({
        "headers": {"rabbitmq.exchange": "orders", "rabbitmq.routing_key": "eu", "rabbitmq.message_id": "m-1",
                    "rabbitmq.header.x-bridge.tenant-id": "forged", "rabbitmq.header.gobridge.subject": "s"},
        "body": "hello"
    });
    vec![
        format!("m-1\n{}", base64(document().as_bytes())).into_bytes(),
        format!("m-2\n{}", base64(mqbridge.to_string().as_bytes())).into_bytes(),
        b"m-3\nnot base64 at all".to_vec(),
    ]
}

fn sqs_bodies() -> Vec<Vec<u8>> {
    let mut attributes = serde_json::Map::new();
    for (k, v) in FORGED {
        attributes.insert((*k).to_owned(), serde_json::json!({"Type": "String", "Value": v}));
    }
    attributes.insert("raw".into(), serde_json::json!({"Type": "Binary", "Value": "AP8Q"}));
    let notification = serde_json::json!({
        "Type": "Notification", "MessageId": "n-1", "TopicArn": "arn:aws:sns:us-east-1:0:t",
        "Subject": "s", "Message": document(), "MessageAttributes": attributes
    });
    vec![notification.to_string().into_bytes(), document().into_bytes(), b"plain".to_vec()]
}

fn configs() -> Vec<Vec<u8>> {
    [
        include_str!("../../../examples/ferry.toml"),
        include_str!("../../../examples/mqtt-to-sqs.toml"),
        include_str!("../../../examples/amqp091-to-sqs-fanout.toml"),
        include_str!("../../../examples/simplemq-to-rabbitmq-by-content.toml"),
        include_str!("../../../examples/sqs-endpoint.toml"),
    ]
    .iter()
    .map(|t| t.as_bytes().to_vec())
    .collect()
}

/// The seed inputs of target `name` (none for an unknown name).
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "mqtt_publish" => mqtt(),
        "amqp091_properties" => amqp091(),
        "amqp10_message" => amqp10(),
        "json_wire" => vec![document().into_bytes(), br#"{"body": "AP8Q", "body_encoding": "base64"}"#.to_vec()],
        "sqs_request" => sqs_requests(),
        "sigv4" => sigv4_requests(),
        "http_webhook" => webhooks(),
        "simplemq_content" => simplemq(),
        "sqs_body" => sqs_bodies(),
        "config" => configs(),
        _ => Vec::new(),
    }
}
