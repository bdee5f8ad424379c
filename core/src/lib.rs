//! ironbus-core: the broker engine. Azure Service Bus semantics — queues, partitioning,
//! peek-lock, dead-lettering, TTL, scheduling, deferral, duplicate detection — over a pluggable
//! ordered key-value [`Store`](store::Store).
//!
//! Pure: no sockets, no files, no threads of its own. It runs its partition actors on the
//! caller's tokio runtime and reads time from a [`Clock`](clock::Clock).
//!
//! - [`Broker`] is the handle transports call: management, send, receive, settle, peek.
//! - [`Address::parse`] is the one parser of what clients name: an [`EntityPath`] (queue, topic,
//!   subscription, rule), a sub-queue, a `$management` node. [`EntityKind`] is what the
//!   namespace holds at a path.
//! - Each partition of an entity is an actor ([`partition`]) that owns its state and writes it
//!   through to the store, one write per cycle.
//! - [`Transport`] is the front-end plug-in; [`Store`](store::Store) the storage plug-in.
//! - The rules that need no I/O are plain functions and types: [`router`], [`dedup`],
//!   [`description`] validation.

pub mod address;
pub mod auth;
pub mod broker;
pub mod clock;
pub mod codec;
pub mod dedup;
pub mod description;
pub mod entity;
pub mod error;
pub mod filter;
pub mod keys;
pub mod message;
pub mod metrics;
mod partition;
pub mod receiver;
pub mod router;
mod rules;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transport;
pub mod types;

/// Transactions' limits and Service Bus's texts for their refusals.
pub mod transaction {
    pub use crate::broker::transactions::{
        MAX_OPERATIONS, SPAN_ENTITIES, SPAN_PARTITIONS, TIMEOUT,
    };
}

pub use address::{Address, AddressError, EntityAddress, EntityPath, PathShape};
pub use broker::{
    Availability, Broker, BrokerOptions, QueueInfo, QueueRuntime, SendFuture, SessionReceiver,
    TopicRuntime, Transaction,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use description::{
    CorrelationFilterDescription, EntityStatus, NamespaceLimits, QueueDescription, RuleAction,
    RuleDescription, RuleFilter, SubscriptionDescription, Tier, TopicDescription,
};
pub use entity::{EntityDescription, EntityInfo, EntityKind};
pub use error::{BrokerError, Result, SessionError};
pub use message::{
    ApplicationProperties, BrokerProperties, Disposition, Message, MessageLock, MessageProperties,
    MessageState, PropertyValue, ReceivedMessage,
};
pub use partition::SendOutcome;
pub use receiver::Receiver;
pub use store::{Store, StoreError, StoreErrorKind, WriteBatch};
pub use transport::{shutdown_signal, Shutdown, ShutdownTrigger, Transport};
pub use types::{
    EntityName, LockToken, PartitionId, ReceiveMode, SequenceNumber, SubQueue, Timestamp,
};
