//! Transport components: a `type = "component"` receiver or sender whose
//! protocol is a WebAssembly component (`ferry:plugin` 1.2.0 and later, the worlds
//! `transport-receiver`, `transport-sender` and `transport`).
//!
//! Every call into a component is async (wasmtime's `call_async`, WASI and
//! `wasi:http` awaited): it runs on the async worker of the task that
//! asked, yields to the executor at every epoch tick (10 ms) so that a
//! component computing never holds a worker, and is bounded twice: the
//! epoch traps code that computes past `call_timeout_ms`, and the host
//! drops a call that has not returned a second after that (one waiting in
//! WASI). HTTP requests have their timeouts capped at the deadline too. A
//! call that traps or misses its deadline loses its instance; the next
//! call opens a fresh one with the same config.
//!
//! What happens to messages when a call fails:
//! - `poll`: nothing was handed over; the source still has them and
//!   delivers them again (its own visibility or lock timeout).
//! - `settle`: the source was not told; it delivers the message again (at
//!   least once).
//! - `send`: the message is retried like any transient send failure.
//!
//! A sender that calls `host.target-unavailable` during `send` (1.3.0)
//! makes that call's `transient` results *unavailable*: the route holds the
//! messages for the target and probes it, spending no replay budget.
//!
//! The host trusts what a component says: a message a sender calls
//! `accepted` is done as far as ferry is concerned, whether or not it was
//! sent anywhere.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use ferry_core::TransportError;
use ferry_core::backoff::{Backoff, sleep_or_shutdown};
use ferry_core::fidelity::{Find, Probe};
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, OutboundMessage, Receiver, Sender, room};
use ferry_core::transport::{KeyProblem, Parts, TypedTransport};

use crate::component_config::{ComponentReceiverConfig, ComponentSenderConfig};
use ferry_core::wire::toml_value::Value as TomlValue;
use ferry_core::wire::{Admitted, View};
use ferry_envelope::{Envelope, Timestamp, names};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use wasmtime::{Store, UpdateDeadline};

use crate::bindings::transport_receiver::TransportReceiver;
use crate::bindings::transport_sender::TransportSender;
use crate::bindings::transport_types as wit;
use crate::bindings::{HostState, Network, from_wit, to_wit};
use crate::engine::{PluginEngine, PluginLimits};
use crate::grants::{Grants, OnRefused};
use crate::http_client::PooledClient;
use crate::registry::{LoadedPlugin, PluginError, Pre};

/// How long past its deadline the host waits for a call before it gives
/// the instance up.
const GRACE: Duration = Duration::from_secs(1);
/// Idle instances kept (senders, and settlers of a receiver whose tokens
/// settle anywhere); more are dropped after use.
const MAX_IDLE: usize = 16;
/// The longest delay a component may ask for (`release`, `retry-after`).
const MAX_DELAY: Duration = Duration::from_secs(3600);

/// What a `type = "component"` receiver or sender is made of.
pub struct ComponentSpec {
    pub plugin: Arc<LoadedPlugin>,
    pub engine: PluginEngine,
    /// The receiver's or sender's name (the `part` label).
    pub part: String,
    /// The `config` table, as JSON, for `open`.
    pub config_json: String,
    pub allow_hosts: Vec<String>,
    pub call_timeout: Duration,
    pub metrics: Metrics,
}

/// Why a call into a component did not give an answer.
#[derive(Debug)]
enum CallFailed {
    /// No instance: it could not be made, or `open` refused the config.
    Open(String),
    /// It trapped; the instance is gone.
    Trap(String),
    /// It missed its deadline; the instance is gone.
    Deadline,
}

impl std::fmt::Display for CallFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallFailed::Open(e) => write!(f, "cannot open: {e}"),
            CallFailed::Trap(e) => write!(f, "trapped: {e}"),
            CallFailed::Deadline => f.write_str("missed its call deadline"),
        }
    }
}

impl CallFailed {
    fn label(&self) -> &'static str {
        match self {
            CallFailed::Open(_) => "open_failed",
            CallFailed::Trap(_) => "trap",
            CallFailed::Deadline => "deadline",
        }
    }
}

/// One instance of a component: its store and the export it is used by.
struct Instance<G> {
    store: Store<HostState>,
    guest: G,
}

/// A call's future, borrowing the instance it runs on.
type CallFuture<'a, T> = Pin<Box<dyn Future<Output = wasmtime::Result<T>> + Send + 'a>>;

/// The export an instance is used by, made by `open` with the config.
trait Guest: Sized + Send + 'static {
    fn open(part: &Part, store: &mut Store<HostState>) -> impl Future<Output = Result<Self, String>> + Send;
}

impl Guest for (TransportReceiver, wit::ReceiverInfo) {
    async fn open(part: &Part, store: &mut Store<HostState>) -> Result<Self, String> {
        let Pre::Transport { receiver: Some(pre), .. } = &part.spec.plugin.pre else {
            return Err(format!("{} is a {}, not a transport receiver", part.name(), part.spec.plugin.world.name()));
        };
        let guest = pre.instantiate_async(&mut *store).await.map_err(|e| format!("cannot instantiate: {e:#}"))?;
        let info = guest
            .ferry_plugin_receiver()
            .call_open(&mut *store, &part.spec.config_json)
            .await
            .map_err(|e| format!("open trapped: {e:#}"))?
            .map_err(|refusal| format!("open refused the config: {refusal}"))?;
        Ok((guest, info))
    }
}

impl Guest for TransportSender {
    async fn open(part: &Part, store: &mut Store<HostState>) -> Result<Self, String> {
        let Pre::Transport { sender: Some(pre), .. } = &part.spec.plugin.pre else {
            return Err(format!("{} is a {}, not a transport sender", part.name(), part.spec.plugin.world.name()));
        };
        let guest = pre.instantiate_async(&mut *store).await.map_err(|e| format!("cannot instantiate: {e:#}"))?;
        guest
            .ferry_plugin_sender()
            .call_open(&mut *store, &part.spec.config_json)
            .await
            .map_err(|e| format!("open trapped: {e:#}"))?
            .map_err(|refusal| format!("open refused the config: {refusal}"))?;
        Ok(guest)
    }
}

/// The shared half of a component receiver or sender: its spec, limits
/// and network.
struct Part {
    spec: ComponentSpec,
    limits: PluginLimits,
    /// What its instances share for the network (refusals counted, HTTP
    /// timeouts capped, the pooled client).
    network: Network,
}

impl Part {
    fn new(spec: ComponentSpec) -> Result<Arc<Self>, PluginError> {
        let limits = PluginLimits { call_timeout: spec.call_timeout, ..spec.engine.limits };
        let (metrics, plugin, part) = (spec.metrics.clone(), spec.plugin.name.clone(), spec.part.clone());
        let on_refused: OnRefused = Arc::new(move |via| {
            Metrics::inc(&metrics.plugin_network_refused, &[("plugin", &plugin), ("part", &part), ("via", via)]);
        });
        let client = PooledClient::new(limits.call_timeout).map_err(PluginError::Refused)?;
        let network = Network { on_refused, timeout: limits.call_timeout, client: Arc::new(client) };
        Ok(Arc::new(Self { spec, limits, network }))
    }

    fn name(&self) -> &str {
        &self.spec.plugin.name
    }

    /// A new store for an instance, with the network `allow_hosts` grants
    /// (the granted names are looked up off the async workers). Its wasm
    /// yields to the executor at every epoch tick and traps once the
    /// call's deadline (set by [`arm`]) has passed.
    async fn store(self: &Arc<Self>) -> Result<Store<HostState>, String> {
        let part = self.clone();
        let state = tokio::task::spawn_blocking(move || {
            let grants = Grants { allow_hosts: part.spec.allow_hosts.clone(), ..Grants::default() };
            let kv = part.spec.engine.kv().scope(part.name(), &part.spec.part);
            HostState::with_network(
                part.name(),
                &part.spec.part,
                part.limits.memory_limit_bytes,
                kv,
                &grants,
                Some(&part.network),
            )
            .map_err(|e| format!("cannot grant what the config asks for: {e:#}"))
        })
        .await
        .map_err(|e| format!("the host task failed: {e}"))??;
        let mut store = Store::new(self.spec.engine.engine(), state);
        store.limiter(|s| s.limiter());
        store.epoch_deadline_callback(|store| {
            let passed = store.data().call_deadline.is_none_or(|deadline| Instant::now() >= deadline);
            Ok(if passed { UpdateDeadline::Interrupt } else { UpdateDeadline::Yield(1) })
        });
        store.set_epoch_deadline(1);
        Ok(store)
    }

    /// Runs `call` on `instance` (or on one `open` makes), bounded as the
    /// module docs say. The instance comes back with the answer; a failed
    /// call drops it.
    async fn call<G: Guest, T: Send + 'static>(
        self: &Arc<Self>,
        instance: Option<Instance<G>>,
        call: impl for<'a> FnOnce(&'a mut Instance<G>) -> CallFuture<'a, T> + Send,
    ) -> Result<(Instance<G>, T), CallFailed> {
        let deadline = Instant::now() + self.limits.call_timeout;
        let work = async {
            let mut instance = match instance {
                Some(mut i) => {
                    arm(&mut i.store, deadline);
                    i
                }
                None => {
                    let mut store = self.store().await.map_err(CallFailed::Open)?;
                    arm(&mut store, deadline);
                    let guest = G::open(self, &mut store).await.map_err(CallFailed::Open)?;
                    Instance { store, guest }
                }
            };
            match call(&mut instance).await {
                Ok(answer) => Ok((instance, answer)),
                Err(e) if matches!(e.downcast_ref::<wasmtime::Trap>(), Some(wasmtime::Trap::Interrupt)) => {
                    Err(CallFailed::Deadline)
                }
                Err(e) => Err(CallFailed::Trap(format!("{e:#}").lines().next().unwrap_or("trap").to_owned())),
            }
        };
        // The epoch traps computing past the deadline; this bounds a call
        // waiting in WASI (an HTTP answer, a socket) as well. Dropping the
        // call drops its instance.
        let result = match tokio::time::timeout(self.limits.call_timeout + GRACE, work).await {
            Ok(result) => result,
            Err(_) => Err(CallFailed::Deadline),
        };
        if let Err(e) = &result {
            let labels = [("plugin", self.name()), ("route", self.spec.part.as_str()), ("outcome", e.label())];
            Metrics::inc(&self.spec.metrics.plugin_calls, &labels);
            warn!(plugin = %self.name(), part = %self.spec.part, error = %e, "transport component call failed; its instance is replaced");
        }
        result
    }

    /// Opens one instance and drops it (`ferry validate`). Blocking: on a
    /// runtime of its own outside one.
    fn open_once<G: Guest>(self: &Arc<Self>) -> Result<(), String> {
        let open = async {
            self.call(None, |_: &mut Instance<G>| Box::pin(async { Ok(()) })).await.map(drop).map_err(|e| e.to_string())
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => tokio::task::block_in_place(|| handle.block_on(open)),
            Err(_) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("no runtime to open it on: {e}"))?
                .block_on(open),
        }
    }

    fn connected(&self, role: &str, up: bool) {
        let gauge = labels(&[("kind", "component"), ("role", role), ("name", &self.spec.part)]);
        self.spec.metrics.connected.get_or_create(&gauge).set(i64::from(up));
    }
}

/// Sets the deadline of the call about to run on `store`.
fn arm(store: &mut Store<HostState>, deadline: Instant) {
    store.data_mut().call_deadline = Some(deadline);
    store.set_epoch_deadline(1);
}

/// The envelope a component hands over, as the host's. The identity is
/// the component's, or one the host makes (marked generated) when it gave
/// none.
fn envelope_from(message: wit::Envelope, now: Timestamp) -> Envelope {
    let mut envelope = if message.id.is_empty() {
        let mut e = Envelope::new(uuid::Uuid::new_v4().to_string(), Bytes::from(message.payload));
        e.derive_header(names::GENERATED_ID, ferry_envelope::HeaderValue::Boolean(true));
        e
    } else {
        Envelope::new(message.id, Bytes::from(message.payload))
    };
    envelope.subject = message.subject;
    for (name, value) in message.headers {
        envelope.set_header(name, from_wit(value));
    }
    envelope.created_at = if message.created_at > 0 { Timestamp(message.created_at) } else { now };
    envelope.expires_at = message.expires_at.map(Timestamp);
    envelope
}

/// The host's envelope as a component gets it.
fn envelope_to(envelope: &Envelope) -> wit::Envelope {
    wit::Envelope {
        id: envelope.id.clone(),
        subject: envelope.subject.clone(),
        headers: envelope.headers.iter().map(|(n, v)| (n.clone(), to_wit(v))).collect(),
        payload: envelope.payload().to_vec(),
        created_at: envelope.created_at.as_millis(),
        expires_at: envelope.expires_at.map(Timestamp::as_millis),
    }
}

type ReceiverInstance = Instance<(TransportReceiver, wit::ReceiverInfo)>;

/// `type = "component"` receiver.
pub struct ComponentReceiver {
    inner: Arc<ReceiverInner>,
}

struct ReceiverInner {
    part: Arc<Part>,
    max_messages: u32,
    wait: Duration,
    /// The polling instance. Settle and extend take turns with `poll` on
    /// it (a component with a connection of its own needs the instance
    /// that received), unless the component said `settle-anywhere`.
    instance: tokio::sync::Mutex<Option<ReceiverInstance>>,
    /// Idle instances that settle and extend beside the polling one, for a
    /// component whose tokens settle anywhere.
    settlers: Mutex<Vec<ReceiverInstance>>,
    /// What the last `open` of the polling instance said.
    info: Mutex<Option<(Option<u64>, bool)>>,
    /// Tokens of the messages the route holds, for `extend`.
    in_flight: Mutex<BTreeMap<u64, String>>,
    next: AtomicUsize,
}

impl ComponentReceiver {
    /// A receiver over `spec`; nothing runs until [`Receiver::run`].
    pub fn new(spec: ComponentSpec, max_messages: u32, wait: Duration) -> Result<Self, PluginError> {
        if !spec.plugin.world.receives() {
            return Err(PluginError::Refused(format!(
                "plugin {:?} is a {}, not a transport receiver (its world exports no `receiver`)",
                spec.plugin.name,
                spec.plugin.world.name()
            )));
        }
        Ok(Self {
            inner: Arc::new(ReceiverInner {
                part: Part::new(spec)?,
                max_messages: max_messages.max(1),
                wait,
                instance: tokio::sync::Mutex::new(None),
                settlers: Mutex::new(Vec::new()),
                info: Mutex::new(None),
                in_flight: Mutex::new(BTreeMap::new()),
                next: AtomicUsize::new(0),
            }),
        })
    }
}

impl ReceiverInner {
    /// One call on the receiver's instance, opening it when there is none.
    async fn call<T: Send + 'static>(
        &self,
        call: impl for<'a> FnOnce(&'a mut ReceiverInstance) -> CallFuture<'a, T> + Send,
    ) -> Result<T, CallFailed> {
        let mut slot = self.instance.lock().await;
        let (instance, answer) = self.part.call(slot.take(), call).await?;
        let info = &instance.guest.1;
        if let Ok(mut said) = self.info.lock() {
            *said = Some((info.extend_every_ms, info.settle_anywhere));
        }
        *slot = Some(instance);
        Ok(answer)
    }

    /// One settle or extend call: on an idle settler (or a fresh one) when
    /// the component's tokens settle anywhere, else on the polling
    /// instance.
    async fn call_settler<T: Send + 'static>(
        &self,
        call: impl for<'a> FnOnce(&'a mut ReceiverInstance) -> CallFuture<'a, T> + Send,
    ) -> Result<T, CallFailed> {
        let anywhere = self.info.lock().ok().and_then(|i| *i).is_some_and(|(_, anywhere)| anywhere);
        if !anywhere {
            return self.call(call).await;
        }
        let idle = self.settlers.lock().ok().and_then(|mut s| s.pop());
        let (instance, answer) = self.part.call(idle, call).await?;
        if let Ok(mut idle) = self.settlers.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(instance);
        }
        Ok(answer)
    }

    /// How often the open instance wants `extend`.
    fn extend_every(&self) -> Option<Duration> {
        let ms = self.info.lock().ok().and_then(|i| *i)?.0?;
        Some(Duration::from_millis(ms.max(100)))
    }

    async fn settle(&self, key: u64, token: String, settlement: wit::Settlement) -> Result<(), TransportError> {
        if let Ok(mut held) = self.in_flight.lock() {
            held.remove(&key);
        }
        let answer = self
            .call_settler(move |i| {
                Box::pin(async move {
                    i.guest.0.ferry_plugin_receiver().call_settle(&mut i.store, &token, &settlement).await
                })
            })
            .await
            .map_err(|e| TransportError::transient(format!("component {}: settle {e}", self.part.name())))?;
        answer
            .map_err(|refusal| TransportError::transient(format!("component {}: settle: {refusal}", self.part.name())))
    }

    /// Calls `extend` with the held tokens every `every`, until `stop`.
    async fn keep(self: Arc<Self>, every: Duration, stop: CancellationToken) {
        while sleep_or_shutdown(every, &stop).await {
            let tokens: Vec<String> = self.in_flight.lock().map(|h| h.values().cloned().collect()).unwrap_or_default();
            if tokens.is_empty() {
                continue;
            }
            let extended = self
                .call_settler(move |i| {
                    Box::pin(async move { i.guest.0.ferry_plugin_receiver().call_extend(&mut i.store, &tokens).await })
                })
                .await;
            match extended {
                Ok(Ok(())) => {}
                Ok(Err(refusal)) => warn!(part = %self.part.spec.part, %refusal, "component extend refused"),
                Err(e) => warn!(part = %self.part.spec.part, error = %e, "component extend failed"),
            }
        }
    }

    async fn poll(&self, max: u32) -> Result<Vec<wit::Received>, TransportError> {
        let wait_ms = u32::try_from(self.wait.as_millis()).unwrap_or(u32::MAX);
        let answer = self
            .call(move |i| {
                Box::pin(async move { i.guest.0.ferry_plugin_receiver().call_poll(&mut i.store, max, wait_ms).await })
            })
            .await
            .map_err(|e| TransportError::transient(format!("component {}: poll {e}", self.part.name())))?;
        answer.map_err(|e| TransportError::transient(format!("component {}: poll: {e}", self.part.name())))
    }
}

#[async_trait]
impl Receiver for ComponentReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let inner = &self.inner;
        let part = inner.part.spec.part.clone();
        info!(receiver = %part, component = %inner.part.name(), "receiving through a transport component");
        let backoff = Backoff::reconnect(200, 30_000);
        let mut failures: u32 = 0;
        let keeper = CancellationToken::new();
        let mut keeping = false;
        while let Some(room) = room(&sink, &shutdown).await {
            let max = inner.max_messages.min(u32::try_from(room).unwrap_or(u32::MAX)).max(1);
            let started = Instant::now();
            let polled = tokio::select! {
                _ = shutdown.cancelled() => break,
                p = inner.poll(max) => p,
            };
            let received = match polled {
                Ok(received) => received,
                Err(e) => {
                    inner.part.connected("receiver", false);
                    let delay = backoff.next(&mut failures);
                    warn!(receiver = %part, error = %e, retry_in_ms = delay.as_millis() as u64, "component poll failed");
                    if !sleep_or_shutdown(delay, &shutdown).await {
                        break;
                    }
                    continue;
                }
            };
            failures = 0;
            inner.part.connected("receiver", true);
            if !keeping && let Some(every) = inner.extend_every() {
                keeping = true;
                tokio::spawn(inner.clone().keep(every, keeper.child_token()));
            }
            if received.is_empty() {
                // Whatever the component did with `wait-ms`, an empty queue
                // is polled at most once per `wait_ms`.
                if !sleep_or_shutdown(inner.wait.saturating_sub(started.elapsed()), &shutdown).await {
                    break;
                }
                continue;
            }
            let now = Timestamp::now();
            for r in received {
                let key = inner.next.fetch_add(1, Ordering::Relaxed) as u64;
                if let Ok(mut held) = inner.in_flight.lock() {
                    held.insert(key, r.token.clone());
                }
                let handle =
                    ComponentHandle { inner: inner.clone(), key, token: Some(r.token), redeliveries: r.redeliveries };
                let envelope = envelope_from(r.message, now);
                debug!(receiver = %part, id = %envelope.id, "received from a transport component");
                if sink.send(Delivery::new(envelope, Box::new(handle))).await.is_err() {
                    // The route stopped; the source delivers the rest again.
                    break;
                }
            }
        }
        keeper.cancel();
        inner.part.connected("receiver", false);
        Ok(())
    }
}

/// A message a component receiver handed over, settled through it.
struct ComponentHandle {
    inner: Arc<ReceiverInner>,
    key: u64,
    token: Option<String>,
    redeliveries: Option<u32>,
}

impl ComponentHandle {
    async fn settle(mut self: Box<Self>, settlement: wit::Settlement) -> Result<(), TransportError> {
        let token = self.token.take().unwrap_or_default();
        self.inner.settle(self.key, token, settlement).await
    }
}

impl Drop for ComponentHandle {
    fn drop(&mut self) {
        // Never settled (the route stopped): no longer extended, so the
        // source delivers it again.
        if let Ok(mut held) = self.inner.in_flight.lock() {
            held.remove(&self.key);
        }
    }
}

#[async_trait]
impl DeliveryHandle for ComponentHandle {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        self.settle(wit::Settlement::Ack).await
    }

    async fn release(self: Box<Self>, after: Duration, reason: &str) -> Result<(), TransportError> {
        debug!(%reason, "component message released");
        let ms = u64::try_from(after.min(MAX_DELAY).as_millis()).unwrap_or(u64::MAX);
        self.settle(wit::Settlement::Release(ms)).await
    }

    async fn reject(self: Box<Self>, reason: &str) -> Result<(), TransportError> {
        self.settle(wit::Settlement::Reject(reason.to_owned())).await
    }

    fn redelivery_count(&self) -> Option<u32> {
        self.redeliveries
    }
}

/// `type = "component"` sender: a pool of instances, one call per message.
pub struct ComponentSender {
    part: Arc<Part>,
    idle: Mutex<Vec<Instance<TransportSender>>>,
}

impl ComponentSender {
    /// A sender over `spec`; its first instance opens with the first send.
    pub fn new(spec: ComponentSpec) -> Result<Arc<Self>, PluginError> {
        if !spec.plugin.world.sends() {
            return Err(PluginError::Refused(format!(
                "plugin {:?} is a {}, not a transport sender (its world exports no `sender`)",
                spec.plugin.name,
                spec.plugin.world.name()
            )));
        }
        let sender = Arc::new(Self { part: Part::new(spec)?, idle: Mutex::new(Vec::new()) });
        Ok(sender)
    }

    fn give_back(&self, instance: Instance<TransportSender>) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(instance);
        }
    }
}

#[async_trait]
impl Sender for ComponentSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let name = self.part.name().to_owned();
        let batch = vec![wit::Outbound { message: envelope_to(&msg.envelope), address: msg.address.clone() }];
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let answer = self
            .part
            .call(idle, move |i| {
                Box::pin(async move {
                    i.store.data_mut().target_unavailable = None;
                    let results = i.guest.ferry_plugin_sender().call_send(&mut i.store, &batch).await;
                    results.map(|r| (r, i.store.data_mut().target_unavailable.take()))
                })
            })
            .await;
        let (instance, (mut results, unavailable)) = match answer {
            Ok(answer) => answer,
            Err(e) => {
                self.part.connected("sender", false);
                return Err(TransportError::transient(format!("component {name}: send {e}")));
            }
        };
        self.give_back(instance);
        self.part.connected("sender", true);
        if results.len() != 1 {
            return Err(TransportError::transient(format!(
                "component {name}: send answered {} results for 1 message",
                results.len()
            )));
        }
        match results.remove(0) {
            wit::SendResult::Accepted => Ok(()),
            wit::SendResult::Transient(r) => {
                let mut e = match unavailable {
                    Some(why) => TransportError::unavailable(format!("component {name}: {why}")),
                    None => TransportError::transient(format!("component {name}: {}", r.reason)),
                };
                e.retry_after = Some(Duration::from_millis(r.delay_ms).min(MAX_DELAY));
                Err(e)
            }
            wit::SendResult::Permanent(reason) => Err(TransportError::permanent(format!("component {name}: {reason}"))),
        }
    }
}

/// The plugins the daemon loaded, for `type = "component"` parts (a
/// [`ferry_core::transport::Services`] item).
pub struct Components {
    registry: crate::PluginRegistry,
}

impl Components {
    pub fn new(registry: &crate::PluginRegistry) -> Self {
        Self { registry: registry.clone() }
    }
}

/// `type = "component"` in the daemon's transport table.
pub struct Component;

fn components<'a>(parts: &'a Parts<'_>) -> Result<&'a Components, String> {
    parts.services.get::<Components>().ok_or_else(|| "no plugin directory was loaded for this component".into())
}

fn spec(
    components: &Components,
    name: &str,
    component: &str,
    config: &serde_json::Value,
    allow_hosts: &[String],
    call_timeout_ms: u64,
    metrics: &Metrics,
) -> Result<ComponentSpec, String> {
    let plugin = components.registry.get(component).map_err(|e| e.to_string())?;
    Ok(ComponentSpec {
        plugin,
        engine: components.registry.engine().clone(),
        part: name.to_owned(),
        config_json: config.to_string(),
        allow_hosts: allow_hosts.to_vec(),
        call_timeout: Duration::from_millis(call_timeout_ms),
        metrics: metrics.clone(),
    })
}

/// The receiver `name` of config `c` (what `receiver` runs and `validate`
/// opens once).
fn component_receiver(name: &str, c: &ComponentReceiverConfig, parts: &Parts<'_>) -> Result<ComponentReceiver, String> {
    let spec =
        spec(components(parts)?, name, &c.component, &c.config, &c.allow_hosts, c.call_timeout_ms, parts.metrics)?;
    ComponentReceiver::new(spec, c.max_messages, Duration::from_millis(u64::from(c.wait_ms))).map_err(|e| e.to_string())
}

/// The sender `name` of config `c`.
fn component_sender(name: &str, c: &ComponentSenderConfig, parts: &Parts<'_>) -> Result<Arc<ComponentSender>, String> {
    let spec =
        spec(components(parts)?, name, &c.component, &c.config, &c.allow_hosts, c.call_timeout_ms, parts.metrics)?;
    ComponentSender::new(spec).map_err(|e| e.to_string())
}

/// A fixture message for a component receiver: the envelope it hands the
/// host, written out (`id`, `subject`, typed `headers`, `payload` or
/// `payload_base64`). `ferry test` does not run the component.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureInput {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, TomlValue>,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
}

#[async_trait]
impl TypedTransport for Component {
    type ReceiverConfig = ComponentReceiverConfig;
    type SenderConfig = ComponentSenderConfig;
    const KIND: &'static str = "component";

    fn check_receiver(&self, _: &str, c: &ComponentReceiverConfig) -> Result<(), KeyProblem> {
        c.check()
    }

    fn check_sender(&self, _: &str, c: &ComponentSenderConfig) -> Result<(), KeyProblem> {
        c.check()
    }

    fn receiver_plugin(&self, c: &ComponentReceiverConfig) -> Option<String> {
        Some(c.component.clone())
    }

    fn sender_plugin(&self, c: &ComponentSenderConfig) -> Option<String> {
        Some(c.component.clone())
    }

    fn receiver(
        &self,
        name: &str,
        c: &ComponentReceiverConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Receiver>, String> {
        Ok(Arc::new(component_receiver(name, c, parts)?))
    }

    fn validate_receiver(&self, name: &str, c: &ComponentReceiverConfig, parts: &Parts<'_>) -> Result<(), String> {
        component_receiver(name, c, parts)?.inner.part.open_once::<(TransportReceiver, wit::ReceiverInfo)>()
    }

    fn validate_sender(&self, name: &str, c: &ComponentSenderConfig, parts: &Parts<'_>) -> Result<(), String> {
        component_sender(name, c, parts)?.part.open_once::<TransportSender>()
    }

    fn sender(&self, name: &str, c: &ComponentSenderConfig, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String> {
        Ok(component_sender(name, c, parts)?)
    }

    async fn probe_receiver(&self, _: &str, c: &ComponentReceiverConfig) -> Result<String, TransportError> {
        Ok(format!("component {}: opened when the daemon starts (not probed)", c.component))
    }

    async fn probe_sender(&self, _: &str, c: &ComponentSenderConfig) -> Result<String, TransportError> {
        Ok(format!("component {}: opened with its first send (not probed)", c.component))
    }

    fn fixture_receive(
        &self,
        _: &ComponentReceiverConfig,
        input: TomlValue,
        now: Timestamp,
    ) -> Result<Admitted, String> {
        use serde::Deserialize as _;
        let input = FixtureInput::deserialize(input).map_err(|e| format!("component input: {e}"))?;
        let payload = ferry_core::wire::payload_of(input.payload.as_deref(), input.payload_base64.as_deref())?;
        let mut headers = Vec::new();
        for (name, value) in &input.headers {
            headers.push((name.clone(), to_wit(&ferry_core::wire::header_of(name, value)?)));
        }
        let message = wit::Envelope {
            id: input.id.unwrap_or_default(),
            subject: input.subject,
            headers,
            payload: payload.to_vec(),
            created_at: 0,
            expires_at: None,
        };
        Ok(Admitted::Envelope(envelope_from(message, now)))
    }

    fn fixture_send(
        &self,
        _: &ComponentSenderConfig,
        msg: &OutboundMessage,
        _: Timestamp,
    ) -> Result<View, TransportError> {
        let e = &msg.envelope;
        let mut v = View::new();
        v.insert("address".into(), serde_json::json!(msg.address));
        v.insert("id".into(), serde_json::json!(e.id));
        ferry_core::wire::put(&mut v, "subject", e.subject.clone());
        let headers: View = e.headers.iter().map(|(n, h)| (n.clone(), ferry_core::wire::header_value(h))).collect();
        v.insert("headers".into(), headers.into());
        ferry_core::wire::put_payload(&mut v, e.payload());
        Ok(v)
    }

    fn fidelity_probe(&self, _: &ComponentReceiverConfig) -> Probe {
        use ferry_core::fidelity::{self, Find, feature, table, text};
        let mut headers = fidelity::typed_headers();
        headers.extend(fidelity::extras().into_iter().map(|(n, v)| (n, text(&v))));
        let input = table(&[
            ("id".into(), text(fidelity::ID)),
            ("subject".into(), text(fidelity::SUBJECT)),
            ("headers".into(), table(&headers)),
            ("payload".into(), text("probe")),
        ]);
        let mut features =
            vec![feature("identity", Find::Value(fidelity::ID)), feature("subject", Find::Value(fidelity::SUBJECT))];
        features.extend(fidelity::typed_features());
        Probe { input, features, extras_in: fidelity::EXTRA }
    }

    fn lossy_note(&self) -> &'static str {
        "the component decides what it carries"
    }

    fn lost_note(&self, find: Find) -> Option<&'static str> {
        let _ = find;
        Some("the component decides what it carries")
    }

    fn outage_note(&self) -> &'static str {
        "a transient result of a send during which the component called host.target-unavailable"
    }
}
