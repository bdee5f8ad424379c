//! ironbus-transport-amqp: Azure Service Bus's AMQP 1.0 dialect, so the official Service Bus
//! SDKs work against ironbus unmodified.
//!
//! Our own connection / session / link state machine ([`connection`]) on fe2o3-amqp's types and
//! `serde_amqp` codec ([`frame`]): the broker chooses delivery tags (lock tokens), delivers only
//! against link credit, answers drain after sending what it has, and keeps the client's encoded
//! message bytes ([`codec`]). `$cbs` put-token authorizes links; `<entity>/$management` serves
//! Service Bus's request/response operations ([`management`]).
//!
//! **Architecture Invariant:** protocol knowledge stays here; Service Bus semantics stay in the
//! core. This crate depends on no workspace crate but `ironbus-core`.

pub mod codec;
pub mod connection;
pub mod error;
pub mod frame;
pub mod guard;
pub mod management;
pub mod request;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use ironbus_core::auth::Authorizer;
use ironbus_core::transport::TransportError;
use ironbus_core::{Broker, Shutdown, Transport};
use tokio::net::TcpListener;

use crate::connection::ConnectionContext;

/// The AMQP front end: listens on a TCP address and serves each connection on its own task.
pub struct AmqpTransport {
    listener: TcpListener,
    authorizer: Arc<Authorizer>,
}

impl fmt::Debug for AmqpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpTransport").field("listener", &self.listener.local_addr().ok()).finish()
    }
}

impl AmqpTransport {
    /// Binds `addr` now, so the caller learns at once if the address is taken, and the real
    /// port when it asked for port 0.
    pub async fn bind(addr: SocketAddr, authorizer: Arc<Authorizer>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(AmqpTransport { listener, authorizer })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

#[async_trait]
impl Transport for AmqpTransport {
    fn name(&self) -> &'static str {
        "amqp"
    }

    async fn serve(
        self: Box<Self>,
        broker: Broker,
        mut shutdown: Shutdown,
    ) -> Result<(), TransportError> {
        let cx = Arc::new(ConnectionContext {
            broker,
            authorizer: self.authorizer.clone(),
            container_id: "ironbus".to_owned(),
        });
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _peer)) => {
                        connections.spawn(connection::serve(stream, cx.clone(), shutdown.clone()));
                    }
                    Err(e) => tracing::warn!(error = %e, "accept failed"),
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                () = shutdown.wait() => break,
            }
        }
        // Connections see the same shutdown signal and close themselves.
        while connections.join_next().await.is_some() {}
        Ok(())
    }
}
