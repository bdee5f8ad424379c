//! The AMQP client: one connection and one session per command, SASL ANONYMOUS then a `$cbs`
//! put-token for each entity it touches (as the Service Bus SDKs do), senders, receivers and
//! `$management` requests. Every failure names the entity and the broker's condition.

use std::collections::HashSet;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::link::{ReceiverAttachError, SenderAttachError};
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::{self, ReceiverSettleMode, SenderSettleMode};
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Message, Outcome, Properties, Source,
};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use tokio::net::TcpStream;

use crate::connection::Endpoints;
use crate::error::{CliError, Context, ErrorKind, Result};
use crate::tls::Tls;

/// The AMQP message type the CLI sends and receives.
pub type AmqpMessage = Message<Body<Value>>;

/// How a receiver takes messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiveMode {
    /// Locked until settled (complete, abandon, defer, dead-letter).
    PeekLock,
    /// Removed as they are delivered.
    ReceiveAndDelete,
}

/// Which session a receiver takes messages of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionFilter<'a> {
    /// None: the entity does not require sessions.
    None,
    /// The session with this id.
    Named(&'a str),
    /// The next session with messages that no one holds (the broker picks it).
    Next,
}

/// A connection and session to a namespace, authorized entity by entity.
#[derive(Debug)]
pub struct AmqpClient {
    connection: ConnectionHandle<()>,
    session: SessionHandle<()>,
    endpoints: Endpoints,
    cbs: Option<RequestLinks>,
    authorized: HashSet<String>,
    links: u32,
}

/// A sender and a receiver for requests to one node (`$cbs`, `<entity>/$management`).
#[derive(Debug)]
struct RequestLinks {
    sender: Sender,
    receiver: Receiver,
    reply_to: String,
}

impl AmqpClient {
    /// Connects to `endpoints.amqp` (TLS when it says so) and begins a session.
    pub async fn connect(endpoints: &Endpoints, tls: &Tls) -> Result<Self> {
        let amqp = &endpoints.amqp;
        let address = format!("{}:{}", amqp.host, amqp.port);
        let connecting =
            || format!("connecting to AMQP{} at {address}", if amqp.tls { "S" } else { "" });
        let tcp = crate::timed(TcpStream::connect(&address), connecting)
            .await?
            .context(ErrorKind::Connection, connecting)?;
        let _ = tcp.set_nodelay(true);
        let container = format!("ironbus-cli-{}", uuid::Uuid::new_v4());
        let builder = Connection::builder()
            .container_id(container)
            .hostname(amqp.host.as_str())
            .sasl_profile(SaslProfile::Anonymous);
        let opening = || format!("opening an AMQP connection to {address}");
        let mut connection = if amqp.tls {
            let stream = crate::timed(tls.connect(&amqp.host, tcp), opening).await??;
            crate::timed(builder.open_with_stream(stream), opening)
                .await?
                .context(ErrorKind::Connection, opening)?
        } else {
            crate::timed(builder.open_with_stream(tcp), opening)
                .await?
                .context(ErrorKind::Connection, opening)?
        };
        let beginning = || format!("beginning an AMQP session on {address}");
        let session = crate::timed(Session::begin(&mut connection), beginning)
            .await?
            .context(ErrorKind::Connection, beginning)?;
        Ok(AmqpClient {
            connection,
            session,
            endpoints: endpoints.clone(),
            cbs: None,
            authorized: HashSet::new(),
            links: 0,
        })
    }

    fn link_name(&mut self, role: &str) -> String {
        self.links += 1;
        format!("ironbus-cli-{role}-{}", self.links)
    }

    /// Puts a token for `path` on `$cbs` unless done already on this connection.
    async fn authorize(&mut self, path: &str) -> Result<()> {
        let entity = path.split("/$").next().unwrap_or(path).to_ascii_lowercase();
        if self.authorized.contains(&entity) {
            return Ok(());
        }
        if self.cbs.is_none() {
            let links = self.request_links("$cbs").await?;
            self.cbs = Some(links);
        }
        let audience = self.endpoints.audience(&entity);
        let token = self.endpoints.credentials.token(&audience);
        let properties = [
            ("operation", SimpleValue::String("put-token".into())),
            ("type", SimpleValue::String("servicebus.windows.net:sastoken".into())),
            ("name", SimpleValue::String(audience.clone())),
        ];
        let Some(cbs) = self.cbs.as_mut() else { return Err(CliError::protocol("no $cbs link")) };
        let (status, description, _) =
            cbs.call(&properties, Value::String(token), &format!("authorizing `{entity}`")).await?;
        if status != 200 && status != 202 {
            let kind = if status == 404 { ErrorKind::NotFound } else { ErrorKind::Refused };
            return Err(CliError::new(
                kind,
                format!("authorizing `{entity}` ($cbs put-token): status {status}: {description}"),
            ));
        }
        self.authorized.insert(entity);
        Ok(())
    }

    /// A sender and reply receiver on `node`.
    async fn request_links(&mut self, node: &str) -> Result<RequestLinks> {
        let name = self.link_name("request");
        let reply_to = format!("{name}-reply");
        let what = || format!("attaching a sender to `{node}`");
        let attaching = Sender::builder()
            .name(format!("{name}:sender"))
            .target(node)
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .attach(&mut self.session);
        let sender = crate::timed(attaching, what).await?.map_err(|e| sender_refused(e, what()))?;
        let what = || format!("attaching a receiver to `{node}`");
        let attaching = Receiver::builder()
            .name(format!("{name}:receiver"))
            .source(node)
            .target(reply_to.clone())
            .attach(&mut self.session);
        let receiver =
            crate::timed(attaching, what).await?.map_err(|e| receiver_refused(e, what()))?;
        Ok(RequestLinks { sender, receiver, reply_to })
    }

    /// A sender to the queue or topic at `path`.
    pub async fn sender(&mut self, path: &str) -> Result<Sender> {
        self.authorize(path).await?;
        let name = self.link_name("sender");
        let what = || format!("opening a sender to `{path}`");
        let attaching = Sender::builder()
            .name(name)
            .target(path)
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .attach(&mut self.session);
        crate::timed(attaching, what).await?.map_err(|e| sender_refused(e, what()))
    }

    /// A receiver of the (sub-)queue at `path`, with manual credit; of a session-enabled
    /// entity, the messages of the session `session` names.
    pub async fn receiver(
        &mut self,
        path: &str,
        mode: ReceiveMode,
        session: SessionFilter<'_>,
    ) -> Result<Receiver> {
        self.authorize(path).await?;
        let name = self.link_name("receiver");
        let mut source = Source::builder().address(path.to_owned());
        let filter = match session {
            SessionFilter::None => None,
            SessionFilter::Named(id) => Some(Value::String(id.to_owned())),
            SessionFilter::Next => Some(Value::Null),
        };
        if let Some(value) = filter {
            source =
                source.add_to_filter_using_legacy_format("com.microsoft:session-filter", value);
        }
        let settle = match mode {
            ReceiveMode::PeekLock => SenderSettleMode::Unsettled,
            ReceiveMode::ReceiveAndDelete => SenderSettleMode::Settled,
        };
        let what = || format!("opening a receiver on `{path}`");
        let attaching = Receiver::builder()
            .name(name)
            .source(source.build())
            .target(format!("ironbus-cli-{}", self.links))
            .sender_settle_mode(settle)
            .receiver_settle_mode(ReceiverSettleMode::First)
            .credit_mode(CreditMode::Manual)
            .attach(&mut self.session);
        crate::timed(attaching, what).await?.map_err(|e| receiver_refused(e, what()))
    }

    /// The `$management` node of the (sub-)queue at `path`.
    pub async fn management(&mut self, path: &str) -> Result<ManagementNode> {
        self.authorize(path).await?;
        let node = format!("{path}/$management");
        let links = self.request_links(&node).await?;
        Ok(ManagementNode { links, path: path.to_owned() })
    }

    /// Ends the session and closes the connection (errors on the way out are ignored: the
    /// work is done or has already failed).
    pub async fn close(mut self) {
        let _ = self.session.end().await;
        let _ = self.connection.close().await;
    }
}

impl RequestLinks {
    /// Sends one request and awaits its answer (within [`crate::TIMEOUT`]): status,
    /// description, body.
    async fn call(
        &mut self,
        properties: &[(&str, SimpleValue)],
        body: Value,
        what: &str,
    ) -> Result<(i64, String, Value)> {
        crate::timed(self.exchange(properties, body, what), || what.to_owned()).await?
    }

    async fn exchange(
        &mut self,
        properties: &[(&str, SimpleValue)],
        body: Value,
        what: &str,
    ) -> Result<(i64, String, Value)> {
        let mut application = ApplicationProperties::builder();
        for (key, value) in properties {
            application = application.insert(*key, value.clone());
        }
        let request = Message::builder()
            .properties(
                Properties::builder()
                    .message_id(uuid::Uuid::new_v4().to_string())
                    .reply_to(self.reply_to.clone())
                    .build(),
            )
            .application_properties(application.build())
            .value(body)
            .build();
        let outcome =
            self.sender.send(request).await.context(ErrorKind::Connection, || what.to_owned())?;
        if let Outcome::Rejected(rejected) = outcome {
            return Err(CliError::refused(format!(
                "{what}: the request was rejected: {}",
                describe(rejected.error.as_ref())
            )));
        }
        self.receiver.set_credit(1).await.context(ErrorKind::Connection, || what.to_owned())?;
        let response = self
            .receiver
            .recv::<Body<Value>>()
            .await
            .context(ErrorKind::Connection, || format!("{what}: awaiting the answer"))?;
        let _ = self.receiver.accept(&response).await;
        let message = response.into_message();
        let props = message.application_properties.as_ref();
        let get = |a: &str, b: &str| props.and_then(|p| p.get(a).or_else(|| p.get(b)));
        let status = get("statusCode", "status-code").and_then(integer).unwrap_or(0);
        let mut description = match get("statusDescription", "status-description") {
            Some(SimpleValue::String(s)) => s.clone(),
            _ => String::new(),
        };
        if let Some(SimpleValue::Symbol(condition)) = get("errorCondition", "error-condition") {
            description = format!("{}: {description}", condition.as_str());
        }
        let body = match message.body {
            Body::Value(v) => v.0,
            _ => Value::Null,
        };
        Ok((status, description, body))
    }
}

/// The `$management` node of one entity: request/response operations.
#[derive(Debug)]
pub struct ManagementNode {
    links: RequestLinks,
    path: String,
}

impl ManagementNode {
    /// Calls `operation` with the map `body`; answers the response body (`Value::Null` for
    /// 204). A status other than 200 or 204 is an error with the broker's condition and text.
    pub async fn call(&mut self, operation: &str, body: Vec<(&str, Value)>) -> Result<Value> {
        let mut map = OrderedMap::new();
        for (key, value) in body {
            map.insert(Value::String(key.to_owned()), value);
        }
        let what = format!("{operation} on `{}`", self.path);
        let properties = [("operation", SimpleValue::String(operation.to_owned()))];
        let (status, description, body) =
            self.links.call(&properties, Value::Map(map), &what).await?;
        match status {
            200 | 202 => Ok(body),
            204 => Ok(Value::Null),
            404 => Err(CliError::new(
                ErrorKind::NotFound,
                format!("{what}: status 404: {description}"),
            )),
            _ => Err(CliError::refused(format!("{what}: status {status}: {description}"))),
        }
    }
}

/// Sends `message` on `sender` (to `entity`) and awaits the broker's outcome, within
/// [`crate::TIMEOUT`].
pub async fn send(sender: &mut Sender, message: AmqpMessage, entity: &str) -> Result<Outcome> {
    let what = || format!("sending to `{entity}`");
    crate::timed(sender.send(message), what).await?.context(ErrorKind::Connection, what)
}

/// A refused sender attach as an error: the broker's condition and description when it gave
/// them, else fe2o3's error as the source.
fn sender_refused(error: SenderAttachError, what: String) -> CliError {
    match error {
        SenderAttachError::RemoteClosedWithError(e) => remote(&e, what),
        other => CliError::new(ErrorKind::Connection, what).with_source(other),
    }
}

/// [`sender_refused`] for receivers.
fn receiver_refused(error: ReceiverAttachError, what: String) -> CliError {
    match error {
        ReceiverAttachError::RemoteClosedWithError(e) => remote(&e, what),
        other => CliError::new(ErrorKind::Connection, what).with_source(other),
    }
}

/// The broker's error `e` about `what`.
fn remote(e: &definitions::Error, what: String) -> CliError {
    let kind = match condition(&e.condition).as_str() {
        "amqp:not-found" => ErrorKind::NotFound,
        _ => ErrorKind::Refused,
    };
    CliError::new(kind, format!("{what}: {}", describe(Some(e))))
}

/// A condition as its symbol (`amqp:not-found`, `com.microsoft:session-cannot-be-locked`).
fn condition(condition: &definitions::ErrorCondition) -> String {
    match serde_amqp::to_value(condition) {
        Ok(Value::Symbol(symbol)) => symbol.as_str().to_owned(),
        _ => format!("{condition:?}"),
    }
}

/// An error's condition and description, for messages.
pub fn describe(error: Option<&definitions::Error>) -> String {
    match error {
        Some(e) => {
            let condition = condition(&e.condition);
            match &e.description {
                Some(d) => format!("{condition}: {d}"),
                None => condition,
            }
        }
        None => "no error given".to_owned(),
    }
}

/// An AMQP integer of any width.
pub fn integer(value: &SimpleValue) -> Option<i64> {
    match *value {
        SimpleValue::Ubyte(v) => Some(v.into()),
        SimpleValue::Ushort(v) => Some(v.into()),
        SimpleValue::Uint(v) => Some(v.into()),
        SimpleValue::Ulong(v) => i64::try_from(v).ok(),
        SimpleValue::Byte(v) => Some(v.into()),
        SimpleValue::Short(v) => Some(v.into()),
        SimpleValue::Int(v) => Some(v.into()),
        SimpleValue::Long(v) => Some(v),
        _ => None,
    }
}

/// An AMQP integer of any width, from a `Value`.
pub fn value_integer(value: &Value) -> Option<i64> {
    match *value {
        Value::Ubyte(v) => Some(v.into()),
        Value::Ushort(v) => Some(v.into()),
        Value::Uint(v) => Some(v.into()),
        Value::Ulong(v) => i64::try_from(v).ok(),
        Value::Byte(v) => Some(v.into()),
        Value::Short(v) => Some(v.into()),
        Value::Int(v) => Some(v.into()),
        Value::Long(v) => Some(v),
        _ => None,
    }
}

/// The entry `key` of a map value (string or symbol keys).
pub fn map_get<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    match value {
        Value::Map(map) => {
            map.get(&Value::String(key.to_owned())).or_else(|| map.get(&Value::Symbol(key.into())))
        }
        _ => None,
    }
}
