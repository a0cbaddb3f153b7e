//! Ports without a race: nothing here picks a number, lets it go and hopes
//! it is still free when something else binds it.
//!
//! - The daemon's listeners bind port 0 and announce what they got
//!   ([`crate::daemon::Daemon::listener`]).
//! - In-process fakes bind port 0 themselves and keep their listener.
//! - [`ClosedPort`]: a port that refuses connections (a target that is
//!   down), held for as long as the test needs it.
//! - [`broker_port`]: for a private broker, which must be told a number;
//!   its guard starts it again on another one when the port was taken.
//! - [`Held`]: a stopped private broker's ports, kept from every other
//!   process (and from the kernel's choice of a client's local port) until
//!   the broker starts again on them.

use std::net::{Ipv4Addr, SocketAddr};

/// A loopback port bound but not listening: a connection to it is refused
/// at once, and no other process can bind it while this lives.
pub struct ClosedPort {
    _socket: socket2::Socket,
    pub port: u16,
}

impl ClosedPort {
    pub fn new() -> Self {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        socket.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into()).expect("bind 127.0.0.1:0");
        let port = socket.local_addr().ok().and_then(|a| a.as_socket()).map(|a| a.port()).expect("bound port");
        Self { _socket: socket, port }
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The same port, now listening: the target that was down is up, on
    /// the address its clients were given, with no moment in which another
    /// process could take it. Call from inside a tokio runtime.
    pub fn listen(self) -> tokio::net::TcpListener {
        self._socket.listen(128).expect("listen");
        self._socket.set_nonblocking(true).expect("nonblocking");
        let std: std::net::TcpListener = self._socket.into();
        tokio::net::TcpListener::from_std(std).expect("tokio listener")
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        Self::new()
    }
}

/// Ports bound but not listening while a private broker is stopped: a
/// client is refused at once, as by a broker that is down; the kernel
/// gives none of them to a client as its local port, nor to a `bind` on
/// port 0, and a socket without SO_REUSEADDR cannot bind one. So the
/// broker (which binds with SO_REUSEADDR) finds them free when it starts
/// again. CI once saw a restarted
/// RabbitMQ fail to come back on its port.
#[derive(Default)]
pub struct Held {
    _sockets: Vec<socket2::Socket>,
}

impl Held {
    /// Binds each port that can be bound (one still in TIME_WAIT can, with
    /// SO_REUSEADDR); one that another process already took is left out,
    /// and the broker's start then reports it.
    pub fn ports(ports: impl IntoIterator<Item = u16>) -> Self {
        use socket2::{Domain, Socket, Type};
        let bind = |port: u16| {
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
            socket.set_reuse_address(true).ok()?;
            socket.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)).into()).ok()?;
            Some(socket)
        };
        Self { _sockets: ports.into_iter().filter_map(bind).collect() }
    }
}

/// Waits until `child` listens on every one of `ports` (checked every
/// 25 ms in /proc, up to `patience`): whether it does; false as soon as it
/// exits (a broker that lost its port to another process).
pub async fn until_listening(child: &mut std::process::Child, ports: &[u16], patience: std::time::Duration) -> bool {
    let pid = child.id();
    let deadline = tokio::time::Instant::now() + patience;
    while tokio::time::Instant::now() < deadline {
        if ports.iter().all(|p| listens(pid, *p)) {
            return true;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    false
}

/// Kills a private broker, waits for it to exit, and holds its `ports`
/// until it starts again.
pub fn kill_and_hold(mut child: std::process::Child, ports: impl IntoIterator<Item = u16>) -> Held {
    let _ = child.kill();
    let _ = child.wait();
    crate::leftovers::forget(child.id());
    Held::ports(ports)
}

/// A port number for a private broker (Mosquitto, RabbitMQ), which cannot
/// take a bound listener. Free when this returns, but another process may
/// take it before the broker binds: the broker guards check that their own
/// process is the one listening and start again on another port if not.
pub fn broker_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// Whether process `pid` holds a socket listening on TCP `port` (any local
/// address), read from /proc: a broker that lost the race for its port
/// exits or keeps failing, while another process answers on it.
pub fn listens(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st ... inode (the 10th field).
            let (Some(local), Some(state), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9)) else {
                continue;
            };
            let local_port = local.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if *state == "0A" && local_port == Some(port) {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_port_refuses_clients_and_cannot_be_listened_on_until_let_go() {
        // A port picked here can be taken before it is held (the race this
        // module is about: a soak run once met it), so pick until one holds.
        let (port, held) = (0..20)
            .map(|_| {
                let port = broker_port();
                (port, Held::ports([port]))
            })
            .find(|(_, held)| held._sockets.len() == 1)
            .expect("one of 20 free ports could be held");
        let refused = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect_err("nothing listens");
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        // A socket without SO_REUSEADDR cannot bind it (one with it can:
        // that is how the broker takes its port back).
        let other = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
        assert!(other.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)).into()).is_err(), "another socket bound it");
        drop(held);
        std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("free again");
    }
}
