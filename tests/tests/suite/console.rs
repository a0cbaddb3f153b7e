//! The console page in a real browser: Debian's headless Chromium driven
//! over WebDriver (chromedriver, fantoccini) against a daemon with two
//! MQTT routes on Mosquitto and an admin token. The page asks for the
//! token, shows the routes, its rate moves while messages flow, and its
//! Pause and Resume buttons hold and release a route with nothing lost. A
//! screenshot is saved as `console.png` in the target directory. A second
//! daemon takes a RabbitMQ queue to an HTTP target that refuses: its dead
//! letters are replayed and purged from the page.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, TwoRoutes, broker_url};
use ferry_tests::rabbit::{Rabbit, URL091};
use ferry_tests::unique;
use ferry_tests::webhook::{WebhookTarget, answer};

const TOKEN: &str = "console-token-0123456789";
/// Every wait on the page is bounded by this.
const PATIENCE: Duration = Duration::from_secs(30);

/// chromedriver on a free port, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs (scripts/provision chromium)");
        let driver = Self { child, url: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + PATIENCE;
        // Listening is enough: the session request waits for it to be ready.
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen within {PATIENCE:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
        driver
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn browser(driver: &Driver) -> Client {
    let options = serde_json::json!({
        "binary": "/usr/bin/chromium",
        "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900"],
    });
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("goog:chromeOptions".into(), options);
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .expect("a browser session")
}

async fn text(client: &Client, css: &str) -> String {
    match client.find(Locator::Css(css)).await {
        Ok(element) => element.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Opens the console of `admin`, which asks for the token, and gives it.
async fn sign_in(client: &Client, admin: &str) {
    client.goto(&format!("http://{admin}/")).await.expect("open the console");
    let token = client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#token-box:not([hidden]) #token"))
        .await
        .expect("asks");
    token.send_keys(TOKEN).await.expect("type the token");
    client.find(Locator::Css("#token-form button")).await.expect("the button").click().await.expect("submit");
}

fn route_state(admin: &str, id: &str) -> String {
    let (_, body) = ferry_tests::http::request(admin, "GET", "/routes", Some(TOKEN)).expect("routes");
    let routes: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    routes.as_array().into_iter().flatten().find(|r| r["id"] == id).map_or(String::new(), |r| r["state"].to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_rates_and_pauses_and_resumes_a_route_in_a_browser() {
    let n = TwoRoutes {
        a_in: unique("web/a"),
        b_in: unique("web/b"),
        out: unique("web/out"),
        client_a: unique("web-a"),
        client_b: unique("web-b"),
        client_out: unique("web-out"),
        admin: ANY_PORT.to_owned(),
    };
    let (a_in, out) = (n.a_in.clone(), n.out.clone());
    let ws = Workspace::with_plugins(&[]);
    ws.config(&n.config("a", &format!("token = \"{TOKEN}\"")));
    let daemon = Daemon::start(&ws, 3);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{out}/a")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    let driver = Driver::start();
    let client = browser(&driver).await;

    // The page asks for the token, then shows both routes.
    sign_in(&client, &admin).await;
    for id in ["a", "b"] {
        client
            .wait()
            .at_most(PATIENCE)
            .for_element(Locator::Css(&format!("tr[data-route='{id}'] td.state-running")))
            .await
            .unwrap_or_else(|e| panic!("route {id} shown running: {e}"));
    }

    // Its rate moves while messages flow (the page reads every second).
    let mut sent = 0;
    let deadline = Instant::now() + PATIENCE;
    loop {
        publisher.publish_with(&a_in, &format!("m{sent}"), &[]).await;
        sent += 1;
        let rate: f64 = text(&client, "tr[data-route='a'] td.rate").await.parse().unwrap_or(0.0);
        if rate > 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "the rate of route a never moved");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let screenshot = client.screenshot().await.expect("a screenshot");
    assert!(screenshot.starts_with(b"\x89PNG"), "a PNG");
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let _ = std::fs::write(std::path::Path::new(&target).join("console.png"), &screenshot);
    assert_eq!(sub.collect(sent).await.len(), sent);

    // Pause from the page: the daemon holds the route; what is published
    // meanwhile waits, and crosses once after Resume.
    client.find(Locator::Css("tr[data-route='a'] button")).await.expect("Pause").click().await.expect("click");
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("tr[data-route='a'] td.state-paused"))
        .await
        .expect("shown paused");
    assert_eq!(route_state(&admin, "a"), "\"paused\"");
    for i in 0..5 {
        publisher.publish_with(&a_in, &format!("held{i}"), &[]).await;
    }
    client.find(Locator::Css("tr[data-route='a'] button")).await.expect("Resume").click().await.expect("click");
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("tr[data-route='a'] td.state-running"))
        .await
        .expect("shown running");
    let mut held: Vec<String> =
        sub.collect(5).await.iter().map(|p| String::from_utf8_lossy(&p.payload).into_owned()).collect();
    held.sort();
    assert_eq!(held, (0..5).map(|i| format!("held{i}")).collect::<Vec<_>>());
    client.close().await.expect("close the browser");
    assert!(daemon.terminate().success());
}

/// Dead letters in the page: a target that refuses for good dead-letters
/// two messages from a RabbitMQ queue; once it takes messages again,
/// Replay in the page sends one through, and Purge (after the page asks,
/// accepted) removes the other. The route's receiver and sender show
/// connected.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_replays_and_purges_dead_letters_in_a_browser() {
    let queue = unique("web-dlq");
    let rabbit = Rabbit::connect().await;
    rabbit.declare_queue(&queue).await;
    let target = WebhookTarget::start_on_answering(
        tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind"),
        answer(400, None),
    )
    .await;
    let config = format!(
        "[admin]\nlisten = \"{ANY_PORT}\"\ntoken = \"{TOKEN}\"\n\
         [receivers.in]\ntype = \"amqp091\"\nurl = \"{URL091}\"\nqueue = \"{queue}\"\n\
         [senders.hook]\ntype = \"http\"\nurl = \"{hook}\"\n\
         [[routes]]\nid = \"d\"\nreceiver = \"in\"\n[[routes.bindings]]\nsender = \"hook\"\n",
        hook = target.url("/hook"),
    );
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config);
    let daemon = Daemon::start(&ws, 0);
    let admin = daemon.admin();
    daemon.wait_connected("receiver", "in", PATIENCE);
    for body in ["first", "second"] {
        rabbit.publish("", &queue, body.as_bytes(), lapin::BasicProperties::default()).await;
    }
    daemon.wait_for_total("ferry_messages_dead_lettered_total", "route=\"d\"", 2.0, PATIENCE);
    target.answer_all(answer(200, None));

    let driver = Driver::start();
    let client = browser(&driver).await;
    sign_in(&client, &admin).await;
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("tr[data-route='d'] li[data-binding='hook'] span.up"))
        .await
        .expect("the binding's sender shown connected");
    let receiver = text(&client, "tr[data-route='d'] td:nth-child(3)").await;
    assert!(receiver.contains("in (amqp091)"), "{receiver}");
    // The config view opens on request, its secrets masked; nothing on the
    // page went wrong meanwhile.
    client.find(Locator::Css("#config-show")).await.expect("Show").click().await.expect("click");
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#config-json:not([hidden])"))
        .await
        .expect("the config shown");
    let shown = text(&client, "#config-json").await;
    assert!(shown.contains("\"hook\"") && !shown.contains(TOKEN), "{shown}");
    assert!(text(&client, "#config-explain").await.contains("route d -> binding hook"));
    assert_eq!(text(&client, "#error").await, "", "the page reported an error");
    let rows = client.find_all(Locator::Css("#dlq tbody tr")).await.expect("rows");
    assert_eq!(rows.len(), 2, "both dead letters listed");
    let mut ids = Vec::new();
    for row in &rows {
        ids.push(row.attr("data-id").await.expect("attr").expect("an id"));
    }
    let (first, second) = (ids[0].clone(), ids[1].clone());
    let refused = target.count();

    // Replay one from its row: it reaches the target, and leaves the list.
    let replay = client
        .find(Locator::XPath(&format!("//tr[@data-id='{first}']//button[text()='Replay']")))
        .await
        .expect("Replay");
    replay.click().await.expect("click");
    let hits = target.wait_for(refused + 1, PATIENCE, |_| true).await;
    assert_eq!(hits.len(), refused + 1, "the replay arrived");
    let replayed = hits[refused].body.clone();
    assert!([&b"first"[..], b"second"].contains(&replayed.as_ref()), "{replayed:?}");
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::XPath(&format!("//table[@id='dlq']/tbody[not(tr[@data-id='{first}'])]")))
        .await
        .expect("the replayed entry left the list");

    // Purge the second: the page asks first; accepted, it is gone for good.
    client
        .find(Locator::XPath(&format!("//tr[@data-id='{second}']//button[text()='Purge']")))
        .await
        .expect("Purge")
        .click()
        .await
        .expect("click");
    client.accept_alert().await.expect("the page asked before purging");
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::XPath("//table[@id='dlq']/tbody[not(tr)]"))
        .await
        .expect("the list emptied");
    assert!(ws.dead_letters().is_empty());
    assert_eq!(target.count(), refused + 1, "the purged message was not sent");
    assert_eq!(rabbit.depth(&queue).await, 0, "both were settled at the broker when dead-lettered");
    rabbit.delete_queue(&queue).await;
    client.close().await.expect("close the browser");
    assert!(daemon.terminate().success());
}
