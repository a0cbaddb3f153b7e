//! Transport components (contract 1.2; [`unavailable`] 1.3): a receiver, a sender, or both, for
//! a system ferry has no built-in transport for.
//!
//! ```text
//! use ferry_plugin_sdk::transport::{self, Received, ReceiverInfo, Settlement};
//! use ferry_plugin_sdk::Plugin;
//!
//! struct Queue { url: String }
//! impl Plugin for Queue { /* type Config, fn init */ }
//! impl transport::Receiver for Queue {
//!     fn poll(&self, max: u32, wait_ms: u32) -> Result<Vec<Received>, String> { … }
//!     fn settle(&self, token: &str, settlement: Settlement) -> Result<(), String> { … }
//! }
//! ferry_plugin_sdk::export_transport_receiver!(Queue);
//! ```
//!
//! The host opens each instance with the part's `config` table (the
//! [`Plugin`](crate::Plugin) config and `init`), then calls it one call at a
//! time. The network is reached with [`http`] (or `wasi:sockets`), only to
//! the hosts the config's `allow_hosts` grants.

pub use crate::bindings::transport_receiver::ferry::plugin::transport_types::{
    Envelope, Outbound, Received, ReceiverInfo, SendResult, Settlement,
};

use crate::Plugin;

/// The receiving half (world `transport-receiver`).
pub trait Receiver: Plugin {
    /// What the host needs to know of this receiver, asked once after
    /// `init`: by default, no `extend` calls, and tokens settled only by
    /// the instance that received them.
    fn info(&self) -> ReceiverInfo {
        ReceiverInfo { extend_every_ms: None, settle_anywhere: false }
    }

    /// Up to `max` messages, waiting at most `wait_ms` for the first. An
    /// error is a transient failure of the source: the host backs off.
    fn poll(&self, max: u32, wait_ms: u32) -> Result<Vec<Received>, String>;

    /// Settles one message `poll` returned, by its token.
    fn settle(&self, token: &str, settlement: Settlement) -> Result<(), String>;

    /// Keeps these messages from other consumers (called every
    /// [`ReceiverInfo::extend_every_ms`]).
    fn extend(&self, tokens: &[String]) -> Result<(), String> {
        let _ = tokens;
        Ok(())
    }
}

/// The sending half (world `transport-sender`).
pub trait Sender: Plugin {
    /// Sends a batch: one result per message, in order. The host trusts
    /// it: say `Accepted` only for a message the destination has.
    fn send(&self, batch: Vec<Outbound>) -> Vec<SendResult>;
}

/// Tells the host, from [`Sender::send`], that the target as a whole
/// cannot take messages now: nothing reached it (a refused connection, a
/// timeout) or it said so for everything (503). The `Transient` results of
/// this `send` then spend no replay budget: the host holds the route's
/// messages for the target and probes it until it takes one again. Leave
/// it out for a failure about one message (the host counts those against
/// `max_replay_attempts`).
pub fn unavailable(reason: &str) {
    crate::host_api::target_unavailable(reason);
}

/// An envelope with these parts and no headers.
pub fn envelope(id: impl Into<String>, payload: Vec<u8>) -> Envelope {
    Envelope { id: id.into(), subject: None, headers: Vec::new(), payload, created_at: 0, expires_at: None }
}

/// Outgoing HTTP through `wasi:http` (WebAssembly builds only): the host
/// lets a request through only to a host and port `allow_hosts` names.
#[cfg(target_arch = "wasm32")]
pub mod http {
    use wasi::http::outgoing_handler;
    use wasi::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
    use wasi::io::streams::StreamError;

    /// An answer: the status, the headers (names in lower case) and the
    /// body, read up to the `max_body` the request gave.
    #[derive(Debug, Clone)]
    pub struct Response {
        pub status: u16,
        pub headers: Vec<(String, String)>,
        pub body: Vec<u8>,
    }

    impl Response {
        /// The first value of header `name` (lower case).
        pub fn header(&self, name: &str) -> Option<&str> {
            self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
        }
    }

    /// Sends `method url` with `headers` and `body`, and reads the answer,
    /// at most `max_body` bytes of it (more is an error).
    pub fn request(
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        max_body: usize,
    ) -> Result<Response, String> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| format!("{url:?} is not an http(s) URL"))?;
        let scheme = match scheme {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            other => return Err(format!("{other:?} is not http or https")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        // Every resource call crosses into the host, so a request makes as
        // few as it can: the headers in one list, no method set for GET
        // (the default), and no body resource for an empty body.
        let mut entries: Vec<(String, Vec<u8>)> =
            headers.iter().map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec())).collect();
        // A declared length, not a chunked body: a server that answers
        // before reading a chunked body to its end may close the
        // connection under the request (hyper's "incomplete message").
        let bodiless = matches!(method, "GET" | "HEAD" | "DELETE" | "OPTIONS");
        let declares = headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-length"));
        if !declares && (!body.is_empty() || !bodiless) {
            entries.push(("content-length".to_owned(), body.len().to_string().into_bytes()));
        }
        let fields = Fields::from_list(&entries).map_err(|e| format!("headers: {e:?}"))?;
        let request = OutgoingRequest::new(fields);
        let method = match method {
            "GET" => None,
            "POST" => Some(Method::Post),
            "PUT" => Some(Method::Put),
            "DELETE" => Some(Method::Delete),
            "HEAD" => Some(Method::Head),
            "PATCH" => Some(Method::Patch),
            other => Some(Method::Other(other.to_owned())),
        };
        if let Some(method) = method {
            request.set_method(&method).map_err(|()| "bad method".to_owned())?;
        }
        request.set_scheme(Some(&scheme)).map_err(|()| "bad scheme".to_owned())?;
        request.set_authority(Some(authority)).map_err(|()| format!("bad authority {authority:?}"))?;
        request.set_path_with_query(Some(path)).map_err(|()| format!("bad path {path:?}"))?;
        let write = |outgoing: OutgoingBody| -> Result<(), String> {
            {
                let stream = outgoing.write().map_err(|()| "no request body stream".to_owned())?;
                for chunk in body.chunks(4096) {
                    stream.blocking_write_and_flush(chunk).map_err(|e| format!("writing the body: {e:?}"))?;
                }
            }
            OutgoingBody::finish(outgoing, None).map_err(|e| format!("{e:?}"))
        };
        // A body of one write is written before the request goes: the host
        // buffers one write, and the head and body then leave together.
        // A longer one is streamed once the request is under way.
        let send = |request| outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"));
        let future = if body.is_empty() {
            send(request)?
        } else {
            let outgoing = request.body().map_err(|()| "no request body".to_owned())?;
            if body.len() <= 4096 {
                write(outgoing)?;
                send(request)?
            } else {
                let future = send(request)?;
                write(outgoing)?;
                future
            }
        };
        future.subscribe().block();
        let response = match future.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(e))) => return Err(format!("{e:?}")),
            Some(Err(())) | None => return Err("no answer".to_owned()),
        };
        let status = response.status();
        let headers: Vec<(String, String)> = response
            .headers()
            .entries()
            .into_iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), String::from_utf8_lossy(&v).into_owned()))
            .collect();
        // With a declared length, the body is read to it, not to one more
        // read that says the stream ended.
        let declared: Option<usize> =
            headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.trim().parse().ok());
        let incoming = response.consume().map_err(|()| "no answer body".to_owned())?;
        let mut body = Vec::new();
        if declared != Some(0) {
            let stream = incoming.stream().map_err(|()| "no answer body stream".to_owned())?;
            while declared.is_none_or(|n| body.len() < n) {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => {
                        body.extend_from_slice(&chunk);
                        if body.len() > max_body {
                            return Err(format!("the answer is over {max_body} bytes"));
                        }
                    }
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(e)) => {
                        return Err(format!("reading the answer: {}", e.to_debug_string()));
                    }
                }
            }
        }
        Ok(Response { status, headers, body })
    }
}

/// The glue the `export_transport*!` macros expand to.
#[doc(hidden)]
pub mod __private {
    use std::cell::RefCell;

    use crate::Plugin;

    /// The one value of a transport half in this instance, set by `open`.
    pub struct Half<P>(RefCell<Option<P>>);

    impl<P: Plugin> Default for Half<P> {
        fn default() -> Self {
            Self::new()
        }
    }

    impl<P: Plugin> Half<P> {
        pub const fn new() -> Self {
            Half(RefCell::new(None))
        }

        pub fn open(&self, config_json: &str) -> Result<(), String> {
            *self.0.borrow_mut() = Some(crate::start::<P>(config_json)?);
            Ok(())
        }

        /// Runs `f` on the opened value; a call before `open` is an error.
        pub fn with<R>(&self, f: impl FnOnce(&P) -> Result<R, String>) -> Result<R, String> {
            match self.0.borrow().as_ref() {
                Some(p) => f(p),
                None => Err("called before open".into()),
            }
        }
    }
}

/// The receiver glue, inside a world's bindings module `$world`.
#[doc(hidden)]
#[macro_export]
macro_rules! __transport_receiver {
    ($ty:ty, $($world:tt)*) => {
        ::std::thread_local! {
            static RECEIVER: $crate::transport::__private::Half<$ty> =
                const { $crate::transport::__private::Half::new() };
        }
        impl $($world)*::exports::ferry::plugin::receiver::Guest for Guest {
            fn open(config: ::std::string::String) -> ::std::result::Result<$crate::transport::ReceiverInfo, ::std::string::String> {
                RECEIVER.with(|h| {
                    h.open(&config)?;
                    h.with(|r| Ok($crate::transport::Receiver::info(r)))
                })
            }
            fn poll(max: u32, wait_ms: u32) -> ::std::result::Result<::std::vec::Vec<$crate::transport::Received>, ::std::string::String> {
                RECEIVER.with(|h| h.with(|r| $crate::transport::Receiver::poll(r, max, wait_ms)))
            }
            fn settle(token: ::std::string::String, settlement: $crate::transport::Settlement) -> ::std::result::Result<(), ::std::string::String> {
                RECEIVER.with(|h| h.with(|r| $crate::transport::Receiver::settle(r, &token, settlement)))
            }
            fn extend(tokens: ::std::vec::Vec<::std::string::String>) -> ::std::result::Result<(), ::std::string::String> {
                RECEIVER.with(|h| h.with(|r| $crate::transport::Receiver::extend(r, &tokens)))
            }
        }
    };
}

/// The sender glue, inside a world's bindings module `$world`.
#[doc(hidden)]
#[macro_export]
macro_rules! __transport_sender {
    ($ty:ty, $($world:tt)*) => {
        ::std::thread_local! {
            static SENDER: $crate::transport::__private::Half<$ty> =
                const { $crate::transport::__private::Half::new() };
        }
        impl $($world)*::exports::ferry::plugin::sender::Guest for Guest {
            fn open(config: ::std::string::String) -> ::std::result::Result<(), ::std::string::String> {
                SENDER.with(|h| h.open(&config))
            }
            fn send(batch: ::std::vec::Vec<$crate::transport::Outbound>) -> ::std::vec::Vec<$crate::transport::SendResult> {
                let n = batch.len();
                SENDER.with(|h| h.with(|s| Ok($crate::transport::Sender::send(s, batch)))).unwrap_or_else(|e| {
                    (0..n).map(|_| $crate::transport::SendResult::Permanent(e.clone())).collect()
                })
            }
        }
    };
}

/// Exports a [`transport::Receiver`](crate::transport::Receiver) as the
/// component's `receiver` (world `transport-receiver`).
#[macro_export]
macro_rules! export_transport_receiver {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct Guest;
            $crate::__transport_receiver!($ty, $crate::bindings::transport_receiver);
            $crate::bindings::transport_receiver::export_transport_receiver_world!(Guest);
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn(&$ty, u32) = |r, max| {
            let _ = $crate::transport::Receiver::poll(r, max, 0);
        };
    };
}

/// Exports a [`transport::Sender`](crate::transport::Sender) as the
/// component's `sender` (world `transport-sender`).
#[macro_export]
macro_rules! export_transport_sender {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct Guest;
            $crate::__transport_sender!($ty, $crate::bindings::transport_sender);
            $crate::bindings::transport_sender::export_transport_sender_world!(Guest);
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn(&$ty) = |s| {
            let _ = $crate::transport::Sender::send(s, ::std::vec::Vec::new());
        };
    };
}

/// Exports a receiver and a sender (they may be one type) as one component
/// (world `transport`: the exports of both halves).
#[macro_export]
macro_rules! export_transport {
    ($receiver:ty, $sender:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct Guest;
            $crate::__transport_receiver!($receiver, $crate::bindings::transport_receiver);
            $crate::__transport_sender!($sender, $crate::bindings::transport_sender);
            $crate::bindings::transport_receiver::export_transport_receiver_world!(Guest);
            $crate::bindings::transport_sender::export_transport_sender_world!(Guest);
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: (fn(&$receiver, u32), fn(&$sender)) = (
            |r, max| {
                let _ = $crate::transport::Receiver::poll(r, max, 0);
            },
            |s| {
                let _ = $crate::transport::Sender::send(s, ::std::vec::Vec::new());
            },
        );
    };
}
