//! The metrics this transport emits, with their help texts; the same naming rules as the core's
//! catalogue (`ironbus_<subsystem>_<what>_<unit>[_total]`, bounded labels, explicit buckets).

pub use ironbus_core::metrics::{MetricDef, MetricKind};

/// HTTP requests answered. Labels: `operation` ([`Operation`](crate::routes::Operation)),
/// `outcome` (the status class: `2xx`, `4xx`, `5xx`).
pub const REQUESTS_TOTAL: &str = "ironbus_http_requests_total";
/// Time from a request's arrival to its answer, long polls included. Label: `operation`.
pub const REQUEST_DURATION_SECONDS: &str = "ironbus_http_request_duration_seconds";

/// Connections refused by a connection limit (answered 503).
pub const CONNECTIONS_REFUSED_TOTAL: &str = "ironbus_http_connections_refused_total";

/// Buckets of [`REQUEST_DURATION_SECONDS`]: sub-millisecond management up to a full long poll.
pub const REQUEST_DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Every metric this crate emits.
pub const CATALOGUE: &[MetricDef] = &[
    MetricDef {
        name: REQUESTS_TOTAL,
        kind: MetricKind::Counter,
        help: "HTTP requests answered, by operation and status class",
        labels: &["operation", "outcome"],
    },
    MetricDef {
        name: REQUEST_DURATION_SECONDS,
        kind: MetricKind::Histogram,
        help: "Time to answer an HTTP request, long polls included",
        labels: &["operation"],
    },
    MetricDef {
        name: CONNECTIONS_REFUSED_TOTAL,
        kind: MetricKind::Counter,
        help: "HTTP connections refused by --max-connections or --max-connections-per-ip",
        labels: &[],
    },
];

/// Registers the help texts with the installed recorder.
pub fn describe() {
    for def in CATALOGUE {
        match def.kind {
            MetricKind::Counter => metrics::describe_counter!(def.name, def.help),
            MetricKind::Gauge => metrics::describe_gauge!(def.name, def.help),
            MetricKind::Histogram => metrics::describe_histogram!(def.name, def.help),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_follow_the_naming_rules() {
        for def in CATALOGUE {
            let n = def.name;
            assert!(n.starts_with("ironbus_http_"), "{n}");
            assert!(n.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{n}");
            assert_eq!(n.ends_with("_total"), def.kind == MetricKind::Counter, "{n}");
            if def.kind == MetricKind::Histogram {
                assert!(n.ends_with("_seconds") || n.ends_with("_bytes"), "{n}");
            }
            for label in def.labels {
                assert!(["operation", "outcome"].contains(label), "{n}: {label}");
            }
        }
        assert!(REQUEST_DURATION_BUCKETS.windows(2).all(|w| w[0] < w[1]));
    }
}
