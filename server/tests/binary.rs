//! The `ironbus` binary itself, as a person or a script runs it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Into a pipe (not a terminal) the binary writes its log and connection string as plain
/// text: no ANSI colour codes for a script or a log file to strip.
#[test]
fn output_into_a_pipe_has_no_colour_codes() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ironbus"))
        .args(["--store", "memory", "--amqp-addr", "127.0.0.1:0"])
        .args(["--http-addr", "off", "--https-addr", "off", "--amqps-addr", "off"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().expect("piped");
    let mut seen = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("utf-8 output");
        let done = line.starts_with("Endpoint=sb://");
        seen.push(line);
        if done {
            break;
        }
    }
    child.kill().expect("the server stops");
    let _ = child.wait();
    assert!(seen.iter().any(|l| l.starts_with("Endpoint=sb://")), "no connection string: {seen:?}");
    assert!(seen.iter().any(|l| l.contains("INFO")), "no log line: {seen:?}");
    for line in &seen {
        assert!(!line.contains('\u{1b}'), "colour code in {line:?}");
    }
}
