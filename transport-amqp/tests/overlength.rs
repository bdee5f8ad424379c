//! Values whose declared length or count is far larger than the frame carrying them close the
//! connection cleanly, and cost the broker no more memory than the frame itself — before
//! authentication (in SASL frames and the first Open) and after it.
//!
//! A capped global allocator limits the whole process (broker and test client share it) while a
//! hostile frame is handled, so this file holds one test: nothing else allocates meanwhile. An
//! allocation over the limit aborts the test with "memory allocation of N bytes failed".

mod common;

use std::alloc::System;
use std::time::Duration;

use cap::Cap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Counts the process's heap bytes and refuses allocations beyond its limit: while a hostile
/// frame is handled, the limit is what the process held before plus [`BOUND`], so an
/// allocation sized by a declared length fails (and aborts this test) instead of succeeding.
#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// What one hostile frame may make the process allocate beyond what it held before.
const BOUND: usize = 4 * 1024 * 1024;

/// Each variable-width AMQP encoding, declaring far more than it carries: (name, bytes).
fn hostile_values() -> Vec<(&'static str, Vec<u8>)> {
    let huge = 0x4000_0000u32.to_be_bytes(); // 1 GiB
    let all = u32::MAX.to_be_bytes();
    let cat = |parts: &[&[u8]]| parts.concat();
    vec![
        ("str8", vec![0xa1, 0xff, b'a']),
        ("str32", cat(&[&[0xb1], &huge, b"abc"])),
        ("bin8", vec![0xa0, 0xff, 1]),
        ("bin32", cat(&[&[0xb0], &huge, &[1, 2, 3]])),
        ("sym8", vec![0xa3, 0xff, b'x']),
        ("sym32", cat(&[&[0xb3], &huge, b"PLAIN"])),
        ("list8", vec![0xc0, 0xff, 0xff, 0x40]),
        ("list32 size", cat(&[&[0xd0], &huge, &all, &[0x40]])),
        ("list32 count", cat(&[&[0xd0], &8u32.to_be_bytes(), &all, &[0x40; 4]])),
        ("map8", vec![0xc1, 0xff, 0xfe, 0x40, 0x40]),
        ("map32 size", cat(&[&[0xd1], &huge, &all, &[0x40, 0x40]])),
        ("map32 count", cat(&[&[0xd1], &8u32.to_be_bytes(), &all, &[0x40; 4]])),
        ("array8", vec![0xe0, 0xff, 0xff, 0x40]),
        ("array32 size", cat(&[&[0xf0], &huge, &all, &[0x71]])),
        ("array32 of nulls", cat(&[&[0xf0], &5u32.to_be_bytes(), &all, &[0x40]])),
        ("array32 of strings", cat(&[&[0xf0], &9u32.to_be_bytes(), &all, &[0xb1], &huge])),
        ("array32 of longs", cat(&[&[0xf0], &13u32.to_be_bytes(), &all, &[0x81; 9]])),
        ("described in described", {
            let mut v = vec![0x00; 200];
            v.push(0x40);
            v
        }),
        ("nested lists", {
            // list8 [list8 [ … [null] … ]], 80 deep, each size consistent.
            let mut v = vec![0x40];
            for _ in 0..80 {
                let mut outer = vec![0xc0, v.len() as u8 + 1, 0x01];
                outer.extend_from_slice(&v);
                v = outer;
            }
            v
        }),
    ]
}

/// A frame of `kind` (0 AMQP, 1 SASL) carrying described(`code`) list32 [`value`].
fn frame(kind: u8, code: u8, value: &[u8]) -> Vec<u8> {
    let mut body = vec![0x00, 0x53, code, 0xd0];
    body.extend_from_slice(&(4 + value.len() as u32).to_be_bytes());
    body.extend_from_slice(&1u32.to_be_bytes());
    body.extend_from_slice(value);
    let mut frame = (8 + body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&[2, kind, 0, 0]);
    frame.extend_from_slice(&body);
    frame
}

/// A valid Open (container id "t").
fn open_frame() -> Vec<u8> {
    frame(0, 0x10, &[0xa1, 0x01, b't'])
}

/// Sends `prefix`, then `hostile` under an allocation limit of [`BOUND`] above what the
/// process holds, and returns what came back once the server closed the connection.
async fn probe(addr: std::net::SocketAddr, prefix: &[u8], hostile: &[u8], what: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(prefix).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let limited = ALLOCATOR.set_limit(ALLOCATOR.allocated() + BOUND + hostile.len());
    assert!(limited.is_ok(), "the allocation limit could not be set");
    let _ = stream.write_all(hostile).await;
    let received = common::read_to_close(&mut stream, what).await;
    let _ = ALLOCATOR.set_limit(usize::MAX);
    received
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_lengths_beyond_the_frame_cost_nothing_and_close_cleanly() {
    let (addr, _trigger) = common::serve(common::memory_broker().await).await;
    for (name, value) in hostile_values() {
        // Before authentication: a SASL init whose mechanism is the hostile value.
        let sasl = frame(1, 0x41, &value);
        assert!(sasl.len() <= 512, "{name}: SASL frames must fit the 512-byte minimum");
        probe(addr, b"AMQP\x03\x01\x00\x00", &sasl, name).await;

        // Before authentication: the first Open, its container id the hostile value.
        probe(addr, b"AMQP\x00\x01\x00\x00", &frame(0, 0x10, &value), name).await;

        // After the Open: an attach named by the hostile value gets Close with an error.
        let mut prefix = b"AMQP\x00\x01\x00\x00".to_vec();
        prefix.extend_from_slice(&open_frame());
        let received = probe(addr, &prefix, &frame(0, 0x12, &value), name).await;
        assert!(common::has_close_with_error(&received), "attach {name}: got {received:02x?}");
    }

    // A frame of nested descriptors, 500,000 deep: a recursive decoder overflows its stack.
    let mut prefix = b"AMQP\x00\x01\x00\x00".to_vec();
    prefix.extend_from_slice(&open_frame());
    let mut deep = vec![0x00; 500_000];
    deep.push(0x40);
    let received = probe(addr, &prefix, &frame(0, 0x12, &deep), "deep").await;
    assert!(common::has_close_with_error(&received), "deep descriptors: got {received:02x?}");

    // The broker still serves a well-behaved client.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
    stream.write_all(&open_frame()).await.unwrap();
    let mut header = [0u8; 8];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut header))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&header, b"AMQP\x00\x01\x00\x00");
}
