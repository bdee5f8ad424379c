//! `ironbus-bench` against a real ironbus AMQP endpoint (memory store, in this process) over a
//! loopback socket, with each of its clients: every message sent is received and settled, and a
//! refused link fails the run with the broker's reason.

use std::{net::SocketAddr, process::Output, sync::Arc};

use ironbus_core::{
    auth::Authorizer, shutdown_signal, Broker, EntityDescription, EntityPath, ManualClock,
    NamespaceLimits, QueueDescription, ShutdownTrigger, SubscriptionDescription, TopicDescription,
    Transport,
};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_amqp::AmqpTransport;
use serde_json::Value;

/// A broker with a 4-partition queue `q`, a 4-partition session queue `sq` and a topic `t` with subscriptions `a`, `b`, `c`, served on a free port until the trigger is dropped.
async fn serve() -> (Broker, SocketAddr, ShutdownTrigger) {
    let broker = Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::default()),
        NamespaceLimits::default(),
    )
    .await
    .unwrap();
    let description =
        QueueDescription { enable_partitioning: true, partition_count: 4, ..Default::default() };
    broker.create_queue("q", description).await.unwrap();
    let sessions = QueueDescription {
        requires_session: true,
        enable_partitioning: true,
        partition_count: 4,
        ..Default::default()
    };
    broker.create_queue("sq", sessions).await.unwrap();
    let path = |p: &str| EntityPath::parse(p).unwrap();
    broker
        .create_entity(&path("t"), EntityDescription::Topic(TopicDescription::default()))
        .await
        .unwrap();
    for sub in ["a", "b", "c"] {
        let description = EntityDescription::Subscription(SubscriptionDescription::default());
        broker.create_entity(&path(&format!("t/Subscriptions/{sub}")), description).await.unwrap();
    }
    let transport =
        AmqpTransport::bind("127.0.0.1:0".parse().unwrap(), Arc::new(Authorizer::development()))
            .await
            .unwrap();
    let addr = transport.local_addr().unwrap();
    let (trigger, shutdown) = shutdown_signal();
    tokio::spawn(Box::new(transport).serve(broker.clone(), shutdown));
    (broker, addr, trigger)
}

async fn bench(addr: SocketAddr, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_ironbus-bench"));
    command
        .arg("--url")
        .arg(format!("amqp://{addr}"))
        .args(["--sasl-plain", "RootManageSharedAccessKey:SAS_KEY_VALUE", "--timeout", "60"])
        .args(args);
    command.output().await.unwrap()
}

fn report(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_else(|| {
        panic!("no report; stderr: {}", String::from_utf8_lossy(&output.stderr))
    });
    serde_json::from_str(line).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_is_received_and_settled_with_either_client_in_every_mode() {
    let (broker, addr, _trigger) = serve().await;
    let runs: [&[&str]; 5] = [
        &["--client", "wire", "--mode", "peek-lock", "--accept-batch", "1"],
        &["--client", "wire", "--mode", "peek-lock", "--accept-batch", "7", "--size", "3000"],
        &["--client", "wire", "--mode", "receive-and-delete", "--size", "100"],
        &["--client", "fe2o3", "--mode", "peek-lock", "--accept-batch", "7"],
        &["--client", "fe2o3", "--mode", "receive-and-delete"],
    ];
    for args in runs {
        let output = bench(
            addr,
            &[
                &["--address", "q", "--producers", "2", "--consumers", "3", "--messages", "2001"],
                args,
            ]
            .concat(),
        )
        .await;
        let report = report(&output);
        assert!(output.status.success(), "{args:?}: {report}");
        assert_eq!(report["client"], args[1], "{report}");
        for field in ["received", "sent", "messages"] {
            assert_eq!(report[field], 2001, "{args:?}: {field} in {report}");
        }
        assert_eq!(report["stale"], 0, "{args:?}: {report}");
        assert!(report["p99_ms"].as_f64().unwrap() >= report["p50_ms"].as_f64().unwrap());
        // Everything was settled: nothing is left in the queue, nothing locked.
        let runtime = broker.get_queue_runtime("q").await.unwrap();
        assert_eq!(runtime.total_message_count, 0, "{args:?}: {runtime:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_receives_every_copy_from_every_subscription() {
    let (_broker, addr, _trigger) = serve().await;
    for client in ["wire", "fe2o3"] {
        let output = bench(
            addr,
            &[
                "--client",
                client,
                "--address",
                "t",
                "--receive-from",
                "t/Subscriptions/a",
                "--receive-from",
                "t/Subscriptions/b",
                "--receive-from",
                "t/Subscriptions/c",
                "--producers",
                "2",
                "--consumers",
                "4",
                "--messages",
                "501",
            ],
        )
        .await;
        let report = report(&output);
        assert!(output.status.success(), "{client}: {report}");
        assert_eq!(report["messages"], 501, "{report}");
        assert_eq!(report["sent"], 501, "{report}");
        assert_eq!(report["expected"], 1503, "{report}");
        assert_eq!(report["received"], 1503, "{report}");
        assert_eq!(report["consumers"], 4, "{report}");
        assert_eq!(report["receive_from"].as_array().unwrap().len(), 3, "{report}");
        // The first run settled every copy: the second finds nothing left over.
        assert_eq!(report["stale"], 0, "{client}: {report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_next_session_receivers_drain_every_session_in_order() {
    let (broker, addr, _trigger) = serve().await;
    for preload in [true, false] {
        let mut args = vec![
            "--address",
            "sq",
            "--sessions",
            "10",
            "--producers",
            "2",
            "--consumers",
            "3",
            "--messages",
            "500",
            "--session-wait-ms",
            "200",
        ];
        if preload {
            args.push("--preload");
        }
        let output = bench(addr, &args).await;
        let report = report(&output);
        assert!(output.status.success(), "preload {preload}: {report}");
        for field in ["received", "sent", "messages"] {
            assert_eq!(report[field], 500, "preload {preload}: {field} in {report}");
        }
        assert_eq!(report["sessions"], 10, "{report}");
        assert_eq!(report["out_of_order"], 0, "{report}");
        assert_eq!(report["settles_refused"], 0, "{report}");
        // Preloaded, each session is drained in one go; otherwise it may take several.
        let accepted = report["sessions_accepted"].as_u64().unwrap();
        assert!(if preload { accepted == 10 } else { accepted >= 10 }, "{report}");
        let (p50, p99) = (report["accept_p50_ms"].as_f64(), report["accept_p99_ms"].as_f64());
        assert!(p99.unwrap() >= p50.unwrap(), "{report}");
        assert_eq!(report["preload"].as_bool().unwrap_or(false), preload, "{report}");
        let runtime = broker.get_queue_runtime("sq").await.unwrap();
        assert_eq!(runtime.total_message_count, 0, "preload {preload}: {runtime:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_consumers_sends_only() {
    let (broker, addr, _trigger) = serve().await;
    let output = bench(addr, &["--address", "q", "--consumers", "0", "--messages", "300"]).await;
    let report = report(&output);
    assert!(output.status.success(), "{report}");
    assert_eq!((report["sent"].as_u64(), report["received"].as_u64()), (Some(300), Some(0)));
    assert_eq!(broker.get_queue_runtime("q").await.unwrap().total_message_count, 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_urls_spread_producers_and_consumers_over_them() {
    let (broker, addr, _trigger) = serve().await;
    // A second listener on the same broker, as a second node would be.
    let second =
        AmqpTransport::bind("127.0.0.1:0".parse().unwrap(), Arc::new(Authorizer::development()))
            .await
            .unwrap();
    let second_addr = second.local_addr().unwrap();
    let (_second_trigger, shutdown) = shutdown_signal();
    tokio::spawn(Box::new(second).serve(broker.clone(), shutdown));
    let second_url = format!("amqp://{second_addr}");
    let args = ["--address", "q", "--producers", "3", "--consumers", "3", "--messages", "900"];
    let output = bench(addr, &[&args[..], &["--url", &second_url]].concat()).await;
    let report = report(&output);
    assert!(output.status.success(), "{report}");
    assert_eq!(report["received"], 900, "{report}");
    assert_eq!(report["urls"].as_array().map(Vec::len), Some(2), "{report}");
    assert_eq!(broker.get_queue_runtime("q").await.unwrap().total_message_count, 0);

    // Producer 1 and consumer 1 go to the second URL: where nothing listens, the run fails there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let output =
        bench(addr, &["--address", "q", "--consumers", "2", "--url", &format!("amqp://{closed}")])
            .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&format!("connecting to amqp://{closed}")), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_link_fails_the_run_with_the_brokers_reason() {
    let (_broker, addr, _trigger) = serve().await;
    for client in ["wire", "fe2o3"] {
        let output = bench(addr, &["--client", client, "--address", "nowhere"]).await;
        assert!(!output.status.success(), "{client}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("/nowhere' could not be found"), "{client}: {stderr}");
        // fe2o3-amqp shows the condition in Rust's debug form; ours as the AMQP symbol.
        let condition = if client == "wire" { "amqp:not-found" } else { "NotFound" };
        assert!(stderr.contains(condition), "{client}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_is_refused_by_sasl() {
    let (_broker, addr, _trigger) = serve().await;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_ironbus-bench"));
    command.args(["--url", &format!("amqp://{addr}"), "--address", "q", "--client", "wire"]);
    command.args(["--sasl-plain", "RootManageSharedAccessKey:wrong", "--timeout", "20"]);
    let output = command.output().await.unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("SASL PLAIN refused"), "{stderr}");
}
