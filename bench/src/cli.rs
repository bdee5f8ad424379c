//! The command line: what to run against, with how many links, and how to settle.

use std::time::Duration;

use clap::{Parser, ValueEnum};
use fe2o3_amqp_types::definitions::SenderSettleMode;

use crate::payload::HEADER_LEN;

/// An AMQP 1.0 load generator: producers and consumers run concurrently, each on its own
/// connection, until `--messages` messages have been received (or `--timeout` passes); prints one
/// JSON line with throughput and end-to-end latency.
#[derive(Debug, Parser)]
#[command(name = "ironbus-bench", version)]
pub(crate) struct Options {
    /// Broker URL; `amqp://USER:PASS@host:port` (percent-encoded) authenticates with SASL PLAIN,
    /// otherwise SASL ANONYMOUS is used. Repeatable, for the nodes of a cluster: producer i and
    /// consumer i connect to URL i mod (number of URLs)
    #[arg(long, default_value = "amqp://127.0.0.1:5672")]
    pub url: Vec<String>,

    /// Node to send to and receive from (RabbitMQ's durable queue `bench`: `/amq/queue/bench`);
    /// with `--receive-from`, the node producers send to only (a topic, an exchange)
    #[arg(long, default_value = "bench")]
    pub address: String,

    /// Fan-out: consumers receive from these nodes instead of `--address` (repeatable; e.g.
    /// `TOPIC/Subscriptions/SUB`, or RabbitMQ's `/amq/queue/Q` bound to the exchange). Consumers
    /// are spread over them round-robin, at least one each, and the run ends when every
    /// message has been received from every one of them (messages x nodes)
    #[arg(long, value_name = "ADDRESS")]
    pub receive_from: Vec<String>,

    /// Producer connections, one sender link each
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub producers: u32,

    /// Consumer connections, one receiver link each (with `--receive-from`, at least one per
    /// node). 0 without `--receive-from`: send only, the run ends when every send is
    /// acknowledged
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32))]
    pub consumers: u32,

    /// Messages to send in total (spread over the producers); the run ends when all are received
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub messages: u64,

    /// Body size in bytes (one data section); the first 16 bytes carry the send timestamp and
    /// the run id
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(HEADER_LEN as i64..))]
    pub size: u32,

    /// Send with `durable = true` in the message header
    #[arg(long)]
    pub durable: bool,

    /// How consumers settle: accept each message, or take them pre-settled
    #[arg(long, value_enum, default_value_t = Mode::PeekLock)]
    pub mode: Mode,

    /// Unsettled sends in flight per producer
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub window: u32,

    /// Peek-lock: accept at most this many messages in one disposition (consecutive deliveries
    /// settle as one range). A consumer accepts what it holds whenever no further message is
    /// waiting, so 1 accepts every message on its own
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub accept_batch: u32,

    /// Link credit per consumer, topped up when half of it is used
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub credit: u32,

    /// Seconds after which the run stops, reports what it got and exits non-zero (includes
    /// connecting)
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub timeout: u64,

    /// The AMQP client: `wire`, this tool's own lean client (one system call per burst,
    /// hand-encoded transfers), or `fe2o3`, fe2o3-amqp's client (needed for `--cbs-key`)
    #[arg(long, value_enum, default_value_t = Client::Wire)]
    pub client: Client,

    /// Message sessions: producers send with SessionId (`properties.group-id`) `session-{i}`,
    /// i = 0..N, round-robin over the sessions they own (session i belongs to producer
    /// i mod producers, so each session's messages come in order from one link); consumers are
    /// accept-next session receivers holding one session at a time: accept the next available
    /// session, drain it, accept its messages, detach, accept the next. 0: no sessions.
    /// Needs `--client wire` and a queue with RequiresSession
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub sessions: u32,

    /// Sessions: how long one accept-next waits for a session (`com.microsoft:timeout`) before
    /// the broker refuses it and the consumer asks again
    #[arg(long, default_value_t = 5000, value_name = "MS")]
    pub session_wait_ms: u32,

    /// Sessions: accept unsettled and wait for the broker's outcomes before detaching (as SDKs
    /// in rcv-settle-mode second do). Without it the accepts are settled, as on a plain queue,
    /// and the detach follows them at once
    #[arg(long)]
    pub confirm_accepts: bool,

    /// Send every message (all acknowledged) before consumers attach; the receive rate is then
    /// timed from the consumers' start and end-to-end latency includes the time in the queue
    #[arg(long)]
    pub preload: bool,

    /// SASL PLAIN credentials (for ironbus: `RootManageSharedAccessKey:<key>`)
    #[arg(long, value_name = "USER:PASS", conflicts_with = "cbs_key")]
    pub sasl_plain: Option<String>,

    /// SASL ANONYMOUS, then a `$cbs` put-token on each connection with a SAS token signed by
    /// this key of the `RootManageSharedAccessKey` policy
    #[arg(long, value_name = "KEY")]
    pub cbs_key: Option<String>,
}

impl Options {
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }

    /// How many deliveries a consumer takes before it tops its credit up: half the credit.
    pub(crate) fn top_up_after(&self) -> u32 {
        (self.credit / 2).max(1)
    }

    /// Consumers to attach: `--consumers`, raised to one per `--receive-from` node.
    pub(crate) fn consumer_count(&self) -> u32 {
        let nodes = u32::try_from(self.receive_from.len()).unwrap_or(u32::MAX);
        self.consumers.max(nodes)
    }

    /// The node consumer `index` receives from: `--address`, or the `--receive-from` nodes in
    /// turn.
    pub(crate) fn receive_address(&self, index: u32) -> &str {
        match self.receive_from.len() {
            0 => &self.address,
            nodes => &self.receive_from[index as usize % nodes],
        }
    }

    /// Sessions: the session id of producer `producer`'s `k`-th message (of `producers`), or
    /// `None` without sessions. Producer p owns sessions p, p + producers, ... and sends to them
    /// in turn.
    pub(crate) fn session_of(&self, producer: u32, k: u64) -> Option<String> {
        let sessions = u64::from(self.sessions);
        let (producers, p) = (u64::from(self.producers), u64::from(producer));
        if sessions == 0 || p >= sessions {
            return None;
        }
        let owned = (sessions - p).div_ceil(producers);
        Some(format!("session-{}", p + producers * (k % owned)))
    }

    /// Producer `index`'s part of the messages: an even split, the first ones taking the
    /// remainder.
    pub(crate) fn share(&self, index: u32) -> u64 {
        let producers = u64::from(self.producers);
        let (each, remainder) = (self.messages / producers, self.messages % producers);
        each + u64::from(u64::from(index) < remainder)
    }

    /// Messages received when the run is complete: each one once per node received from.
    pub(crate) fn expected_received(&self) -> u64 {
        let nodes = u64::try_from(self.receive_from.len()).unwrap_or(u64::MAX).max(1);
        self.messages.saturating_mul(nodes)
    }
}

/// Which AMQP client the producers and consumers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Client {
    /// This tool's lean client (`wire`).
    Wire,
    /// fe2o3-amqp's client.
    Fe2o3,
}

impl Client {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Client::Wire => "wire",
            Client::Fe2o3 => "fe2o3",
        }
    }
}

/// How a consumer's receiver link settles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    /// snd-settle-mode unsettled, rcv-settle-mode first; the consumer accepts each message.
    PeekLock,
    /// snd-settle-mode settled: the broker sends pre-settled, the consumer settles nothing.
    ReceiveAndDelete,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::PeekLock => "peek-lock",
            Mode::ReceiveAndDelete => "receive-and-delete",
        }
    }

    /// The snd-settle-mode a consumer's receiver asks for.
    pub(crate) fn sender_settle_mode(self) -> SenderSettleMode {
        match self {
            Mode::PeekLock => SenderSettleMode::Unsettled,
            Mode::ReceiveAndDelete => SenderSettleMode::Settled,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn command_line_definition_is_consistent() {
        Options::command().debug_assert();
    }

    #[test]
    fn defaults_are_one_to_one_peek_lock() {
        let options = Options::try_parse_from(["ironbus-bench"]).unwrap();
        assert_eq!((options.producers, options.consumers), (1, 1));
        assert_eq!(options.mode, Mode::PeekLock);
        assert_eq!(options.url, ["amqp://127.0.0.1:5672"]);
        assert!(!options.durable);
    }

    #[test]
    fn urls_repeat_for_the_nodes_of_a_cluster() {
        let options = Options::try_parse_from([
            "ironbus-bench",
            "--url",
            "amqp://127.0.0.1:1",
            "--url",
            "amqp://127.0.0.1:2",
        ])
        .unwrap();
        assert_eq!(options.url, ["amqp://127.0.0.1:1", "amqp://127.0.0.1:2"]);
    }

    #[test]
    fn sasl_plain_and_cbs_key_are_exclusive() {
        let parsed =
            Options::try_parse_from(["ironbus-bench", "--sasl-plain", "a:b", "--cbs-key", "k"]);
        assert!(parsed.is_err());
    }

    #[test]
    fn body_too_small_for_the_timestamp_is_refused() {
        assert!(Options::try_parse_from(["ironbus-bench", "--size", "8"]).is_err());
        assert!(Options::try_parse_from(["ironbus-bench", "--size", "16"]).is_ok());
    }

    #[test]
    fn accepts_one_by_one_unless_told_to_batch() {
        let options = Options::try_parse_from(["ironbus-bench"]).unwrap();
        assert_eq!(options.accept_batch, 1);
        let options = Options::try_parse_from(["ironbus-bench", "--accept-batch", "50"]).unwrap();
        assert_eq!(options.accept_batch, 50);
        assert!(Options::try_parse_from(["ironbus-bench", "--accept-batch", "0"]).is_err());
    }

    #[test]
    fn the_lean_client_is_the_default_and_cbs_needs_fe2o3_at_run_time() {
        let options = Options::try_parse_from(["ironbus-bench"]).unwrap();
        assert_eq!(options.client, Client::Wire);
        let options = Options::try_parse_from(["ironbus-bench", "--client", "fe2o3"]).unwrap();
        assert_eq!(options.client.as_str(), "fe2o3");
        assert!(Options::try_parse_from(["ironbus-bench", "--client", "other"]).is_err());
    }

    #[test]
    fn without_receive_from_consumers_use_the_address() {
        let options =
            Options::try_parse_from(["ironbus-bench", "--consumers", "3", "--messages", "10"])
                .unwrap();
        assert_eq!(options.consumer_count(), 3);
        assert_eq!(options.receive_address(2), "bench");
        assert_eq!(options.expected_received(), 10);
    }

    #[test]
    fn fan_out_spreads_consumers_over_the_nodes_and_expects_every_copy() {
        let args = ["ironbus-bench", "--address", "t", "--messages", "10"];
        let nodes = ["--receive-from", "t/Subscriptions/a", "--receive-from", "t/Subscriptions/b"];
        let options = Options::try_parse_from(args.iter().chain(&nodes)).unwrap();
        // one consumer asked for, two nodes: one each
        assert_eq!(options.consumer_count(), 2);
        assert_eq!(options.receive_address(0), "t/Subscriptions/a");
        assert_eq!(options.receive_address(1), "t/Subscriptions/b");
        assert_eq!(options.receive_address(2), "t/Subscriptions/a");
        assert_eq!(options.expected_received(), 20);
        let more = ["--consumers", "5"];
        let options = Options::try_parse_from(args.iter().chain(&nodes).chain(&more)).unwrap();
        assert_eq!(options.consumer_count(), 5);
    }

    #[test]
    fn no_consumers_means_send_only_unless_receiving_from_nodes() {
        let options = Options::try_parse_from(["ironbus-bench", "--consumers", "0"]).unwrap();
        assert_eq!(options.consumer_count(), 0);
        let options = Options::try_parse_from([
            "ironbus-bench",
            "--consumers",
            "0",
            "--receive-from",
            "t/Subscriptions/a",
        ])
        .unwrap();
        assert_eq!(options.consumer_count(), 1);
    }

    #[test]
    fn sessions_are_spread_over_producers_each_owning_its_own() {
        let args = ["ironbus-bench", "--producers", "2", "--sessions", "5"];
        let options = Options::try_parse_from(args).unwrap();
        let of = |p, k| options.session_of(p, k).unwrap();
        // producer 0 owns 0, 2, 4; producer 1 owns 1, 3
        let firsts: Vec<String> = (0..4).map(|k| of(0, k)).collect();
        assert_eq!(firsts, ["session-0", "session-2", "session-4", "session-0"]);
        let seconds: Vec<String> = (0..3).map(|k| of(1, k)).collect();
        assert_eq!(seconds, ["session-1", "session-3", "session-1"]);
        let plain = Options::try_parse_from(["ironbus-bench"]).unwrap();
        assert_eq!(plain.session_of(0, 3), None);
        assert!(!plain.preload);
        assert_eq!(plain.session_wait_ms, 5000);
    }

    #[test]
    fn every_session_gets_the_same_share_when_it_divides() {
        let args = ["ironbus-bench", "--producers", "2", "--sessions", "10", "--messages", "1000"];
        let options = Options::try_parse_from(args).unwrap();
        let mut counts = std::collections::BTreeMap::new();
        for p in 0..2 {
            for k in 0..500 {
                *counts.entry(options.session_of(p, k).unwrap()).or_insert(0) += 1;
            }
        }
        assert_eq!(counts.len(), 10);
        assert!(counts.values().all(|&n| n == 100), "{counts:?}");
    }

    #[test]
    fn modes_are_spelled_in_kebab_case() {
        let options =
            Options::try_parse_from(["ironbus-bench", "--mode", "receive-and-delete"]).unwrap();
        assert_eq!(options.mode.as_str(), "receive-and-delete");
    }
}
