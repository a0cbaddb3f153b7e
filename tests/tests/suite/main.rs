//! The black-box suite: the real `ferry` binary against real brokers, one
//! module per area. One test binary, so the heavy clients (aws-sdk-sqs,
//! lapin, fe2o3-amqp, rumqttc, tokio-postgres) are compiled and linked once
//! rather than once per area. Run one area with
//! `cargo test -p ferry-tests --test suite AREA::`.

mod admin;
mod admin_api;
mod amqp;
mod amqp_restart;
mod book;
mod chaos;
mod cli;
mod console;
mod daemon;
mod dashboard;
mod dlq;
mod examples;
mod explain;
mod ferry_test;
mod hostile;
mod hot_reload;
mod http;
mod image;
mod kafka;
mod kubernetes;
mod languages;
mod mqbridge;
mod nats;
mod otlp;
mod outage;
mod outbox;
mod plugins_cli;
mod power_cut;
mod processors;
mod redis;
mod reload;
mod route_rules;
mod scaffold;
mod scale_out;
mod service_bus;
mod shadow;
mod simplemq;
mod sqs;
mod sqs_conformance;
mod sqs_endpoint;
mod sse;
mod stall;
mod tap;
mod tls;
mod trace;
mod transport_components;
mod troubleshooting;
