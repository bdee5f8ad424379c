//! Compatibility tests for ironbus driven by the `azservicebus` crate 0.25.1 (the unofficial Rust
//! port of the .NET Service Bus SDK), against a real ironbus process over real sockets.
//!
//! These tests are `#[ignore]`d: they need a running broker, which `cargo xtask compat` starts.
//! To run them by hand:
//!
//! ```text
//! ironbus --amqp-addr 127.0.0.1:5800 --config config.json   # config declares queue `rust-q`
//! IRONBUS_CONNECTION_STRING='Endpoint=sb://127.0.0.1:5800;SharedAccessKeyName=...;SharedAccessKey=...;UseDevelopmentEmulator=true' \
//!     cargo test -p ironbus-compat-rust -- --ignored --test-threads 1
//! ```
//!
//! Environment:
//! - `IRONBUS_CONNECTION_STRING` (required): the connection string ironbus prints on start-up.
//! - `IRONBUS_RUST_QUEUE` (optional, default `rust-q`): a queue the broker declares. The tests
//!   expect it empty when they start and leave it empty when they pass. Both tests use it and each
//!   ends by checking that nothing is left, so they must run one at a time (`--test-threads 1`).
//!
//! # How azservicebus is made to talk to a local, plain-TCP broker
//!
//! azservicebus 0.25.1 has no notion of the emulator's `UseDevelopmentEmulator=true`:
//!
//! - It always connects with TLS (`amqps://`) unless built with its `unsecured` cargo feature,
//!   which adds `ServiceBusClient::unsecured()` and switches the scheme to `amqp://`. The crate is
//!   built with `unsecured` + `rustls` (exactly one of `rustls` / `native-tls` must be on, or the
//!   crate exports no `ServiceBusClient` at all).
//! - It drops the port of the connection string's `Endpoint`: `ServiceBusConnection` keeps only
//!   `Url::host_str()` of it (`prepare_fqn_and_credential`, with a "TODO: What about the port?" in
//!   `ServiceBusConnectionStringProperties::parse`), and so does `custom_endpoint_address`. Given
//!   the connection string as is, it would always dial port 5672 (the `amqp://` default).
//!
//! So the tests parse the connection string themselves ([`Target::from_env`]) and build the client
//! with `ServiceBusClient::unsecured().new_from_named_key_credential("host:port", ...)`: that
//! constructor formats its "fully qualified namespace" straight into `amqp://{namespace}`, so a
//! `host:port` namespace keeps the port. The SAS token audience it signs is the namespace URI with
//! the port removed (`amqp://127.0.0.1`), which the broker must accept as a namespace-wide claim;
//! the CBS put-token `name` and the link addresses are `amqp://host:port/<entity>`.
//!
//! Build cost: azservicebus takes `azure_core` with its default features, i.e. `reqwest` with
//! `native-tls`, so this crate links OpenSSL (`openssl-sys` needs `libssl-dev` and `pkg-config`)
//! whatever azservicebus features are chosen; the `rustls` feature only covers its AMQP sockets.
//!
//! The broker may not assign a MessageId to messages sent without one, so every message sent here
//! carries an explicit one.

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use azservicebus::{
    authorization::AzureNamedKeyCredential, core::BasicRetryPolicy, CreateMessageBatchOptions,
    ServiceBusClient, ServiceBusClientOptions, ServiceBusMessage, ServiceBusReceiveMode,
    ServiceBusReceivedMessage, ServiceBusReceiverOptions, ServiceBusSenderOptions,
};

const CONNECTION_STRING_VAR: &str = "IRONBUS_CONNECTION_STRING";
const QUEUE_VAR: &str = "IRONBUS_RUST_QUEUE";
const DEFAULT_QUEUE: &str = "rust-q";

/// How long a receive that must find a message may wait.
const RECEIVE_WAIT: Duration = Duration::from_secs(10);
/// How long a receive that must find nothing waits before it concludes the queue is empty.
const EMPTY_WAIT: Duration = Duration::from_secs(2);
/// Upper bound on a whole test, so that a broker that stops answering fails the test instead of
/// hanging the harness.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Where and as whom to connect, from the environment.
#[derive(Debug)]
struct Target {
    /// `host:port` of the broker's AMQP listener.
    namespace: String,
    key_name: String,
    key: String,
    queue: String,
}

impl Target {
    fn from_env() -> Result<Self> {
        let connection_string = std::env::var(CONNECTION_STRING_VAR).unwrap_or_else(|_| {
            panic!(
                "{CONNECTION_STRING_VAR} is not set: these tests need a running ironbus; \
                 run them with `cargo xtask compat` or set it to the connection string \
                 ironbus prints"
            )
        });
        let queue = std::env::var(QUEUE_VAR)
            .ok()
            .filter(|q| !q.is_empty())
            .unwrap_or_else(|| DEFAULT_QUEUE.to_owned());
        Self::parse(&connection_string, queue)
    }

    /// Parses `Endpoint=sb://host[:port][/];SharedAccessKeyName=..;SharedAccessKey=..[;...]`
    /// (keys case-insensitive, order free, unknown keys ignored).
    fn parse(connection_string: &str, queue: String) -> Result<Self> {
        let (mut endpoint, mut key_name, mut key) = (None, None, None);
        for part in connection_string.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .with_context(|| format!("connection string part without '=': {part:?}"))?;
            match name.trim().to_ascii_lowercase().as_str() {
                "endpoint" => endpoint = Some(value.trim()),
                "sharedaccesskeyname" => key_name = Some(value.trim().to_owned()),
                "sharedaccesskey" => key = Some(value.trim().to_owned()),
                _ => {}
            }
        }
        let endpoint = endpoint.context("connection string has no Endpoint")?;
        let authority = endpoint
            .split_once("://")
            .map_or(endpoint, |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default();
        ensure!(!authority.is_empty(), "Endpoint {endpoint:?} has no host");
        // The emulator convention: no port means the plain-AMQP default.
        let namespace =
            if has_port(authority) { authority.to_owned() } else { format!("{authority}:5672") };
        Ok(Self {
            namespace,
            key_name: key_name.context("connection string has no SharedAccessKeyName")?,
            key: key.context("connection string has no SharedAccessKey")?,
            queue,
        })
    }

    async fn client(&self) -> Result<ServiceBusClient<BasicRetryPolicy>> {
        let credential = AzureNamedKeyCredential::new(&self.key_name, &self.key);
        ServiceBusClient::unsecured()
            .new_from_named_key_credential(
                self.namespace.clone(),
                credential,
                ServiceBusClientOptions::default(),
            )
            .await
            .with_context(|| format!("connecting to amqp://{}", self.namespace))
    }
}

fn has_port(authority: &str) -> bool {
    // `[::1]:5672` or `host:5672`; a bare IPv6 literal is bracketed, so its colons are inside.
    let after_host = authority.rsplit_once(']').map_or(authority, |(_, rest)| rest);
    after_host.contains(':')
}

fn message(id: &str, body: &str) -> Result<ServiceBusMessage> {
    let mut message = ServiceBusMessage::new(body);
    message.set_message_id(id.to_owned()).context("set_message_id")?;
    Ok(message)
}

fn body_of(message: &ServiceBusReceivedMessage) -> Result<String> {
    let body = message.body().context("received message has no single data body")?;
    String::from_utf8(body.to_vec()).context("received body is not UTF-8")
}

/// A unique-enough suffix so that leftovers of an earlier failed run are recognisable.
fn run_id() -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}-{}", std::process::id(), nanos.as_nanos())
}

async fn with_timeout(test: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    tokio::time::timeout(TEST_TIMEOUT, test)
        .await
        .with_context(|| format!("test did not finish within {TEST_TIMEOUT:?}"))?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a running ironbus; run by cargo xtask compat"]
async fn send_receive_complete() -> Result<()> {
    with_timeout(send_receive_complete_inner()).await
}

async fn send_receive_complete_inner() -> Result<()> {
    let target = Target::from_env()?;
    let mut client = target.client().await?;

    let mut sender = client
        .create_sender(&target.queue, ServiceBusSenderOptions::default())
        .await
        .context("create_sender")?;
    let id = format!("rs-single-{}", run_id());
    let body = format!("hello from azservicebus {id}");
    let mut outgoing = message(&id, &body)?;
    outgoing
        .application_properties_mut()
        .get_or_insert_with(Default::default)
        .insert("color".to_owned(), "blue".into());
    sender.send_message(outgoing).await.context("send_message")?;

    let mut receiver = client
        .create_receiver_for_queue(
            &target.queue,
            ServiceBusReceiverOptions {
                receive_mode: ServiceBusReceiveMode::PeekLock,
                ..Default::default()
            },
        )
        .await
        .context("create_receiver_for_queue")?;
    let received = receiver
        .receive_message_with_max_wait_time(RECEIVE_WAIT)
        .await
        .context("receive_message_with_max_wait_time")?
        .with_context(|| format!("no message received within {RECEIVE_WAIT:?}"))?;

    ensure!(
        received.message_id().as_deref() == Some(id.as_str()),
        "message id: got {:?}, want {id:?} (a leftover from an earlier run?)",
        received.message_id()
    );
    ensure!(body_of(&received)? == body, "body: got {:?}, want {body:?}", body_of(&received)?);
    let color = received
        .application_properties()
        .and_then(|props| props.get("color"))
        .context("application property `color` missing")?;
    // fe2o3-amqp-types 0.14 (whose `SimpleValue` this is) is not re-exported by azservicebus:
    // convert instead of naming the type, to keep a second fe2o3 version out of our manifests.
    let color_str = String::try_from(color.clone()).ok();
    ensure!(
        color_str.as_deref() == Some("blue"),
        "application property `color`: got {color:?}, want the string \"blue\""
    );
    ensure!(received.sequence_number() >= 1, "sequence number {} < 1", received.sequence_number());
    // The broker sends the number of previous attempts (0); azservicebus, like .NET, adds 1.
    ensure!(
        received.delivery_count() == Some(1),
        "delivery count: got {:?}, want Some(1)",
        received.delivery_count()
    );
    ensure!(
        received.lock_token().as_inner() != &[0; 16],
        "peek-lock delivery has a nil lock token"
    );
    ensure!(received.locked_until().is_some(), "peek-lock delivery has no locked-until");

    receiver.complete_message(&received).await.context("complete_message")?;

    let again = receiver
        .receive_message_with_max_wait_time(EMPTY_WAIT)
        .await
        .context("second receive_message_with_max_wait_time")?;
    if let Some(again) = again {
        bail!(
            "completed message came back (or the queue was not empty): id {:?}, seq {}",
            again.message_id(),
            again.sequence_number()
        );
    }

    receiver.dispose().await.context("receiver.dispose")?;
    sender.dispose().await.context("sender.dispose")?;
    client.dispose().await.context("client.dispose")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a running ironbus; run by cargo xtask compat"]
async fn send_batch_receive_complete() -> Result<()> {
    with_timeout(send_batch_receive_complete_inner()).await
}

async fn send_batch_receive_complete_inner() -> Result<()> {
    const COUNT: usize = 3;
    let target = Target::from_env()?;
    let mut client = target.client().await?;

    let mut sender = client
        .create_sender(&target.queue, ServiceBusSenderOptions::default())
        .await
        .context("create_sender")?;
    let run = run_id();
    let ids: Vec<String> = (0..COUNT).map(|i| format!("rs-batch-{run}-{i}")).collect();
    let mut batch = sender
        .create_message_batch(CreateMessageBatchOptions::default())
        .context("create_message_batch")?;
    for id in &ids {
        batch
            .try_add_message(message(id, &format!("batch body {id}"))?)
            .with_context(|| format!("try_add_message {id}"))?;
    }
    ensure!(batch.len() == COUNT, "batch holds {} messages, want {COUNT}", batch.len());
    sender.send_message_batch(batch).await.context("send_message_batch")?;

    let mut receiver = client
        .create_receiver_for_queue(&target.queue, ServiceBusReceiverOptions::default())
        .await
        .context("create_receiver_for_queue")?;
    let mut received = Vec::new();
    while received.len() < COUNT {
        let want = u32::try_from(COUNT - received.len())?;
        let got = receiver
            .receive_messages_with_max_wait_time(want, RECEIVE_WAIT)
            .await
            .context("receive_messages_with_max_wait_time")?;
        ensure!(
            !got.is_empty(),
            "received {} of {COUNT} batch messages, then nothing within {RECEIVE_WAIT:?}",
            received.len()
        );
        received.extend(got);
    }

    let got_ids: Vec<String> =
        received.iter().map(|m| m.message_id().unwrap_or_default().into_owned()).collect();
    ensure!(got_ids == ids, "message ids (in order): got {got_ids:?}, want {ids:?}");
    let mut last_sequence = 0;
    for message in &received {
        let id = message.message_id().unwrap_or_default();
        let body = body_of(message)?;
        ensure!(body == format!("batch body {id}"), "body of {id}: got {body:?}");
        ensure!(
            message.sequence_number() > last_sequence,
            "sequence numbers not increasing: {} after {last_sequence}",
            message.sequence_number()
        );
        last_sequence = message.sequence_number();
    }
    for message in &received {
        receiver
            .complete_message(message)
            .await
            .with_context(|| format!("complete_message {:?}", message.message_id()))?;
    }

    let again = receiver
        .receive_message_with_max_wait_time(EMPTY_WAIT)
        .await
        .context("receive after completing the batch")?;
    if let Some(again) = again {
        bail!(
            "a completed batch message came back (or the queue was not empty): id {:?}",
            again.message_id()
        );
    }

    receiver.dispose().await.context("receiver.dispose")?;
    sender.dispose().await.context("sender.dispose")?;
    client.dispose().await.context("client.dispose")?;
    Ok(())
}

#[test]
fn parses_emulator_connection_strings() -> Result<()> {
    let parse = |s: &str| Target::parse(s, DEFAULT_QUEUE.to_owned());
    let t = parse(
        "Endpoint=sb://127.0.0.1:5800;SharedAccessKeyName=RootManageSharedAccessKey;\
         SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true",
    )?;
    assert_eq!(t.namespace, "127.0.0.1:5800");
    assert_eq!(t.key_name, "RootManageSharedAccessKey");
    assert_eq!(t.key, "SAS_KEY_VALUE");
    let t = parse("endpoint=sb://localhost/;sharedaccesskeyname=k;sharedaccesskey=v;")?;
    assert_eq!(t.namespace, "localhost:5672");
    let t = parse("Endpoint=sb://[::1]:5801;SharedAccessKeyName=k;SharedAccessKey=v")?;
    assert_eq!(t.namespace, "[::1]:5801");
    assert!(parse("SharedAccessKeyName=k;SharedAccessKey=v").is_err());
    assert!(parse("Endpoint=sb://h;SharedAccessKeyName=k").is_err());
    Ok(())
}
