//! A client that stops reading cannot make the broker buffer without bound: deliveries pause
//! at half the connection's write-buffer limit, a socket that takes no byte for the stall
//! time-out ends the connection, and a client that keeps asking for answers it does not read
//! is closed at the limit with `amqp:resource-limit-exceeded` ("the client is not reading").

mod common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ironbus_core::{Message, QueueDescription};
use ironbus_transport_amqp::{AmqpOptions, AmqpStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use common::raw;

const LIMIT: usize = 256 * 1024;
const BODY: usize = 64 * 1024;
const MESSAGES: usize = 160;

/// A socket whose receive buffer is small, so the kernel holds little of what the broker
/// writes and the broker's own buffering shows.
async fn connect(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(addr).await.unwrap()
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
}

/// Reads until the server closes (or resets) the connection; returns what was read.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return all,
            Ok(Ok(n)) => all.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the server kept the connection open after {} bytes", all.len()),
        }
    }
}

fn assert_no_buffer_left(stats: &AmqpStats) {
    assert_eq!(stats.write_buffered.load(Ordering::SeqCst), 0, "the closed connection's bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_with_large_credit_that_never_reads_is_paused_then_closed() {
    let broker = common::memory_broker().await;
    broker.create_queue("q", QueueDescription::default()).await.unwrap();
    for _ in 0..MESSAGES / 10 {
        let batch = (0..10).map(|_| Message::new(vec![7u8; BODY])).collect();
        broker.send("q", batch).await.unwrap();
    }
    let options = AmqpOptions {
        max_write_buffer: LIMIT,
        write_stall_timeout: Duration::from_millis(300),
        ..AmqpOptions::default()
    };
    let (addr, _trigger, stats) = common::serve_with(broker, options).await;

    let mut stream = connect(addr).await;
    // Everything at once, then never a read: SASL PLAIN, open, begin, a receiver on `q` with
    // credit for every message (10 MB).
    let mut hello = raw::SASL_HEADER.to_vec();
    hello.extend(raw::sasl_init());
    hello.extend(raw::AMQP_HEADER);
    hello.extend(raw::open());
    hello.extend(raw::begin());
    hello.extend(raw::attach_receiver("q"));
    hello.extend(raw::flow(Some(0), MESSAGES as u32, false));
    stream.write_all(&hello).await.unwrap();

    wait_until("the connection is closed as a slow reader", || {
        stats.slow_reader_closes.load(Ordering::SeqCst) == 1
    })
    .await;
    let peak = stats.peak_write_buffered.load(Ordering::SeqCst);
    assert!(peak <= LIMIT, "the broker buffered {peak} bytes for the connection, over {LIMIT}");
    assert!(peak >= BODY, "deliveries were written: {peak}");
    wait_until("the connection is gone", || stats.connections.load(Ordering::SeqCst) == 0).await;
    assert_no_buffer_left(&stats);

    // The client finally reads: what the kernel held, then the end of the connection; far
    // less than the 10 MB its credit asked for.
    let read = read_until_closed(&mut stream).await;
    assert!(read.len() < MESSAGES * BODY / 2, "read {} bytes", read.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_asks_for_answers_it_never_reads_is_closed_at_the_limit() {
    let options = AmqpOptions {
        max_write_buffer: LIMIT,
        // Long enough that the limit, not the stall, is what closes the connection.
        write_stall_timeout: Duration::from_secs(60),
        ..AmqpOptions::default()
    };
    let (addr, _trigger, stats) = common::serve_with(common::memory_broker().await, options).await;
    let mut stream = connect(addr).await;
    let mut hello = raw::AMQP_HEADER.to_vec();
    hello.extend(raw::open());
    hello.extend(raw::begin());
    stream.write_all(&hello).await.unwrap();
    // Session flows asking for the broker's flow in return (echo), never read: each answer
    // is about 30 bytes the broker has to keep.
    let echo = raw::flow(None, 0, true);
    let burst: Vec<u8> = std::iter::repeat_n(echo, 1000).flatten().collect();
    let mut sent = 0usize;
    while stats.slow_reader_closes.load(Ordering::SeqCst) == 0 {
        assert!(sent < 256 << 20, "no close after {sent} bytes of requests");
        match tokio::time::timeout(Duration::from_secs(5), stream.write_all(&burst)).await {
            Ok(Ok(())) => sent += burst.len(),
            Ok(Err(_)) => break,
            Err(_) => panic!("the broker stopped reading requests after {sent} bytes"),
        }
    }
    wait_until("the connection is closed at the limit", || {
        stats.slow_reader_closes.load(Ordering::SeqCst) == 1
    })
    .await;
    let peak = stats.peak_write_buffered.load(Ordering::SeqCst);
    // One turn (at most 256 frames) may overshoot the limit before it is looked at.
    assert!(peak <= LIMIT + 16 * 1024, "the broker buffered {peak} bytes, limit {LIMIT}");
    assert!(peak > LIMIT, "the limit, not something else, closed it: {peak}");

    // Reading now, the client gets the answers the kernel held, then the Close in place of
    // what the broker had queued.
    let read = read_until_closed(&mut stream).await;
    let text = String::from_utf8_lossy(&read);
    let tail = &read[read.len().saturating_sub(120)..];
    assert!(
        text.contains("amqp:resource-limit-exceeded"),
        "no close condition in the tail of {} bytes: {tail:02x?}",
        read.len()
    );
    assert!(text.contains("the client is not reading"));
    assert!(common::has_close_with_error(&read));
    drop(stream);
    wait_until("the connection is gone", || stats.connections.load(Ordering::SeqCst) == 0).await;
    assert_no_buffer_left(&stats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_with_large_credit_is_paused_and_resumed_not_closed() {
    use fe2o3_amqp::types::messaging::Body;
    use fe2o3_amqp::types::primitives::Value;
    use fe2o3_amqp::{Connection, Receiver, Session};

    let broker = common::memory_broker().await;
    broker.create_queue("q", QueueDescription::default()).await.unwrap();
    for _ in 0..MESSAGES / 10 {
        let batch = (0..10).map(|_| Message::new(vec![7u8; BODY])).collect();
        broker.send("q", batch).await.unwrap();
    }
    let options = AmqpOptions {
        max_write_buffer: LIMIT,
        write_stall_timeout: Duration::from_secs(5),
        ..AmqpOptions::default()
    };
    let (addr, _trigger, stats) = common::serve_with(broker.clone(), options).await;
    let url = format!("amqp://RootManageSharedAccessKey:SAS_KEY_VALUE@{addr}");
    let received = tokio::time::timeout(Duration::from_secs(30), async {
        let mut connection = Connection::open("slow", url.as_str()).await.unwrap();
        let mut session = Session::begin(&mut connection).await.unwrap();
        let mut receiver = Receiver::builder()
            .name("slow")
            .source("q")
            .credit_mode(fe2o3_amqp::link::receiver::CreditMode::Manual)
            .attach(&mut session)
            .await
            .unwrap();
        // Credit for all 10 MB at once; the client takes its time over each message.
        receiver.set_credit(MESSAGES as u32).await.unwrap();
        let mut bytes = 0;
        for _ in 0..MESSAGES {
            let delivery = receiver.recv::<Body<Value>>().await.unwrap();
            if let Body::Data(data) = delivery.body() {
                bytes += data.iter().map(|d| d.0.len()).sum::<usize>();
            }
            receiver.accept(&delivery).await.unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        receiver.close().await.unwrap();
        session.end().await.unwrap();
        connection.close().await.unwrap();
        bytes
    })
    .await
    .expect("every message arrives");
    assert_eq!(received, MESSAGES * BODY);
    assert_eq!(stats.slow_reader_closes.load(Ordering::SeqCst), 0);
    let peak = stats.peak_write_buffered.load(Ordering::SeqCst);
    // (About 160 KB here: deliveries paused at half the limit and resumed.)
    assert!(peak <= LIMIT, "the broker buffered {peak} bytes, over {LIMIT}");
    assert_eq!(broker.get_queue_runtime("q").await.unwrap().active_message_count, 0);
}
