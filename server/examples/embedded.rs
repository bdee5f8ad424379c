//! The broker engine embedded in a program of your own: a partitioned queue on the memory
//! store, one send, one peek-lock receive, one completion. Transports (AMQP, HTTP) are built
//! the same way: open a `Broker` on the store you choose and hand it to them.
//!
//! `cargo run -p ironbus --example embedded`

use std::sync::Arc;

use ironbus_core::{Broker, Message, NamespaceLimits, QueueDescription, ReceiveMode, SystemClock};
use ironbus_store_memory::MemoryStore;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let broker = Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(SystemClock),
        NamespaceLimits::default(),
    )
    .await?;
    let partitioned = QueueDescription { enable_partitioning: true, ..Default::default() };
    broker.create_queue("orders", partitioned).await?;

    broker.send("orders", vec![Message::new("hello").with_partition_key("customer-7")]).await?;

    let receiver = broker.open_receiver("orders", ReceiveMode::PeekLock).await?;
    receiver.add_credit(1);
    let message = receiver.recv().await.expect("the message we sent");
    let lock = message.lock_token().expect("peek-lock deliveries carry a lock");
    broker.complete("orders", lock).await?;
    tracing::info!(
        sequence_number = %message.sequence_number(),
        partition = %message.broker.partition_id,
        "received and completed"
    );
    #[allow(clippy::print_stdout)]
    {
        println!(
            "received {:?} (sequence number {}, partition {})",
            String::from_utf8_lossy(&message.message.body),
            message.sequence_number(),
            message.broker.partition_id
        );
    }
    Ok(())
}
