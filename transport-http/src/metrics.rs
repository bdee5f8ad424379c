//! The names of the metrics this transport records through the `metrics` facade, with their
//! labels. The catalogue (kind, help, unit, histogram buckets) and its naming test are the
//! `ironbus-metrics` crate's, as for the core's names.

/// HTTP requests answered. Labels: `operation` ([`Operation`](crate::routes::Operation)),
/// `outcome` (the status class: `2xx`, `4xx`, `5xx`).
pub const REQUESTS_TOTAL: &str = "ironbus_http_requests_total";
/// Time from a request's arrival to its answer, long polls included. Label: `operation`.
pub const REQUEST_DURATION_SECONDS: &str = "ironbus_http_request_duration_seconds";
/// Connections refused by a connection limit (answered 503).
pub const CONNECTIONS_REFUSED_TOTAL: &str = "ironbus_http_connections_refused_total";
