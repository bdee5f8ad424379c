//! Transactions driven by fe2o3-amqp's client-side `Controller` (AMQP 1.0 part 4), against a
//! real ironbus process over a real socket: the official Python and JS SDKs speak no
//! transactions, .NET and Java do, and fe2o3-amqp is an independent implementation of the
//! spec's side that they share.
//!
//! `#[ignore]`d like the other tests here: `cargo xtask compat rust` starts the broker (its
//! config declares `rust-txn` and `rust-txn-out`) and runs them with `--ignored`.
//!
//! Checked: a transactional send is invisible until the commit and never appears after a
//! rollback; a received message accepted in a transaction that rolls back stays locked by its
//! receiver (it comes back only when that lock expires) and is gone once accepted in a
//! transaction that commits; a receive, two sends through
//! the received queue to a second queue (send-via: link property
//! `com.microsoft:transfer-destination-address`) and the acceptance commit together. (A txn-id
//! used on another connection is refused: transport-amqp's raw-frame tests, since fe2o3
//! discharges only the ids it declared.)

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use fe2o3_amqp::{
    connection::ConnectionHandle,
    link::receiver::CreditMode,
    sasl_profile::SaslProfile,
    session::SessionHandle,
    transaction::{
        Controller, Transaction, TransactionDischarge, TransactionPosting, TransactionRetirement,
    },
    types::{
        definitions::{Fields, ReceiverSettleMode, SenderSettleMode},
        messaging::{AmqpValue, Body, Message, Outcome, Properties},
        primitives::{Symbol, Value},
    },
    Connection, Delivery, Receiver, Sender, Session,
};
use tokio::time::timeout;

const CONNECTION_STRING_VAR: &str = "IRONBUS_CONNECTION_STRING";
const QUEUE: &str = "rust-txn";
const OUT: &str = "rust-txn-out";
const WAIT: Duration = Duration::from_secs(10);
/// The lock duration of `rust-txn` (xtask's compat config).
const LOCK: Duration = Duration::from_secs(5);
/// How long a receive that must find nothing waits.
const NOTHING: Duration = Duration::from_secs(2);

/// Where the broker is and how to log in (SASL PLAIN with the connection string's key).
struct Target {
    host_port: String,
    user: String,
    key: String,
}

impl Target {
    fn from_env() -> Result<Target> {
        let text = std::env::var(CONNECTION_STRING_VAR)
            .with_context(|| format!("{CONNECTION_STRING_VAR} is not set"))?;
        let field = |name: &str| {
            text.split(';')
                .filter_map(|part| part.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_owned())
                .with_context(|| format!("the connection string has no {name}"))
        };
        let endpoint = field("Endpoint")?;
        let host_port = endpoint.trim_start_matches("sb://").trim_end_matches('/').to_owned();
        Ok(Target {
            host_port,
            user: field("SharedAccessKeyName")?,
            key: field("SharedAccessKey")?,
        })
    }
}

struct Client {
    connection: ConnectionHandle<()>,
    session: SessionHandle<()>,
}

impl Client {
    async fn open(name: &str) -> Result<Client> {
        let target = Target::from_env()?;
        let mut connection = Connection::builder()
            .container_id(name)
            .sasl_profile(SaslProfile::Plain { username: target.user, password: target.key })
            .open(format!("amqp://{}", target.host_port).as_str())
            .await
            .context("opening the connection")?;
        let session = Session::begin(&mut connection).await.context("beginning a session")?;
        Ok(Client { connection, session })
    }

    async fn controller(&mut self, name: &str) -> Result<Controller> {
        Ok(Controller::attach(&mut self.session, name).await?)
    }

    async fn sender(&mut self, name: &str, address: &str, via_to: Option<&str>) -> Result<Sender> {
        let mut builder = Sender::builder()
            .name(name)
            .target(address)
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::First);
        if let Some(destination) = via_to {
            let mut properties = Fields::new();
            properties.insert(
                Symbol::from("com.microsoft:transfer-destination-address"),
                Value::String(destination.to_owned()),
            );
            builder = builder.properties(properties);
        }
        Ok(builder.attach(&mut self.session).await?)
    }

    async fn receiver(&mut self, name: &str, address: &str) -> Result<Receiver> {
        Ok(Receiver::builder()
            .name(name)
            .source(address)
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::First)
            .credit_mode(CreditMode::Manual)
            .attach(&mut self.session)
            .await?)
    }

    async fn close(mut self) {
        let _ = self.session.end().await;
        let _ = self.connection.close().await;
    }
}

fn message(body: &str) -> Message<AmqpValue<Value>> {
    Message::builder()
        .properties(Properties::builder().message_id(body.to_owned()).build())
        .value(Value::String(body.to_owned()))
        .build()
}

fn text(delivery: &Delivery<Body<Value>>) -> String {
    match delivery.body() {
        Body::Value(v) => match &v.0 {
            Value::String(s) => s.clone(),
            other => format!("{other:?}"),
        },
        other => format!("{other:?}"),
    }
}

/// Receives one message (one unit of credit), or `None` within `wait`.
async fn next(receiver: &mut Receiver, wait: Duration) -> Result<Option<Delivery<Body<Value>>>> {
    receiver.set_credit(1).await?;
    match timeout(wait, receiver.recv::<Body<Value>>()).await {
        Ok(delivery) => Ok(Some(delivery?)),
        Err(_) => {
            // Take the credit back so that nothing arrives behind the test's back.
            let _ = receiver.drain().await;
            Ok(None)
        }
    }
}

/// Drains `address` with a plain receiver: the bodies, each accepted.
async fn drain(client: &mut Client, name: &str, address: &str) -> Result<Vec<String>> {
    let mut receiver = client.receiver(name, address).await?;
    let mut bodies = Vec::new();
    while let Some(delivery) = next(&mut receiver, NOTHING).await? {
        bodies.push(text(&delivery));
        receiver.accept(&delivery).await?;
    }
    receiver.close().await?;
    Ok(bodies)
}

#[tokio::test]
#[ignore = "needs a running ironbus: run through `cargo xtask compat rust`"]
async fn commit_and_rollback_of_sends_and_of_an_acceptance() -> Result<()> {
    let mut client = Client::open("rust-txn-1").await?;
    let controller = client.controller("rust-txn-1-ctrl").await?;
    let mut sender = client.sender("rust-txn-1-send", QUEUE, None).await?;

    let txn = Transaction::declare(&controller, None).await?;
    match txn.post(&mut sender, message("committed")).await? {
        Outcome::Accepted(_) => {}
        other => bail!("the transactional send was answered {other:?}"),
    }
    let mut peeker = Client::open("rust-txn-1-peek").await?;
    let mut receiver = peeker.receiver("rust-txn-1-early", QUEUE).await?;
    ensure!(next(&mut receiver, NOTHING).await?.is_none(), "visible before the commit");
    receiver.close().await?;
    txn.commit().await?;

    let txn = Transaction::declare(&controller, None).await?;
    txn.post(&mut sender, message("rolled back")).await?;
    txn.rollback().await?;

    // Only the committed send; accepted in a transaction that rolls back, it stays locked.
    let mut receiver = client.receiver("rust-txn-1-recv", QUEUE).await?;
    let delivery = next(&mut receiver, WAIT).await?.context("the committed message")?;
    ensure!(text(&delivery) == "committed", "got {}", text(&delivery));
    let txn = Transaction::declare(&controller, None).await?;
    txn.accept(&mut receiver, &delivery).await?;
    txn.rollback().await?;
    let mut other = peeker.receiver("rust-txn-1-other", QUEUE).await?;
    ensure!(next(&mut other, NOTHING).await?.is_none(), "locked after the rollback");
    other.close().await?;
    receiver.close().await?;

    // Not completed by the rollback: once its lock (LOCK) expires it comes back. (fe2o3 sends
    // one disposition per delivery, so the same delivery cannot be accepted again here;
    // transport-amqp's raw-frame tests do that.) Accepted in a transaction that commits, it
    // is gone for good: after another lock duration nothing comes back.
    tokio::time::sleep(LOCK + Duration::from_secs(1)).await;
    let mut receiver = client.receiver("rust-txn-1-again", QUEUE).await?;
    let delivery = next(&mut receiver, WAIT).await?.context("the message, back after its lock")?;
    ensure!(text(&delivery) == "committed", "got {}", text(&delivery));
    let txn = Transaction::declare(&controller, None).await?;
    txn.accept(&mut receiver, &delivery).await?;
    txn.commit().await?;
    receiver.close().await?;
    tokio::time::sleep(LOCK + Duration::from_secs(1)).await;
    ensure!(drain(&mut peeker, "rust-txn-1-left", QUEUE).await?.is_empty(), "completed");
    peeker.close().await;
    sender.close().await?;
    controller.close().await?;
    client.close().await;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a running ironbus: run through `cargo xtask compat rust`"]
async fn receive_send_via_and_accept_commit_together() -> Result<()> {
    let mut client = Client::open("rust-txn-2").await?;
    let mut seed = client.sender("rust-txn-2-seed", QUEUE, None).await?;
    seed.send(message("order")).await?;
    seed.close().await?;

    let controller = client.controller("rust-txn-2-ctrl").await?;
    let mut receiver = client.receiver("rust-txn-2-recv", QUEUE).await?;
    let mut via = client.sender("rust-txn-2-via", QUEUE, Some(OUT)).await?;
    let delivery = next(&mut receiver, WAIT).await?.context("the order")?;
    ensure!(text(&delivery) == "order");
    let txn = Transaction::declare(&controller, None).await?;
    for body in ["invoice", "shipment"] {
        match txn.post(&mut via, message(body)).await? {
            Outcome::Accepted(_) => {}
            other => bail!("the send-via of {body} was answered {other:?}"),
        }
    }
    txn.accept(&mut receiver, &delivery).await?;
    txn.commit().await?;
    receiver.close().await?;

    // The forwarder delivers after the commit: wait for both, then nothing more.
    let mut out = client.receiver("rust-txn-2-out", OUT).await?;
    let mut bodies = Vec::new();
    while bodies.len() < 2 {
        let delivery = next(&mut out, WAIT).await?.context("a send-via message")?;
        bodies.push(text(&delivery));
        out.accept(&delivery).await?;
    }
    bodies.sort();
    ensure!(bodies == ["invoice", "shipment"], "got {bodies:?}");
    ensure!(next(&mut out, NOTHING).await?.is_none(), "each exactly once");
    out.close().await?;
    ensure!(drain(&mut client, "rust-txn-2-left", QUEUE).await?.is_empty(), "order completed");
    via.close().await?;
    controller.close().await?;
    client.close().await;
    Ok(())
}
