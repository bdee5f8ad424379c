//! What ironbus records at run time is what the catalogue lists: a broker with queues, topics,
//! subscriptions (their own metrics on) and both transports, under a debugging recorder.

use std::sync::Arc;

use ironbus_core::auth::Authorizer;
use ironbus_core::{
    shutdown_signal, Broker, BrokerOptions, EntityDescription, EntityPath, ManualClock, Message,
    QueueDescription, ReceiveMode, SubscriptionDescription, TopicDescription, Transport,
};
use ironbus_metrics::{amqp, catalogue, MetricKind};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_amqp::AmqpStats;
use ironbus_transport_http::{HttpConfig, HttpTransport};
use metrics_util::debugging::DebuggingRecorder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn every_recorded_metric_is_catalogued_with_its_kind_and_labels() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    ::metrics::with_local_recorder(&recorder, || {
        // One thread: the transports' tasks record under this thread's recorder too.
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            let options = BrokerOptions { metrics_entity_labels: true, ..Default::default() };
            let broker = Broker::open_with(
                vec![Arc::new(MemoryStore::new())],
                Arc::new(ManualClock::default()),
                options,
            )
            .await
            .unwrap();
            broker.create_queue("q", QueueDescription::default()).await.unwrap();
            let path = |p: &str| EntityPath::parse(p).unwrap();
            let topic = EntityDescription::Topic(TopicDescription::default());
            broker.create_entity(&path("t"), topic).await.unwrap();
            let sub = EntityDescription::Subscription(SubscriptionDescription::default());
            broker.create_entity(&path("t/Subscriptions/s"), sub).await.unwrap();
            broker.send("q", vec![Message::new("x")]).await.unwrap();
            broker.send("t", vec![Message::new("y")]).await.unwrap();
            for entity in ["q", "t/Subscriptions/s"] {
                let receiver = broker.open_receiver(entity, ReceiveMode::PeekLock).await.unwrap();
                receiver.add_credit(1);
                let message = receiver.recv().await.unwrap();
                broker.complete(entity, message.lock_token().unwrap()).await.unwrap();
            }

            let mut config = HttpConfig::new(Arc::new(Authorizer::development()));
            config.metrics = Some(Arc::new(String::new));
            let http = HttpTransport::bind(Some("127.0.0.1:0".parse().unwrap()), None, config)
                .await
                .unwrap();
            let addr = http.plain_addr().unwrap();
            let (_trigger, shutdown) = shutdown_signal();
            tokio::spawn(Box::new(http).serve(broker.clone(), shutdown));
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream
                .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            stream.read_to_end(&mut Vec::new()).await.unwrap();

            amqp::record([&AmqpStats::default()]);
        });
    });

    let snapshot = snapshotter.snapshot().into_vec();
    assert!(snapshot.len() >= 10, "{snapshot:?}");
    for (key, _, _, _) in snapshot {
        let name = key.key().name();
        let def = catalogue::find(name).unwrap_or_else(|| panic!("{name} is not catalogued"));
        let kind = match key.kind() {
            metrics_util::MetricKind::Counter => MetricKind::Counter,
            metrics_util::MetricKind::Gauge => MetricKind::Gauge,
            metrics_util::MetricKind::Histogram => MetricKind::Histogram,
        };
        assert_eq!(kind, def.kind, "{name}");
        for label in key.key().labels() {
            assert!(
                def.labels.contains(&label.key()),
                "{name}: label {} not catalogued",
                label.key()
            );
        }
    }
}
