//! Hostile transport components (tests/plugins/hostile-transport.wasm,
//! processors/fixtures/hostile-transport) in the real daemon, beside a
//! healthy route (a native SimpleMQ receiver on the fake SimpleMQ to a
//! webhook) that must keep flowing whatever the components do:
//!
//! - a receiver that hangs in `poll` is interrupted at its deadline and
//!   replaced, one that allocates without end traps at the memory cap, one
//!   that traps in `settle` is replaced for each message and its messages
//!   still arrive: each outcome counted in `ferry_plugin_calls_total`;
//! - a sender that answers "accepted" without sending is believed (the
//!   documented trust), one that reaches for an HTTP host or a TCP address
//!   its `allow_hosts` leaves out is refused and counted in
//!   `ferry_plugin_network_refused_total`, and one that answers no result
//!   for a message has the message retried.

use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::http::{counter, get};
use ferry_tests::simplemq::FakeSimpleMq;
use ferry_tests::webhook::WebhookTarget;
use ferry_tests::{eventually, unique};

const WAIT: Duration = Duration::from_secs(15);
/// A port nothing listens on: the grant the hostile senders get, so that
/// what they reach for is outside it.
const GRANTED: &str = "127.0.0.1:9";

/// The daemon's surroundings: the fake SimpleMQ, the webhook every route
/// sends to (by path), the running daemon's admin address, and the healthy
/// route's queue.
struct Bench {
    smq: FakeSimpleMq,
    target: WebhookTarget,
    admin: std::sync::Mutex<String>,
    healthy: String,
    ws: Workspace,
}

impl Bench {
    async fn start() -> Self {
        let smq = FakeSimpleMq::start(Duration::from_secs(30)).await;
        let healthy = unique("healthy");
        smq.create_queue(&healthy, "key");
        Self {
            smq,
            target: WebhookTarget::start().await,
            admin: std::sync::Mutex::default(),
            healthy,
            ws: Workspace::with_plugins(&["hostile-transport"]),
        }
    }

    /// A native SimpleMQ receiver of `queue`.
    fn queue_receiver(&self, name: &str, queue: &str) -> String {
        format!(
            "[receivers.{name}]\ntype = \"simplemq\"\nqueue = \"{queue}\"\napi_key = \"key\"\napi_url = \"{}\"\npolling_interval_ms = 50\n",
            self.smq.url()
        )
    }

    /// An HTTP sender to the webhook's `path`.
    fn hook(&self, name: &str, path: &str) -> String {
        format!("[senders.{name}]\ntype = \"http\"\nurl = \"{}\"\n", self.target.url(path))
    }

    /// Starts the daemon on the healthy route plus `extra` (receivers,
    /// senders and routes).
    async fn daemon(&self, extra: &str) -> Daemon {
        let config = format!(
            "{receiver}\n{hook}\n[[routes]]\nid = \"healthy\"\nreceiver = \"healthy\"\n[[routes.bindings]]\nsender = \"ok\"\n\n{extra}",
            receiver = self.queue_receiver("healthy", &self.healthy),
            hook = self.hook("ok", "/ok"),
        );
        self.ws.config(&config);
        let daemon = Daemon::start(&self.ws, 0);
        *self.admin.lock().expect("admin") = daemon.admin();
        daemon
    }

    /// The running daemon's admin address.
    fn admin(&self) -> String {
        self.admin.lock().expect("admin").clone()
    }

    /// A message through the healthy route arrives.
    async fn healthy_route_flows(&self, body: &str) {
        self.smq.put(&self.healthy, &base64(body));
        let hits = self.target.wait_for(1, WAIT, |h| h.path == "/ok" && h.body == body.as_bytes()).await;
        assert_eq!(hits.len(), 1, "the healthy route delivered {body:?}: {:?}", self.target.hits());
        let (status, _) = get(&self.admin(), "/healthz").expect("healthz");
        assert_eq!(status, 200, "the daemon is healthy");
    }

    /// Waits until a counter reaches `at_least`.
    async fn reaches(&self, name: &str, labels: &str, at_least: f64) {
        eventually(&format!("{name}{{{labels}}} >= {at_least}"), || counter(&self.admin(), name, labels) >= at_least)
            .await;
    }

    fn value(&self, name: &str, labels: &str) -> f64 {
        counter(&self.admin(), name, labels)
    }
}

fn base64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A route from `receiver` to `sender`, retried quickly.
fn route(id: &str, receiver: &str, sender: &str) -> String {
    format!(
        "[[routes]]\nid = \"{id}\"\nreceiver = \"{receiver}\"\n[routes.backoff]\ninitial_ms = 50\nmax_ms = 200\n[[routes.bindings]]\nsender = \"{sender}\"\n"
    )
}

fn calls(route: &str, outcome: &str) -> String {
    format!("plugin=\"hostile-transport\",route=\"{route}\",outcome=\"{outcome}\"")
}

#[tokio::test(flavor = "multi_thread")]
async fn receivers_that_hang_flood_or_trap_are_counted_and_replaced_and_stall_only_their_own_routes() {
    let bench = Bench::start().await;
    let extra = format!(
        r#"
[receivers.stuck]
type = "component"
component = "hostile-transport"
call_timeout_ms = 200
config = {{ mode = "hang-poll" }}

[receivers.greedy]
type = "component"
component = "hostile-transport"
config = {{ mode = "flood-poll" }}

[receivers.trapping]
type = "component"
component = "hostile-transport"
wait_ms = 50
config = {{ mode = "trap-settle", count = 3 }}

{made}
{stuck}
{greedy}
{trapping}
"#,
        made = bench.hook("made", "/made"),
        stuck = route("stuck", "stuck", "made"),
        greedy = route("greedy", "greedy", "made"),
        trapping = route("trapping", "trapping", "made"),
    );
    let daemon = bench.daemon(&extra).await;

    // Hangs: interrupted at the deadline, replaced, and hung again.
    bench.reaches("ferry_plugin_calls_total", &calls("stuck", "deadline"), 2.0).await;
    // Floods: the memory cap makes it trap.
    bench.reaches("ferry_plugin_calls_total", &calls("greedy", "trap"), 1.0).await;
    // Traps in settle: every message still arrives (the route sent it
    // before the settle), and each settle cost an instance.
    let made = bench.target.wait_for(3, WAIT, |h| h.path == "/made").await;
    let mut bodies: Vec<String> = made.iter().map(|h| String::from_utf8_lossy(&h.body).into_owned()).collect();
    bodies.sort();
    assert_eq!(bodies, ["1", "2", "3"], "each made message delivered once");
    bench.reaches("ferry_plugin_calls_total", &calls("trapping", "trap"), 3.0).await;

    assert_eq!(
        bench.value("ferry_transport_connected", "kind=\"component\",role=\"receiver\",name=\"stuck\""),
        0.0,
        "a receiver that cannot poll is shown disconnected"
    );
    bench.healthy_route_flows("still flowing").await;
    assert_eq!(bench.value("ferry_plugin_calls_total", &calls("trapping", "trap")), 3.0, "no settle without a message");
    assert!(daemon.terminate().success(), "stops cleanly with a component hung in a call");
}

#[tokio::test(flavor = "multi_thread")]
async fn senders_are_trusted_fenced_in_and_checked() {
    let bench = Bench::start().await;
    let queues: Vec<String> = ["trusting", "leak", "socket", "garbage"].iter().map(|q| unique(q)).collect();
    let mut extra = String::new();
    for (name, queue) in ["trusting", "leak", "socket", "garbage"].iter().zip(&queues) {
        bench.smq.create_queue(queue, "key");
        extra.push_str(&bench.queue_receiver(&format!("from_{name}"), queue));
        extra.push_str(&route(name, &format!("from_{name}"), name));
    }
    let target = bench.target.addr;
    extra.push_str(&format!(
        r#"
[senders.trusting]
type = "component"
component = "hostile-transport"
config = {{ mode = "accept-all" }}

[senders.leak]
type = "component"
component = "hostile-transport"
allow_hosts = ["{GRANTED}"]
config = {{ mode = "ungranted", url = "{leak}" }}

[senders.socket]
type = "component"
component = "hostile-transport"
allow_hosts = ["{GRANTED}"]
config = {{ mode = "ungranted-socket", addr = "{target}" }}

[senders.garbage]
type = "component"
component = "hostile-transport"
config = {{ mode = "wrong-count" }}
"#,
        leak = bench.target.url("/leak"),
    ));
    let daemon = bench.daemon(&extra).await;
    for (queue, body) in queues.iter().zip(["believed", "leaked?", "connected?", "garbage"]) {
        bench.smq.put(queue, &base64(body));
    }

    // Accepted without being sent: ferry believes it, and the source
    // message is done.
    eventually("the trusted message acknowledged", || bench.smq.messages(&queues[0]).is_empty()).await;
    bench.reaches("ferry_messages_sent_total", "route=\"trusting\"", 1.0).await;
    // Outside the grant: refused at the host, counted, retried.
    let refused = |via: &str| {
        format!("plugin=\"hostile-transport\",part=\"{}\",via=\"{via}\"", if via == "http" { "leak" } else { "socket" })
    };
    bench.reaches("ferry_plugin_network_refused_total", &refused("http"), 1.0).await;
    bench.reaches("ferry_plugin_network_refused_total", &refused("socket"), 1.0).await;
    bench.reaches("ferry_messages_retried_total", "route=\"leak\"", 1.0).await;
    // No result for the message: a transient failure, retried, and said.
    bench.reaches("ferry_messages_retried_total", "route=\"garbage\"", 1.0).await;
    daemon.wait_for_line(&["garbage", "answered 0 results for 1 message"], WAIT);

    bench.healthy_route_flows("still flowing").await;
    let elsewhere: Vec<String> = bench.target.hits().into_iter().filter(|h| h.path != "/ok").map(|h| h.path).collect();
    assert!(elsewhere.is_empty(), "nothing reached the webhook outside the grants: {elsewhere:?}");
    assert!(daemon.terminate().success());
}
