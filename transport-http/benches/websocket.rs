//! AMQP over WebSockets: ironbus's own WebSocket stream against tungstenite (what axum's `ws`
//! feature is built on) used the way the AMQP transport would have to use it, as a byte stream.
//! In memory, no sockets: what each costs per message on the CPU and the heap.
//!
//! - `read`: the client's masked binary messages of SIZE bytes, read as a byte stream into a
//!   64 KiB buffer (tungstenite: each message received whole, then copied into that buffer);
//! - `write`: the server's writes of SIZE bytes (tungstenite: each copied into an owned message);
//! - `held`: heap bytes one connection keeps once a message has gone each way.
//!
//! Prints one JSON line per (implementation, direction, size): nanoseconds per message (the
//! fastest of ROUNDS rounds: the machine is shared, the minimum is the least disturbed) and heap
//! bytes allocated per message.
//!
//! `cargo bench -p ironbus-transport-http --bench websocket [-- --messages N --rounds R]`

#![allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]
#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use cap::Cap;
use futures_util::{SinkExt, StreamExt};
use ironbus_transport_http::websocket::WebSocketStream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;

#[global_allocator]
static ALLOCATOR: Cap<std::alloc::System> = Cap::new(std::alloc::System, usize::MAX);

/// What the client sent, to be read; what the server writes goes nowhere.
struct Wire {
    input: Bytes,
}

impl AsyncRead for Wire {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = buf.remaining().min(self.input.len());
        let chunk = self.input.split_to(n);
        buf.put_slice(&chunk);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Wire {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A client's frame: FIN, `opcode`, masked with a fixed key.
fn client_frame(out: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    out.push(0x80 | opcode);
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n <= 0xffff => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
}

/// `messages` binary messages of `size` bytes, then a Close.
fn client_bytes(messages: usize, size: usize) -> Bytes {
    let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut out = Vec::with_capacity(messages * (size + 14) + 8);
    for _ in 0..messages {
        client_frame(&mut out, 0x2, &payload);
    }
    client_frame(&mut out, 0x8, &1000u16.to_be_bytes());
    out.into()
}

/// tungstenite limited as the AMQP transport would need (a message no larger than a frame the
/// transport accepts), with its default 128 KiB buffers or with small ones.
fn tungstenite_config(small: bool) -> WebSocketConfig {
    let config =
        WebSocketConfig::default().max_message_size(Some(1 << 20)).max_frame_size(Some(1 << 20));
    if small {
        config.read_buffer_size(4096).write_buffer_size(0)
    } else {
        config
    }
}

async fn tungstenite(wire: Wire, small: bool) -> tokio_tungstenite::WebSocketStream<Wire> {
    tokio_tungstenite::WebSocketStream::from_raw_socket(
        wire,
        Role::Server,
        Some(tungstenite_config(small)),
    )
    .await
}

/// A loopback TCP connection whose client end writes `input` (in 64 KiB writes, as a client's
/// socket would deliver it) and then closes; the server's end.
async fn loopback(input: Bytes) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut client = TcpStream::connect(addr).await.expect("connect");
        for chunk in input.chunks(64 * 1024) {
            if client.write_all(chunk).await.is_err() {
                return;
            }
        }
        // The server answers the Close; read until it hangs up.
        let mut sink = [0u8; 1024];
        while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
    });
    listener.accept().await.expect("accept").0
}

/// Reads everything the client sent; returns the payload bytes seen.
async fn read_ironbus<S: AsyncRead + AsyncWrite + Unpin>(inner: S) -> usize {
    let mut ws = WebSocketStream::new(inner).await;
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0;
    loop {
        match ws.read(&mut buf).await {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
}

async fn read_tungstenite<S: AsyncRead + AsyncWrite + Unpin>(
    inner: S,
    config: WebSocketConfig,
) -> usize {
    let mut ws =
        tokio_tungstenite::WebSocketStream::from_raw_socket(inner, Role::Server, Some(config))
            .await;
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0;
    while let Some(Ok(message)) = ws.next().await {
        if let Message::Binary(payload) = message {
            // The byte stream the AMQP transport reads from: the payload copied into its buffer.
            for chunk in payload.chunks(buf.len()) {
                buf[..chunk.len()].copy_from_slice(chunk);
                total += chunk.len();
            }
        }
    }
    total
}

async fn write_ironbus(messages: usize, size: usize) -> usize {
    let payload = vec![7u8; size];
    let mut ws = WebSocketStream::new(Wire { input: Bytes::new() }).await;
    for _ in 0..messages {
        let _ = ws.write_all(&payload).await;
    }
    let _ = ws.flush().await;
    messages * size
}

async fn write_tungstenite(messages: usize, size: usize, small: bool) -> usize {
    let payload = vec![7u8; size];
    let mut ws = tungstenite(Wire { input: Bytes::new() }, small).await;
    for _ in 0..messages {
        // The transport's writes are borrowed slices: a message owns its payload.
        let _ = ws.feed(Message::Binary(Bytes::copy_from_slice(&payload))).await;
    }
    let _ = ws.flush().await;
    messages * size
}

/// Heap bytes one connection holds after a message each way.
async fn held_ironbus() -> usize {
    let before = ALLOCATOR.allocated();
    let mut ws = Box::new(WebSocketStream::new(Wire { input: client_bytes(1, 1024) }).await);
    let mut buf = [0u8; 2048];
    let _ = ws.read(&mut buf).await;
    let _ = ws.write_all(&buf[..1024]).await;
    let _ = ws.flush().await;
    let held = ALLOCATOR.allocated() - before;
    drop(ws);
    held
}

async fn held_tungstenite(small: bool) -> usize {
    let before = ALLOCATOR.allocated();
    let mut ws = Box::new(tungstenite(Wire { input: client_bytes(1, 1024) }, small).await);
    let _ = ws.next().await;
    let _ = ws.send(Message::Binary(Bytes::from(vec![7u8; 1024]))).await;
    let held = ALLOCATOR.allocated() - before;
    drop(ws);
    held
}

fn main() {
    let mut messages = 20_000usize;
    let mut rounds = 5usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{arg} needs a number"))
        };
        match arg.as_str() {
            "--messages" => messages = value(),
            "--rounds" => rounds = value(),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    for size in [200usize, 1024, 16 * 1024] {
        let input = client_bytes(messages, size);
        for (name, direction) in [
            ("ironbus", "read"),
            ("tungstenite", "read"),
            ("tungstenite-small", "read"),
            ("ironbus", "read-tcp"),
            ("tungstenite", "read-tcp"),
            ("tungstenite-small", "read-tcp"),
            ("ironbus", "write"),
            ("tungstenite", "write"),
            ("tungstenite-small", "write"),
        ] {
            let small = name == "tungstenite-small";
            let mut best = f64::MAX;
            let mut heap = 0;
            for _ in 0..rounds {
                let input = input.clone();
                let tcp = if direction == "read-tcp" {
                    Some(runtime.block_on(loopback(input.clone())))
                } else {
                    None
                };
                let allocated = ALLOCATOR.total_allocated();
                let start = Instant::now();
                let bytes = runtime.block_on(async move {
                    match (name, direction, tcp) {
                        ("ironbus", "write", _) => write_ironbus(messages, size).await,
                        (_, "write", _) => write_tungstenite(messages, size, small).await,
                        ("ironbus", _, Some(tcp)) => read_ironbus(tcp).await,
                        ("ironbus", _, None) => read_ironbus(Wire { input }).await,
                        (_, _, Some(tcp)) => read_tungstenite(tcp, tungstenite_config(small)).await,
                        (_, _, None) => {
                            read_tungstenite(Wire { input }, tungstenite_config(small)).await
                        }
                    }
                });
                let elapsed = start.elapsed().as_nanos() as f64;
                heap = ALLOCATOR.total_allocated() - allocated;
                assert_eq!(bytes, messages * size, "{name} {direction} lost payload");
                best = best.min(elapsed / messages as f64);
            }
            println!(
                "{{\"impl\":\"{name}\",\"direction\":\"{direction}\",\"size\":{size},\"ns_per_message\":{best:.0},\"heap_bytes_per_message\":{:.1}}}",
                heap as f64 / messages as f64
            );
        }
    }
    let held = runtime.block_on(async {
        [
            ("ironbus", held_ironbus().await),
            ("tungstenite", held_tungstenite(false).await),
            ("tungstenite-small", held_tungstenite(true).await),
        ]
    });
    for (name, bytes) in held {
        println!(
            "{{\"impl\":\"{name}\",\"direction\":\"held\",\"heap_bytes_per_connection\":{bytes}}}"
        );
    }
}
