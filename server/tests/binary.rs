//! The `ironbus` binary itself, as a person or a script runs it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Runs the binary with a memory store and the AMQP listener alone (plus `extra`), reads its
/// standard output up to the line `last` accepts, and stops it.
fn output_until(extra: &[&str], last: impl Fn(&str) -> bool) -> Vec<String> {
    let listeners = ["--https-addr", "off", "--amqps-addr", "off"];
    output_with(&[&listeners, extra].concat(), last)
}

/// [`output_until`] with only the HTTP listener off: the TLS listeners are `args`' to choose.
fn output_with(args: &[&str], last: impl Fn(&str) -> bool) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ironbus"))
        .args(["--store", "memory", "--amqp-addr", "127.0.0.1:0", "--http-addr", "off"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().expect("piped");
    let mut seen = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("utf-8 output");
        let done = last(&line);
        seen.push(line);
        if done {
            break;
        }
    }
    child.kill().expect("the server stops");
    let _ = child.wait();
    seen
}

/// Into a pipe (not a terminal) the binary writes its log and banner as plain text: no ANSI
/// colour codes for a script or a log file to strip.
#[test]
fn output_into_a_pipe_has_no_colour_codes() {
    let seen = output_until(&[], |line| line.starts_with("Endpoint=sb://"));
    assert!(seen.iter().any(|l| l.starts_with("Endpoint=sb://")), "no connection string: {seen:?}");
    assert!(seen.iter().any(|l| l.contains("INFO")), "no log line: {seen:?}");
    for line in &seen {
        assert!(!line.contains('\u{1b}'), "colour code in {line:?}");
    }
}

/// The banner says where the AMQP listener is and which connection string reaches it.
#[test]
fn the_banner_names_the_listener_and_its_connection_string() {
    let seen = output_until(&[], |line| line.starts_with("Endpoint=sb://"));
    let listener = seen
        .iter()
        .find_map(|l| l.trim_start().strip_prefix("AMQP"))
        .map(|rest| rest.trim().trim_start_matches("amqp://").to_owned())
        .unwrap_or_else(|| panic!("no AMQP line in {seen:?}"));
    let port = listener.rsplit(':').next().expect("host:port");
    assert_ne!(port, "0", "the banner shows the bound port: {seen:?}");
    let endpoint = seen.last().expect("a connection string");
    assert!(endpoint.contains(&format!(":{port};")), "{endpoint} does not reach {listener}");
    assert!(endpoint.ends_with("UseDevelopmentEmulator=true"), "{endpoint}");
    assert!(seen.iter().any(|l| l.starts_with("ironbus ") && l.ends_with("is ready.")), "{seen:?}");
}

/// `--log-format json`: every line of standard output is one JSON object, the banner too.
#[test]
fn the_json_log_format_writes_only_json_lines() {
    let seen = output_until(&["--log-format", "json"], |line| line.contains("ironbus is ready"));
    let events: Vec<serde_json::Value> = seen
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect();
    let ready = events
        .iter()
        .find(|event| event["fields"]["message"] == "ironbus is ready")
        .unwrap_or_else(|| panic!("no ready event in {seen:?}"));
    assert_eq!(ready["level"], "INFO");
    let strings = ready["fields"]["connection_strings"].as_str().expect("a field");
    assert!(strings.contains("Endpoint=sb://127.0.0.1:"), "{strings}");
    assert!(events.iter().all(|event| event["timestamp"].is_string()), "{seen:?}");
}

/// With a TLS listener on the development certificate, the banner names the CA to trust.
#[test]
fn the_banner_names_the_ca_to_trust() {
    let dir = std::env::temp_dir().join(format!("ironbus-banner-{}", std::process::id()));
    let data_dir = dir.to_str().expect("a UTF-8 path");
    let args = ["--amqps-addr", "127.0.0.1:0", "--https-addr", "off", "--data-dir", data_dir];
    let seen = output_with(&args, |line| line.starts_with("Endpoint=sb://localhost"));
    let ca = dir.join("tls").join("ca.pem");
    let trust = seen.iter().find(|l| l.trim_start().starts_with("Trust")).expect("a Trust line");
    assert!(trust.contains(&ca.display().to_string()), "{trust}");
    assert!(ca.is_file(), "{} was generated", ca.display());
    assert!(seen.iter().any(|l| l.trim_start().starts_with("AMQPS")), "{seen:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
