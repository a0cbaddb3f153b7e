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
}

impl Default for ClosedPort {
    fn default() -> Self {
        Self::new()
    }
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
