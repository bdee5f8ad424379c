//! ironbus-core: the broker engine. Azure Service Bus semantics — queues, topics with
//! subscriptions and rules, partitioning, peek-lock, dead-lettering, TTL, scheduling, deferral,
//! duplicate detection, sessions, auto-forwarding and local transactions — over a pluggable
//! ordered key-value [`Store`].
//!
//! Pure: no sockets, no files, no threads of its own. It runs its partition actors on the
//! caller's tokio runtime and reads time from a [`Clock`]. Its only workspace
//! dependency is a dev-dependency: its tests and benches run on `ironbus-store-memory`.
//!
//! # Map
//!
//! - [`Broker`] is the handle transports call: management generic over the [`EntityKind`]
//!   (create, get, update, delete, list by [`EntityPath`]; queue-named wrappers beside them),
//!   send, schedule, cancel, receive, settle, renew, peek, deferred receive, sessions
//!   ([`SessionReceiver`]) and transactions ([`Transaction`]). Data operations take an
//!   [`EntityAddress`]; a `&str` converts leniently (what is not an entity's address names no
//!   entity).
//! - [`Address::parse`] is the one parser of what clients name: an [`EntityPath`] (queue, topic,
//!   subscription, rule), a sub-queue, a `$management` node.
//! - Each partition of an entity is an actor (the private `partition` module) that owns its
//!   state and writes it through to the store, one write per cycle; a topic's partition holds a
//!   lane per subscription. [`Receiver`] is a consumer's credit and buffer.
//! - The rules that need no I/O are plain functions and types: [`router`], [`dedup`],
//!   [`description`] validation, [`filter`] (SQL and correlation filters, SQL actions), the
//!   private `rules` (a subscription's compiled rules), [`auth`] (SAS).
//! - [`Transport`] is the front-end plug-in, [`Store`] the storage plug-in, with
//!   its key layout in `keys` and record encodings in `codec`; [`metrics`] catalogues
//!   every metric the core emits. Feature `testing`: the store conformance suite and store
//!   wrappers that inject outages or record writes.
//!
//! # Where work goes
//!
//! The broker decides *where* (which entity, which partition, which store); partitions decide
//! *what* (the Service Bus rules on their messages).
//!
//! - **Stores.** [`Broker::open_with`] takes one store or several. The first holds the
//!   namespace (entity records); partitions are dealt round all of them (entity id plus
//!   partition, modulo the number of stores), so one store's outage makes only its partitions
//!   unavailable. **Architecture Invariant:** the number of stores is recorded at the first
//!   start and cannot change: it decides where every partition's data is.
//! - **Management.** **Architecture Invariant:** an entity's record in the store is the commit
//!   point of create and delete; partition data exists only under a live entity id (ids are
//!   never reused): a delete stops the partitions running here before it writes, and those
//!   running elsewhere write under a fence the delete removes. **Architecture Invariant:**
//!   management operations are serialized by one mutex; create, update and delete act on every
//!   partition and fail as a whole if one is unavailable. A topic's delete removes its
//!   subscriptions and rules in the same namespace write. An entity unused for its
//!   AutoDeleteOnIdle is deleted the same way, on the broker's clock (`broker/idle.rs`).
//! - **Sends.** **Architecture Invariant:** one send call is one atomic write to one
//!   partition. On a partitioned entity the messages of a batch that name a key (SessionId or
//!   PartitionKey) must name the same one (else InvalidOperation); a batch without such a key
//!   follows its first message's MessageId (with duplicate detection) or round-robin, as
//!   Service Bus routes a batch envelope. **Architecture Invariant:** an entity never holds
//!   more than MaxSizeInMegabytes times its partitions (each partition gets the size, as in
//!   Service Bus): a send is refused (`QuotaExceeded`) unless what is stored
//!   plus what earlier sends reserved and have not yet been answered for leaves room; a started
//!   send reserves its bytes until its answer.
//! - **Receives.** A [`Receiver`] registers with every partition of its entity; a session
//!   receiver only with its session's partition.
//! - **Quotas.** [`NamespaceLimits`] (queues and topics count against the entity quota) and,
//!   per topic, 2,000 subscriptions, 2,000 SQL filters (true and false filters count as SQL)
//!   and 100,000 correlation filters.
//!
//! # Delivery counts
//!
//! A message's delivery count is stored as "previous failed deliveries" (the AMQP header's
//! meaning): an abandon, a lock expiry and a deferral add one (a session lock's expiry one for
//! each message it held), a release adds none (nor does a session's release, nor dropping a
//! receiver with messages it never handed out). So a deferred message received by sequence
//! number shows the delivery that deferred it, as Service Bus's does. At MaxDeliveryCount the
//! message is dead-lettered with reason `MaxDeliveryCountExceeded` (a deferral too). Locks are
//! not persisted, so a crash does not count as a failed delivery. A dead-letter queue counts no
//! deliveries (a dead letter keeps its count); messages in a transfer queue never dead-letter
//! by delivery count.

pub mod address;
pub mod auth;
pub mod broker;
pub mod clock;
pub(crate) mod codec;
pub mod dedup;
pub mod description;
pub mod entity;
pub mod error;
pub mod fence;
pub mod filter;
#[cfg_attr(
    not(feature = "testing"),
    allow(unreachable_pub, reason = "public to tests through testing::keys")
)]
pub(crate) mod keys;
pub mod message;
pub mod metrics;
pub mod namespaces;
mod partition;
pub mod receiver;
pub mod remote;
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
    Availability, Broker, BrokerOptions, PartitionCountsView, PartitionRef, PartitionRuntime,
    QueueInfo, QueueRuntime, SendFuture, SessionReceiver, TopicRuntime, Transaction,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use description::{
    CorrelationFilter, EntityStatus, NamespaceLimits, QueueDescription, RuleAction,
    RuleDescription, RuleFilter, SubscriptionDescription, Tier, TopicDescription,
};
pub use entity::{EntityDescription, EntityInfo, EntityKind};
pub use error::{BrokerError, Result, SessionError};
pub use message::{
    ApplicationProperties, BrokerProperties, Disposition, Message, MessageLock, MessageProperties,
    MessageState, PropertyValue, ReceivedMessage,
};
pub use namespaces::Namespaces;
pub use partition::SendOutcome;
pub use receiver::Receiver;
pub use store::{Store, StoreError, StoreErrorKind, WriteBatch};
pub use transport::{shutdown_signal, Shutdown, ShutdownTrigger, Transport};
pub use types::{
    EntityName, LockToken, PartitionId, ReceiveMode, SequenceNumber, SubQueue, Timestamp,
    MAX_DELETE_MESSAGES, MAX_SEQUENCE_NUMBERS,
};
