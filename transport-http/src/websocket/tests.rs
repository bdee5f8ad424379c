use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;

const OP_CONTINUATION: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const OP_PONG: u8 = 0xA;

const CLOSE_NORMAL: u16 = 1000;
const CLOSE_PROTOCOL_ERROR: u16 = 1002;
const CLOSE_UNSUPPORTED_DATA: u16 = 1003;
const CLOSE_MESSAGE_TOO_BIG: u16 = 1009;

/// A client frame: masked, with `fin` and `opcode`.
fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![if fin { 0x80 } else { 0 } | opcode];
    match payload.len() {
        len @ 0..=125 => out.push(0x80 | len as u8),
        len @ 126..=0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

/// A server frame as the client reads it: (fin, opcode, payload).
async fn read_server_frame(client: &mut DuplexStream) -> (bool, u8, Vec<u8>) {
    let mut head = [0u8; 2];
    tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut head))
        .await
        .expect("a frame within 5 s")
        .unwrap();
    assert_eq!(head[1] & 0x80, 0, "server frames are not masked");
    let len = match head[1] & 0x7F {
        126 => u64::from(client.read_u16().await.unwrap()),
        127 => client.read_u64().await.unwrap(),
        len => u64::from(len),
    };
    let mut payload = vec![0u8; len as usize];
    client.read_exact(&mut payload).await.unwrap();
    (head[0] & 0x80 != 0, head[0] & 0x0F, payload)
}

async fn pair() -> (DuplexStream, WebSocketStream<DuplexStream>) {
    let (client, server) = tokio::io::duplex(1 << 20);
    (client, WebSocketStream::new(server).await)
}

async fn read_exactly(server: &mut WebSocketStream<DuplexStream>, n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    tokio::time::timeout(Duration::from_secs(5), server.read_exact(&mut got))
        .await
        .expect("the bytes arrive within 5 s")
        .unwrap();
    got
}

#[test]
fn the_accept_key_is_rfc_6455s() {
    // The example of RFC 6455 §1.3.
    assert_eq!(accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

#[tokio::test]
async fn binary_payload_reads_as_one_byte_stream_across_frames_and_fragments() {
    let (mut client, mut server) = pair().await;
    let big: Vec<u8> = (0..70_000u32).map(|i| (i % 253) as u8).collect();
    let mut wire = client_frame(true, OP_BINARY, b"AMQP");
    // A message in three fragments, one of them empty, with a ping between them.
    wire.extend(client_frame(false, OP_BINARY, b"\x00\x01"));
    wire.extend(client_frame(false, OP_CONTINUATION, b""));
    wire.extend(client_frame(true, OP_PING, b"are you there"));
    wire.extend(client_frame(true, OP_CONTINUATION, b"\x00\x00"));
    // A 16-bit and a 64-bit length.
    wire.extend(client_frame(true, OP_BINARY, &big[..300]));
    wire.extend(client_frame(true, OP_BINARY, &big[300..]));
    // Byte by byte for the first part, so that headers and payload arrive split anywhere.
    for byte in &wire[..40] {
        client.write_all(&[*byte]).await.unwrap();
    }
    client.write_all(&wire[40..]).await.unwrap();

    let mut expected = b"AMQP\x00\x01\x00\x00".to_vec();
    expected.extend_from_slice(&big);
    assert_eq!(read_exactly(&mut server, expected.len()).await, expected);
    // The ping was answered with its payload.
    assert_eq!(read_server_frame(&mut client).await, (true, OP_PONG, b"are you there".to_vec()));
}

#[tokio::test]
async fn writes_go_out_as_binary_frames_of_at_most_64_kib() {
    let (mut client, mut server) = pair().await;
    let data: Vec<u8> = (0..150_000u32).map(|i| (i % 241) as u8).collect();
    server.write_all(&data).await.unwrap();
    server.flush().await.unwrap();
    let mut got = Vec::new();
    while got.len() < data.len() {
        let (fin, opcode, payload) = read_server_frame(&mut client).await;
        assert!(fin);
        assert_eq!(opcode, OP_BINARY);
        assert!(payload.len() <= MAX_OUT_MESSAGE, "{} bytes in one frame", payload.len());
        got.extend(payload);
    }
    assert_eq!(got, data);
}

#[tokio::test]
async fn a_close_is_answered_with_a_close_and_ends_the_stream() {
    let (mut client, mut server) = pair().await;
    client.write_all(&client_frame(true, OP_BINARY, b"last")).await.unwrap();
    client.write_all(&client_frame(true, OP_CLOSE, &1001u16.to_be_bytes())).await.unwrap();
    let mut all = Vec::new();
    server.read_to_end(&mut all).await.unwrap();
    assert_eq!(all, b"last");
    assert_eq!(
        read_server_frame(&mut client).await,
        (true, OP_CLOSE, 1001u16.to_be_bytes().to_vec())
    );
    assert!(server.write_all(b"more").await.is_err(), "nothing is written after the close");
}

#[tokio::test]
async fn shutting_down_sends_a_normal_close() {
    let (mut client, mut server) = pair().await;
    server.write_all(b"bye").await.unwrap();
    server.shutdown().await.unwrap();
    assert_eq!(read_server_frame(&mut client).await, (true, OP_BINARY, b"bye".to_vec()));
    assert_eq!(
        read_server_frame(&mut client).await,
        (true, OP_CLOSE, CLOSE_NORMAL.to_be_bytes().to_vec())
    );
}

/// Each bad frame ends the stream with an error, after a Close with `code`.
#[tokio::test]
async fn protocol_errors_end_the_stream_with_a_close_that_says_why() {
    let unmasked = {
        let mut frame = vec![0x80 | OP_BINARY, 3];
        frame.extend_from_slice(b"abc");
        frame
    };
    // A control frame's payload is at most 125 bytes.
    let long_ping = client_frame(true, OP_PING, &[0u8; 126]);
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("a text frame", client_frame(true, OP_TEXT, b"hello"), CLOSE_UNSUPPORTED_DATA),
        ("an unmasked frame", unmasked, CLOSE_PROTOCOL_ERROR),
        (
            "reserved bits",
            {
                let mut frame = client_frame(true, OP_BINARY, b"x");
                frame[0] |= 0x40;
                frame
            },
            CLOSE_PROTOCOL_ERROR,
        ),
        (
            "a continuation without a start",
            client_frame(true, OP_CONTINUATION, b"x"),
            CLOSE_PROTOCOL_ERROR,
        ),
        ("a fragmented ping", client_frame(false, OP_PING, b"x"), CLOSE_PROTOCOL_ERROR),
        ("a long control frame", long_ping, CLOSE_PROTOCOL_ERROR),
        ("an unknown opcode", client_frame(true, 0x3, b"x"), CLOSE_PROTOCOL_ERROR),
        (
            "a new message inside a fragmented one",
            {
                let mut wire = client_frame(false, OP_BINARY, b"a");
                wire.extend(client_frame(true, OP_BINARY, b"b"));
                wire
            },
            CLOSE_PROTOCOL_ERROR,
        ),
    ];
    for (what, wire, code) in cases {
        let (mut client, mut server) = pair().await;
        client.write_all(&wire).await.unwrap();
        let mut sink = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), server.read_to_end(&mut sink))
            .await
            .unwrap_or_else(|_| panic!("{what}: the read never ended"));
        let error = read.expect_err(what);
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{what}");
        let (_, opcode, payload) = read_server_frame(&mut client).await;
        assert_eq!(opcode, OP_CLOSE, "{what}");
        assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), code, "{what}");
    }
}

#[tokio::test]
async fn a_frame_longer_than_the_limit_ends_the_stream_before_its_bytes_arrive() {
    for declared in [MAX_MESSAGE as u64 + 1, 1u64 << 62] {
        let (mut client, mut server) = pair().await;
        let mut header = vec![0x80 | OP_BINARY, 0x80 | 127];
        header.extend_from_slice(&declared.to_be_bytes());
        header.extend_from_slice(&[0, 0, 0, 0]);
        header.extend_from_slice(b"abcd");
        client.write_all(&header).await.unwrap();
        let mut sink = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), server.read_to_end(&mut sink))
            .await
            .expect("refused at once, not awaited");
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::InvalidData, "{declared}");
        assert!(sink.is_empty(), "{declared}");
        let (_, opcode, payload) = read_server_frame(&mut client).await;
        assert_eq!(opcode, OP_CLOSE);
        assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), CLOSE_MESSAGE_TOO_BIG);
    }
}

#[tokio::test]
async fn the_end_of_the_connection_between_messages_is_the_end_of_the_stream() {
    let (mut client, mut server) = pair().await;
    client.write_all(&client_frame(true, OP_BINARY, b"ok")).await.unwrap();
    drop(client);
    let mut all = Vec::new();
    server.read_to_end(&mut all).await.unwrap();
    assert_eq!(all, b"ok");
}

fn upgrade_request(protocol: Option<&str>, key: &str) -> Request {
    let mut builder = Request::builder()
        .method(Method::GET)
        .uri(PATH)
        .header(header::UPGRADE, "websocket")
        .header(header::CONNECTION, "keep-alive, Upgrade")
        .header(header::SEC_WEBSOCKET_VERSION, "13")
        .header(header::SEC_WEBSOCKET_KEY, key);
    if let Some(protocol) = protocol {
        builder = builder.header(header::SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    builder.body(axum::body::Body::empty()).unwrap()
}

#[test]
fn an_upgrade_needs_the_amqp_subprotocol_and_a_valid_key() {
    let key = "dGhlIHNhbXBsZSBub25jZQ==";
    assert_eq!(check(&upgrade_request(Some("AMQPWSB10"), key)).unwrap(), key);
    assert!(check(&upgrade_request(Some("chat, AMQPWSB10"), key)).is_ok());
    let refused = check(&upgrade_request(None, key)).unwrap_err();
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(refused.detail.contains("AMQPWSB10"), "{}", refused.detail);
    let bad_key = check(&upgrade_request(Some("AMQPWSB10"), "short")).unwrap_err();
    assert_eq!(bad_key.status, StatusCode::BAD_REQUEST);
    let mut plain = upgrade_request(Some("AMQPWSB10"), key);
    plain.headers_mut().remove(header::UPGRADE);
    assert_eq!(check(&plain).unwrap_err().status, StatusCode::BAD_REQUEST);
    let mut old = upgrade_request(Some("AMQPWSB10"), key);
    old.headers_mut().insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("8"));
    assert_eq!(check(&old).unwrap_err().status, StatusCode::UPGRADE_REQUIRED);
    let mut post = upgrade_request(Some("AMQPWSB10"), key);
    *post.method_mut() = Method::POST;
    assert_eq!(check(&post).unwrap_err().status, StatusCode::METHOD_NOT_ALLOWED);
}
