//! A TCP forwarder between one node and PostgreSQL, with a switch: the `cutoff` scenario cuts a
//! node off from its database (not from its clients or the other nodes) and heals it again.
//!
//! The forwarder listens on a loopback port of its own; each connection it accepts gets a
//! connection to the upstream address and two threads copying bytes, one each way. [`Proxy::cut`]
//! shuts down every connection it forwards (both sides see the connection end) and, until
//! [`Proxy::heal`], treats new connections as its [`Cut`] mode says: closed at once, or accepted
//! and held without a byte read or written (a black hole: the client waits for its own
//! time-outs). Healing closes the held ones; new connections are forwarded again.
//!
//! Invariant: dropping the proxy stops its listener and ends every connection it holds.

use std::{
    io::{self, Read, Write},
    net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, PoisonError,
    },
    thread,
    time::Duration,
};

use anyhow::{Context, Result};

/// What a cut does to new connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// Closed as soon as accepted: the client hears at once that the server is gone.
    Refuse,
    /// Accepted and held, silent: the client hears nothing until its own time-out.
    BlackHole,
}

impl Cut {
    pub(super) fn parse(text: &str) -> Option<Cut> {
        match text {
            "refuse" => Some(Cut::Refuse),
            "black-hole" => Some(Cut::BlackHole),
            _ => None,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Cut::Refuse => "refuse",
            Cut::BlackHole => "black-hole",
        }
    }
}

/// What the listener and the copying threads share.
#[derive(Debug, Default)]
struct Switch {
    /// `Some` while cut.
    cut: Mutex<Option<Cut>>,
    /// Every socket in use (forwarded both ways, or held in a black hole), to shut down.
    sockets: Mutex<Vec<TcpStream>>,
    stopped: AtomicBool,
}

impl Switch {
    fn cut(&self) -> Option<Cut> {
        *self.cut.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn keep(&self, socket: &TcpStream) -> io::Result<()> {
        let clone = socket.try_clone()?;
        self.sockets.lock().unwrap_or_else(PoisonError::into_inner).push(clone);
        Ok(())
    }

    /// Shuts every socket in use down, and forgets them.
    fn drop_all(&self) {
        let sockets =
            std::mem::take(&mut *self.sockets.lock().unwrap_or_else(PoisonError::into_inner));
        for socket in sockets {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// A running forwarder; stopped when dropped.
#[derive(Debug)]
pub(super) struct Proxy {
    addr: SocketAddr,
    switch: Arc<Switch>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub(super) fn start(upstream: SocketAddr) -> Result<Proxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding a proxy")?;
        let addr = listener.local_addr().context("reading the proxy's address")?;
        listener.set_nonblocking(true).context("making the proxy's listener non-blocking")?;
        let switch = Arc::new(Switch::default());
        let shared = Arc::clone(&switch);
        thread::Builder::new()
            .name(format!("proxy-{}", addr.port()))
            .spawn(move || accept(&listener, upstream, &shared))
            .context("starting the proxy's thread")?;
        Ok(Proxy { addr, switch })
    }

    /// Where the node connects.
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Ends every forwarded connection; new ones get `mode` until [`Proxy::heal`].
    pub(super) fn cut(&self, mode: Cut) {
        *self.switch.cut.lock().unwrap_or_else(PoisonError::into_inner) = Some(mode);
        self.switch.drop_all();
    }

    /// Closes the connections held in a black hole; new connections are forwarded again.
    pub(super) fn heal(&self) {
        let mut cut = self.switch.cut.lock().unwrap_or_else(PoisonError::into_inner);
        self.switch.drop_all();
        *cut = None;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.switch.stopped.store(true, Ordering::SeqCst);
        self.switch.drop_all();
    }
}

fn accept(listener: &TcpListener, upstream: SocketAddr, switch: &Arc<Switch>) {
    while !switch.stopped.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(_) => {
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let _ = client.set_nonblocking(false);
        match switch.cut() {
            Some(Cut::Refuse) => drop(client),
            Some(Cut::BlackHole) => {
                let _ = switch.keep(&client);
            }
            None => {
                let switch = Arc::clone(switch);
                let _ = thread::Builder::new()
                    .name("proxy-connection".to_owned())
                    .spawn(move || forward(client, upstream, &switch));
            }
        }
    }
}

/// Connects `client` to `upstream` and copies both ways until either side ends.
fn forward(client: TcpStream, upstream: SocketAddr, switch: &Switch) {
    let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5)) else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    if switch.keep(&client).is_err() || switch.keep(&server).is_err() {
        return;
    }
    // A cut between the check in `accept` and here must not leave this connection forwarding.
    if switch.cut().is_some() {
        let _ = (client.shutdown(Shutdown::Both), server.shutdown(Shutdown::Both));
        return;
    }
    let (Ok(client_reader), Ok(server_reader)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let back = thread::Builder::new()
        .name("proxy-back".to_owned())
        .spawn(move || copy(server_reader, client));
    copy(client_reader, server);
    if let Ok(back) = back {
        let _ = back.join();
    }
}

/// Copies until `from` ends or fails, then shuts both down.
fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = (from.shutdown(Shutdown::Both), to.shutdown(Shutdown::Both));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a free loopback port.
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                thread::spawn(move || {
                    let reader = stream.try_clone().unwrap();
                    copy(reader, stream);
                });
            }
        });
        addr
    }

    fn round_trip(addr: SocketAddr) -> io::Result<Vec<u8>> {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_millis(500)))?;
        stream.write_all(b"ping")?;
        let mut answer = [0u8; 4];
        stream.read_exact(&mut answer)?;
        Ok(answer.to_vec())
    }

    #[test]
    fn a_cut_ends_connections_and_a_heal_forwards_again() {
        let proxy = Proxy::start(echo()).unwrap();
        assert_eq!(round_trip(proxy.addr()).unwrap(), b"ping");
        let mut open = TcpStream::connect(proxy.addr()).unwrap();
        open.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        open.write_all(b"ping").unwrap();
        let mut answer = [0u8; 4];
        open.read_exact(&mut answer).unwrap();
        thread::sleep(Duration::from_millis(50));

        for mode in [Cut::Refuse, Cut::BlackHole] {
            proxy.cut(mode);
            assert!(round_trip(proxy.addr()).is_err(), "{mode:?}");
            proxy.heal();
            assert_eq!(round_trip(proxy.addr()).unwrap(), b"ping", "{mode:?}");
        }
        assert!(matches!(open.read(&mut answer), Ok(0) | Err(_)), "the first cut ended it");
    }

    #[test]
    fn cut_modes_parse_by_name() {
        for mode in [Cut::Refuse, Cut::BlackHole] {
            assert_eq!(Cut::parse(mode.name()), Some(mode));
        }
        assert_eq!(Cut::parse("drop"), None);
    }
}
