//! The one JSON line a run prints.

use serde::Serialize;

/// The result of a run; field order is the printed order.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// The broker URL (password hidden); the first of several.
    pub url: String,
    /// Several `--url`s (a cluster's nodes): every one, in order (absent with one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
    pub address: String,
    /// Fan-out: the nodes consumers received from (absent when they received from `address`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub receive_from: Vec<String>,
    pub producers: u32,
    pub consumers: u32,
    /// Body size in bytes.
    pub size: u32,
    pub durable: bool,
    pub mode: &'static str,
    /// The AMQP client: `wire` or `fe2o3`.
    pub client: &'static str,
    pub window: u32,
    pub credit: u32,
    /// Messages asked for (sent).
    pub messages: u64,
    /// Fan-out: the receipts that complete the run, `messages` x the nodes received from
    /// (absent without `--receive-from`, where it is `messages`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<u64>,
    /// This run's messages received, summed over the nodes (equals `messages`, or `expected`,
    /// unless the run timed out or failed).
    pub received: u64,
    /// Sends the broker accepted.
    pub sent: u64,
    /// Earlier runs' messages drained from the node and left out of the figures.
    pub stale: u64,
    /// From the start of sending to the last message received (or to the timeout).
    pub seconds: f64,
    /// Received messages per second (summed over the nodes received from).
    pub msgs_per_sec: f64,
    /// Accepted sends per second, over the time until the last producer's last acknowledgement.
    pub send_msgs_per_sec: f64,
    /// End-to-end latency (send timestamp to receipt) percentiles, in milliseconds.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// `--preload`: every message was sent before consumers attached (`seconds` and
    /// `msgs_per_sec` time the receiving only).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub preload: bool,
    /// Sessions (`--sessions`): how many the messages were spread over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<u32>,
    /// Sessions: accept-next attaches answered with a session (a session drained in pieces
    /// counts each time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions_accepted: Option<u64>,
    /// Sessions: accept-next attaches refused because no session became available in time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accept_timeouts: Option<u64>,
    /// Sessions: messages received before an earlier one of their session (in one accept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_order: Option<u64>,
    /// Sessions: accepts the broker answered with another outcome than accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settles_refused: Option<u64>,
    /// Sessions: accept-next latency (attach sent to the attach naming a session) percentiles
    /// and maximum, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accept_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accept_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accept_max_ms: Option<f64>,
    /// Why the run did not complete, if it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The nearest-rank percentile `p` (0–100) of `sorted`, in milliseconds.
pub(crate) fn percentile_ms(sorted: &[u64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    // nearest rank: the smallest value with at least p% of the samples at or below it
    let rank = (p / 100.0 * sorted.len() as f64).ceil();
    let index = (rank as usize).clamp(1, sorted.len()) - 1;
    Some(round3(micros_to_ms(sorted[index])))
}

/// `count` per `seconds`, rounded to one decimal; 0 when no time passed.
pub(crate) fn rate(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        (count as f64 / seconds * 10.0).round() / 10.0
    } else {
        0.0
    }
}

pub(crate) fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

fn micros_to_ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let sorted: Vec<u64> = (1..=100).map(|ms| ms * 1000).collect();
        assert_eq!(percentile_ms(&sorted, 50.0), Some(50.0));
        assert_eq!(percentile_ms(&sorted, 99.0), Some(99.0));
        assert_eq!(percentile_ms(&[1500], 99.0), Some(1.5));
        assert_eq!(percentile_ms(&[], 50.0), None);
    }

    #[test]
    fn rate_of_no_time_is_zero() {
        assert_eq!(rate(10, 0.0), 0.0);
        assert_eq!(rate(10, 4.0), 2.5);
    }

    #[test]
    fn report_prints_fields_in_declared_order() {
        let report = Report {
            url: "amqp://h".into(),
            urls: Vec::new(),
            address: "q".into(),
            receive_from: Vec::new(),
            producers: 1,
            consumers: 1,
            size: 1024,
            durable: true,
            mode: "peek-lock",
            client: "wire",
            window: 100,
            credit: 100,
            messages: 10,
            expected: None,
            received: 10,
            sent: 10,
            stale: 0,
            seconds: 1.0,
            msgs_per_sec: 10.0,
            send_msgs_per_sec: 10.0,
            p50_ms: Some(1.0),
            p99_ms: None,
            preload: false,
            sessions: None,
            sessions_accepted: None,
            accept_timeouts: None,
            out_of_order: None,
            settles_refused: None,
            accept_p50_ms: None,
            accept_p99_ms: None,
            accept_max_ms: None,
            error: None,
        };
        let line = serde_json::to_string(&report).unwrap();
        assert!(line.starts_with(r#"{"url":"amqp://h","address":"q","producers":1,"#), "{line}");
        assert!(line.ends_with(r#""p50_ms":1.0,"p99_ms":null}"#), "{line}");
    }
}
