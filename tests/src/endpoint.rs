//! ferry's SQS/SNS endpoint in the test's own process, on a bound port
//! over an embedded store in a temporary directory (or over a PostgreSQL
//! schema that several endpoints share), with AWS SDK clients pointed at
//! it: the harness of the endpoint crate's tests.

use std::sync::Arc;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use ferry_core::clock::Clock;
use ferry_core::metrics::Metrics;
use ferry_sqs_endpoint::{Engine, Identity, ServerOptions, Topics};
use ferry_store::{RedbStore, Store, StoreOptions};

pub struct Endpoint {
    pub url: String,
    pub client: aws_sdk_sqs::Client,
    pub sns: aws_sdk_sns::Client,
    pub engine: Arc<Engine>,
    pub topics: Arc<Topics>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    _tmp: Option<tempfile::TempDir>,
}

impl Endpoint {
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// An endpoint that checks SigV4 signatures against `keys`.
    pub async fn start_with(auth: Option<ferry_sqs_endpoint::auth::Keys>) -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let mut e = Self::open(&dir, auth).await;
        e._tmp = Some(tmp);
        e
    }

    /// An endpoint over the store in `dir` (which outlives it). A store
    /// just let go is released when its writer thread ends: wait for it.
    pub async fn start_in(dir: &std::path::Path) -> Self {
        Self::open(dir, None).await
    }

    async fn open(dir: &std::path::Path, auth: Option<ferry_sqs_endpoint::auth::Keys>) -> Self {
        let mut tries = 0;
        let store = loop {
            match RedbStore::open(dir, StoreOptions::default()) {
                Ok(store) => break store,
                Err(e) if tries < 100 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => panic!("the store does not open: {e}"),
            }
        };
        let identity = Identity { region: "us-east-1".into(), account: "000000000000".into() };
        let engine = Engine::open(store.clone(), identity, Clock::System).await.expect("queues load");
        Self::serve(engine, store, auth).await
    }

    /// An endpoint whose queues are in the PostgreSQL database at `url`
    /// (with `LISTEN`, as in the daemon); every endpoint started on the
    /// same `url` serves the same queues.
    pub async fn start_shared(url: &str) -> Self {
        let options = StoreOptions { listen: true, ..StoreOptions::default() };
        let store = ferry_store::postgres::PgStore::open(url, 8, options).await.expect("the shared store opens");
        let identity = Identity { region: "us-east-1".into(), account: "000000000000".into() };
        let engine = Engine::open_shared(store.shared_db(), identity, Clock::System);
        Self::serve(engine, store, None).await
    }

    async fn serve(engine: Arc<Engine>, store: Arc<dyn Store>, auth: Option<ferry_sqs_endpoint::auth::Keys>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let metrics = Metrics::new();
        let topics = Topics::open(engine.clone(), store, metrics.clone()).await.expect("topics load");
        let options = ServerOptions {
            advertised_url: None,
            metrics: metrics.clone(),
            auth: auth.clone(),
            grants: Default::default(),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = topics.clone();
        let task = tokio::spawn(async move {
            ferry_sqs_endpoint::serve(serving, listener, options, async move {
                let _ = stopped.await;
            })
            .await
            .expect("serves");
        });
        let client = client(&url, "test", "test");
        let sns = sns_client(&url, "test", "test");
        Self { url, client, sns, engine, topics, stop: Some(stop), task: Some(task), _tmp: None }
    }

    /// Stops the server and lets go of the store.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), task).await;
        }
    }

    /// Waits until `n` ReceiveMessage calls are under way: a long poll a
    /// test started has reached the engine, and a send now wakes it.
    pub async fn wait_for_receives(&self, n: usize) {
        let engine = self.engine.clone();
        crate::eventually(&format!("{n} receives under way"), move || engine.receives_in_progress() >= n).await;
    }

    pub async fn create(&self, name: &str, attributes: &[(&str, &str)]) -> String {
        let mut req = self.client.create_queue().queue_name(name);
        for (k, v) in attributes {
            req = req.attributes(aws_sdk_sqs::types::QueueAttributeName::from(*k), *v);
        }
        req.send().await.expect("queue created").queue_url().expect("url").to_owned()
    }

    /// Every attribute of a queue.
    pub async fn attributes(
        &self,
        url: &str,
    ) -> std::collections::HashMap<aws_sdk_sqs::types::QueueAttributeName, String> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
            .send()
            .await
            .expect("queue attributes");
        out.attributes().cloned().unwrap_or_default()
    }

    /// A POST in the query protocol: (status, body).
    pub async fn query(&self, path: &str, params: &[(&str, &str)]) -> (u16, String) {
        let body: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(params).finish();
        let response = reqwest::Client::new()
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .expect("request");
        (response.status().as_u16(), response.text().await.expect("body"))
    }

    /// A POST in the JSON protocol: (status, query-error header, body).
    pub async fn json(&self, action: &str, body: &str) -> (u16, Option<String>, serde_json::Value) {
        let response = reqwest::Client::new()
            .post(&self.url)
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", format!("AmazonSQS.{action}"))
            .body(body.to_owned())
            .send()
            .await
            .expect("request");
        let status = response.status().as_u16();
        let code = response.headers().get("x-amzn-query-error").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let text = response.text().await.expect("body");
        (status, code, serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
    }
}

pub fn client(url: &str, key_id: &str, secret: &str) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(key_id, secret, None, None, "tests"))
        .endpoint_url(url)
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

pub fn sns_client(url: &str, key_id: &str, secret: &str) -> aws_sdk_sns::Client {
    let config = aws_sdk_sns::Config::builder()
        .behavior_version(aws_sdk_sns::config::BehaviorVersion::latest())
        .region(aws_sdk_sns::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sns::config::Credentials::new(key_id, secret, None, None, "tests"))
        .endpoint_url(url)
        .build();
    aws_sdk_sns::Client::from_conf(config)
}
