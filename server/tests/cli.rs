//! The operators' command line (`ironbus <command>`) end to end: a real `ironbus` server
//! process on free ports and the memory store, and the same binary's CLI commands run as
//! processes against it, their `--output json` checked against `cli/schema/*.json`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

/// A server process (killed when dropped) and how the CLI reaches it; or, without a process,
/// another way to reach a server ([`Server::signed_with`]).
struct Server {
    child: Option<Child>,
    connection_string: String,
    http: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `ironbus --store memory` on free ports; returns once it prints its connection string.
fn server() -> Server {
    server_with(&[])
}

/// [`server`] with `extra` flags.
fn server_with(extra: &[&str]) -> Server {
    let (amqp, http) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_ironbus"))
        .args(["--store", "memory", "--amqps-addr", "off", "--https-addr", "off"])
        .args(["--amqp-addr", &format!("127.0.0.1:{amqp}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let printed = lines.by_ref().map_while(Result::ok).find(|l| l.starts_with("Endpoint=sb://"));
    assert!(printed.is_some(), "the server printed no connection string");
    // Keep reading its output, so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Server {
        child: Some(child),
        connection_string: format!(
            "Endpoint=sb://localhost:{amqp};SharedAccessKeyName=RootManageSharedAccessKey;\
             SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"
        ),
        http: format!("http://localhost:{http}"),
    }
}

impl Server {
    /// The same server, reached with `credentials` (the connection string's parts after
    /// its Endpoint) instead.
    fn signed_with(&self, credentials: &str) -> Server {
        let endpoint = self.connection_string.split(';').next().unwrap_or_default();
        Server {
            child: None,
            connection_string: format!("{endpoint};{credentials};UseDevelopmentEmulator=true"),
            http: self.http.clone(),
        }
    }

    /// Runs `ironbus <args>` against this server, stdin from `input` (none: an empty,
    /// non-terminal stdin).
    fn cli_with_input(&self, args: &[&str], input: Option<&[u8]>) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ironbus"))
            .args(args)
            .args(["--http-endpoint", &self.http])
            .env("SERVICEBUS_CONNECTION_STRING", &self.connection_string)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the CLI starts");
        let mut stdin = child.stdin.take().expect("piped");
        if let Some(bytes) = input {
            stdin.write_all(bytes).expect("the CLI reads stdin");
        }
        drop(stdin);
        child.wait_with_output().expect("the CLI ends")
    }

    /// Runs a command that must succeed; answers its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.cli_with_input(args, None);
        let (stdout, stderr) = texts(&output);
        assert!(output.status.success(), "ironbus {args:?} failed: {stderr}\n{stdout}");
        stdout
    }

    /// Runs a command with `--output json` that must succeed; checks its output against the
    /// schema `schema` and answers it.
    fn json(&self, args: &[&str], schema: &str) -> Value {
        let mut all = args.to_vec();
        all.extend(["--output", "json"]);
        let stdout = self.ok(&all);
        let value: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("ironbus {args:?}: not one JSON document ({e}): {stdout}"));
        validate(&value, &load(schema), schema, "$");
        value
    }

    /// Runs a command that must fail; answers its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let output = self.cli_with_input(args, None);
        let (stdout, stderr) = texts(&output);
        assert!(!output.status.success(), "ironbus {args:?} succeeded: {stdout}");
        assert!(stdout.is_empty(), "a failure prints no result: {stdout}");
        assert_eq!(stderr.lines().count(), 1, "one message: {stderr}");
        stderr
    }
}

fn texts(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn schema_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../cli/schema")
}

fn load(name: &str) -> Value {
    let path = schema_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Checks `value` against the subset of JSON Schema the CLI's schemas use: `type` (one or a
/// list), `enum`, `required`, `properties`, `additionalProperties` (a schema), `items`,
/// `minimum`, and `$ref` to another schema file.
fn validate(value: &Value, schema: &Value, file: &str, at: &str) {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        return validate(value, &load(reference), reference, at);
    }
    if let Some(types) = schema.get("type") {
        let types: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            other => panic!("{file}: bad type {other}"),
        };
        let fits = types.iter().any(|t| match *t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            other => panic!("{file}: unknown type {other}"),
        });
        assert!(fits, "{file}: {at} is {value}, not of type {types:?}");
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        assert!(options.contains(value), "{file}: {at} is {value}, not one of {options:?}");
    }
    if let Some(minimum) = schema.get("minimum").and_then(Value::as_i64) {
        if let Some(n) = value.as_i64() {
            assert!(n >= minimum, "{file}: {at} is {n}, below {minimum}");
        }
    }
    if let Some(object) = value.as_object() {
        for key in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            let key = key.as_str().expect("required names are strings");
            assert!(object.contains_key(key), "{file}: {at} lacks `{key}`: {value}");
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        for (key, item) in object {
            let path = format!("{at}.{key}");
            match (properties.and_then(|p| p.get(key)), schema.get("additionalProperties")) {
                (Some(sub), _) => validate(item, sub, file, &path),
                (None, Some(Value::Bool(false))) => panic!("{file}: {path} is not allowed"),
                (None, Some(sub)) if sub.is_object() => validate(item, sub, file, &path),
                (None, _) => {}
            }
        }
    }
    if let (Some(items), Some(schema_items)) = (value.as_array(), schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            validate(item, schema_items, file, &format!("{at}[{i}]"));
        }
    }
}

#[test]
fn every_schema_is_json_and_the_validator_catches_a_wrong_shape() {
    for entry in std::fs::read_dir(schema_dir()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert_eq!(load(&name)["$id"], name.as_str(), "each schema names itself");
    }
    let bad = serde_json::json!({"entity": "q", "deleted": -1});
    let caught =
        std::panic::catch_unwind(|| validate(&bad, &load("purge.json"), "purge.json", "$"));
    assert!(caught.is_err(), "a negative count is refused");
}

#[test]
fn entities_are_created_listed_shown_updated_and_deleted() {
    let server = server();
    let created = server.json(
        &["queue", "create", "orders", "--max-delivery-count", "3", "--lock-duration", "30s"],
        "entity.json",
    );
    assert_eq!(created["properties"]["MaxDeliveryCount"], 3);
    assert_eq!(created["properties"]["LockDuration"], "PT30S");
    let jobs =
        ["queue", "create", "jobs", "--partitioned", "--partitions", "2", "--duplicate-detection"];
    let jobs = server.json(&jobs, "entity.json");
    assert_eq!((jobs["partitioned"].clone(), jobs["partitions"].clone()), (true.into(), 2.into()));
    server.ok(&["topic", "create", "events", "--ttl", "1h"]);
    server.ok(&["subscription", "create", "events", "all", "--max-delivery-count", "5"]);

    let queues = server.json(&["queue", "list"], "entity-list.json");
    let names: Vec<&str> =
        queues.as_array().unwrap().iter().filter_map(|q| q["name"].as_str()).collect();
    assert_eq!(names, ["jobs", "orders"]);
    let subscriptions = server.json(&["subscription", "list", "events"], "entity-list.json");
    assert_eq!(subscriptions[0]["path"], "events/Subscriptions/all");
    let shown = server.json(&["subscription", "show", "events", "all"], "entity.json");
    assert_eq!(shown["properties"]["MaxDeliveryCount"], 5);

    let updated =
        server.json(&["queue", "update", "orders", "--max-delivery-count", "7"], "entity.json");
    assert_eq!(updated["properties"]["MaxDeliveryCount"], 7);
    assert_eq!(updated["properties"]["LockDuration"], "PT30S", "what was not given stays");

    let overview = server.json(&["overview"], "overview.json");
    assert_eq!(overview["queues"].as_array().unwrap().len(), 2);
    assert_eq!(overview["topics"][0]["subscriptions"][0]["name"], "all");
    let table = server.ok(&["ns"]);
    assert!(table.starts_with("KIND"), "{table}");
    assert!(table.contains("events/Subscriptions/all"), "{table}");
    assert!(!table.contains('\u{1b}'), "no colour codes into a pipe");

    server.json(&["queue", "delete", "jobs"], "deleted.json");
    let error = server.fails(&["queue", "show", "jobs"]);
    assert!(error.starts_with("error: reading `jobs`: HTTP 404"), "{error}");
    let error = server.fails(&["queue", "create", "orders"]);
    assert!(error.contains("HTTP 409"), "{error}");
}

#[test]
fn messages_are_sent_peeked_received_dead_lettered_resubmitted_and_purged() {
    let server = server();
    server.ok(&["queue", "create", "orders"]);
    server.ok(&["queue", "create", "retry", "--duplicate-detection"]);

    let sent = server.json(
        &["send", "orders", "hello", "--subject", "greet", "--property", "n=5", "--repeat", "3"],
        "send.json",
    );
    assert_eq!(sent["sent"], 3);
    let piped = server.cli_with_input(
        &["send", "orders", "--content-type", "application/json", "--message-id", "m-4"],
        Some(br#"{"a":1}"#),
    );
    assert!(piped.status.success(), "{}", texts(&piped).1);

    let peeked = server.json(&["peek", "orders", "--count", "10"], "messages.json");
    let messages = peeked["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[0]["body"], "hello");
    assert_eq!(messages[0]["application_properties"]["n"], 5);
    assert_eq!(messages[3]["body"], r#"{"a":1}"#);
    assert_eq!(messages[3]["content_type"], "application/json");
    let later = server.json(&["peek", "orders", "--from-sequence", "3"], "messages.json");
    assert_eq!(later["messages"].as_array().unwrap().len(), 2);

    let received = server.json(
        &[
            "receive",
            "orders",
            "--then",
            "dead-letter",
            "--reason",
            "bad",
            "--description",
            "broken",
        ],
        "messages.json",
    );
    assert_eq!(received["settlement"], "dead-letter");
    let dead = server.json(&["dead-letter", "list", "orders"], "messages.json");
    assert_eq!(dead["entity"], "orders/$DeadLetterQueue");
    assert_eq!(dead["messages"][0]["dead_letter_reason"], "bad");
    assert_eq!(dead["messages"][0]["dead_letter_description"], "broken");
    let table = server.ok(&["dead-letter", "list", "orders"]);
    assert!(table.contains("REASON") && table.contains("broken"), "{table}");

    let copied =
        server.json(&["dead-letter", "resubmit", "orders", "--to", "retry"], "resubmit.json");
    assert_eq!(copied["resubmitted"], 1);
    assert_eq!(copied["fresh_message_ids"], true, "retry detects duplicates");
    assert_ne!(copied["message_ids"][0], dead["messages"][0]["message_id"]);
    let moved = server.json(&["dead-letter", "resubmit", "orders", "--remove"], "resubmit.json");
    assert_eq!((moved["resubmitted"].clone(), moved["to"].clone()), (1.into(), "orders".into()));
    let overview = server.json(&["overview"], "overview.json");
    let orders = &overview["queues"][0];
    assert_eq!(orders["name"], "orders");
    assert_eq!(orders["counts"]["active"], 4);
    assert_eq!(orders["counts"]["dead_letter"], 0);
    assert_eq!(overview["queues"][1]["counts"]["active"], 1, "the copy in retry");

    let completed = server.json(&["receive", "retry", "--timeout", "2"], "messages.json");
    assert_eq!(completed["messages"][0]["body"], "hello");
    let none = server.json(&["receive", "retry", "--timeout", "1"], "messages.json");
    assert_eq!(none["messages"], serde_json::json!([]));

    let purged = server.json(&["purge", "orders", "--yes"], "purge.json");
    assert_eq!(purged["deleted"], 4);
    let empty = server.json(&["peek", "orders"], "messages.json");
    assert_eq!(empty["messages"], serde_json::json!([]));
}

#[test]
fn purge_asks_and_refuses_without_yes_when_stdin_is_not_a_terminal() {
    let server = server();
    server.ok(&["queue", "create", "orders"]);
    server.ok(&["send", "orders", "keep me"]);
    let error = server.fails(&["purge", "orders"]);
    assert!(error.contains("refusing without --yes"), "{error}");
    let peeked = server.json(&["peek", "orders"], "messages.json");
    assert_eq!(peeked["messages"].as_array().unwrap().len(), 1, "nothing was deleted");
}

#[test]
fn errors_name_the_entity_and_the_brokers_answer() {
    let server = server();
    let error = server.fails(&["send", "nowhere", "x"]);
    assert!(error.contains("`nowhere`") && error.contains("404"), "{error}");
    let error = server.fails(&["peek", "nowhere"]);
    assert!(error.contains("could not be found"), "{error}");
    let usage = server.cli_with_input(&["send", "orders", "x", "--schedule", "tomorrow"], None);
    assert_eq!(usage.status.code(), Some(2), "a usage error");
    assert!(texts(&usage).1.contains("not an RFC 3339 time"));
    let bad = "Endpoint=sb://localhost:1;SharedAccessKeyName=a;SharedAccessKey=b;UseDevelopmentEmulator=true";
    let refused = Command::new(env!("CARGO_BIN_EXE_ironbus"))
        .args(["overview", "--connection-string", bad, "--http-endpoint", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        texts(&refused).1.starts_with("error: connecting to 127.0.0.1:1"),
        "{}",
        texts(&refused).1
    );
}

/// A config file with what import must handle: a forward to a queue declared after it, a
/// partitioned queue, sessions, a topic with a subscription and SQL and correlation rules.
const CONFIG: &str = r#"{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
  "Queues": [
    {"Name": "q1", "Properties": {"LockDuration": "PT1M", "MaxDeliveryCount": 4, "ForwardTo": "q2"}},
    {"Name": "q2", "Properties": {"EnablePartitioning": true, "PartitionCount": 2, "RequiresDuplicateDetection": true}},
    {"Name": "sq", "Properties": {"RequiresSession": true}}],
  "Topics": [
    {"Name": "t1", "Properties": {"DefaultMessageTimeToLive": "PT1H"},
      "Subscriptions": [
        {"Name": "all", "Properties": {"MaxDeliveryCount": 5}},
        {"Name": "red", "Properties": {},
          "Rules": [{"Name": "red-only", "Properties": {"FilterType": "Sql",
              "SqlFilter": {"SqlExpression": "color = 'red'"}, "Action": {"SqlExpression": "SET seen = 1"}}},
            {"Name": "corr", "Properties": {"FilterType": "Correlation",
              "CorrelationFilter": {"Label": "x", "Properties": {"n": 5}}}}]}]}]}]}}"#;

#[test]
fn import_is_idempotent_and_export_gives_a_config_the_server_loads() {
    let dir = std::env::temp_dir().join(format!("ironbus-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("input.json");
    std::fs::write(&input, CONFIG).unwrap();
    let input = input.to_str().unwrap();

    let server = server();
    let first = server.json(&["import", input], "import.json");
    let actions: Vec<(&str, &str)> = first["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["path"].as_str().unwrap(), s["action"].as_str().unwrap()))
        .collect();
    assert!(
        actions.contains(&("q1", "created")) && actions.contains(&("q1", "updated")),
        "{actions:?}"
    );
    assert!(actions.contains(&("t1/Subscriptions/red/Rules/corr", "created")), "{actions:?}");
    let second = server.json(&["import", input], "import.json");
    for step in second["steps"].as_array().unwrap() {
        assert_eq!(step["action"], "unchanged", "a second import changes nothing: {step}");
    }
    let rules = server.json(&["subscription", "show", "t1", "red"], "entity.json");
    assert_eq!(rules["name"], "red");

    let exported = server.json(&["export"], "config.json");
    let namespace = &exported["UserConfig"]["Namespaces"][0];
    let q1 = &namespace["Queues"][0];
    assert_eq!(
        (q1["Name"].as_str(), q1["Properties"]["ForwardTo"].as_str()),
        (Some("q1"), Some("q2"))
    );
    assert_eq!(namespace["Queues"][1]["Properties"]["PartitionCount"], 2);
    let red = &namespace["Topics"][0]["Subscriptions"][1];
    assert_eq!(red["Rules"].as_array().unwrap().len(), 2, "declared rules, no $Default: {red}");
    assert!(namespace["Topics"][0]["Subscriptions"][0].get("Rules").is_none(), "$Default only");

    // Changing a property in the file updates it; a fixed one is reported, not changed.
    let changed = CONFIG
        .replace(r#""MaxDeliveryCount": 4"#, r#""MaxDeliveryCount": 9"#)
        .replace(r#"{"RequiresSession": true}"#, r#"{"RequiresSession": false}"#);
    let changed_file = dir.join("changed.json");
    std::fs::write(&changed_file, changed).unwrap();
    let third = server.json(&["import", changed_file.to_str().unwrap()], "import.json");
    let steps = third["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["path"] == "q1"
        && s["action"] == "updated"
        && s["fields"][0] == "MaxDeliveryCount"));
    assert!(steps.iter().any(|s| s["path"] == "sq" && s["action"] == "differs-fixed"));

    // The export, into a fresh server by import, and as its --config.
    let file = dir.join("export.json");
    let summary = server.json(&["export", "--file", file.to_str().unwrap()], "exported.json");
    assert_eq!((summary["queues"].as_u64(), summary["topics"].as_u64()), (Some(3), Some(1)));
    let fresh = server_with(&["--config", file.to_str().unwrap()]);
    let again = fresh.json(&["import", file.to_str().unwrap()], "import.json");
    for step in again["steps"].as_array().unwrap() {
        assert_eq!(step["action"], "unchanged", "--config loaded the export as it was: {step}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sessions_are_listed_and_their_state_is_set_shown_and_cleared() {
    let server = server();
    server.ok(&["queue", "create", "sq", "--sessions"]);
    server.ok(&["send", "sq", "a", "--session-id", "s1"]);
    server.ok(&["send", "sq", "b", "--session-id", "s2", "--repeat", "2"]);
    let listed = server.json(&["session", "list", "sq"], "sessions.json");
    assert_eq!(listed["sessions"], serde_json::json!(["s1", "s2"]));

    server.json(&["session", "set-state", "sq", "s1", r#"{"step":2}"#], "session.json");
    let shown = server.json(&["session", "show", "sq", "s1"], "session.json");
    assert_eq!(shown["state"], r#"{"step":2}"#);
    assert_eq!(shown["messages"], 1);
    let table = server.ok(&["session", "show", "sq", "s2"]);
    assert!(table.contains("Messages  2") && table.contains("(none)"), "{table}");
    server.json(&["session", "set-state", "sq", "s1", "--clear"], "session.json");
    assert_eq!(
        server.json(&["session", "show", "sq", "s1"], "session.json")["state"],
        serde_json::Value::Null
    );

    let peeked = server.json(&["peek", "sq", "--session", "s2"], "messages.json");
    assert_eq!(peeked["messages"].as_array().unwrap().len(), 2);
    let received = server.json(&["receive", "sq", "--session", "s1"], "messages.json");
    assert_eq!(received["messages"][0]["session_id"], "s1");
    let next = server.json(
        &["receive", "sq", "--next-session", "--count", "5", "--timeout", "1"],
        "messages.json",
    );
    let bodies: Vec<&str> =
        next["messages"].as_array().unwrap().iter().filter_map(|m| m["body"].as_str()).collect();
    assert_eq!(bodies, ["b", "b"], "the one session with messages left: {next}");
    let error = server.fails(&["send", "sq", "no session"]);
    assert!(error.contains("sending message 1 to `sq`: amqp:not-allowed: "), "{error}");
    let error = server.fails(&["receive", "sq"]);
    assert!(error.starts_with("error: opening a receiver on `sq`: amqp:not-allowed: "), "{error}");
}

#[test]
fn rules_are_created_listed_updated_refused_and_deleted() {
    let server = server();
    server.ok(&["topic", "create", "events"]);
    server.ok(&["subscription", "create", "events", "red"]);
    let sql = ["rule", "create", "events", "red", "only-red", "--sql", "color = 'red'"];
    let created = server.json(&[&sql[..], &["--action", "SET seen = 1"]].concat(), "rule.json");
    assert_eq!(created["rule"]["SqlFilter"]["SqlExpression"], "color = 'red'");
    assert_eq!(created["rule"]["Action"]["SqlExpression"], "SET seen = 1");
    let by_region = ["rule", "create", "events", "red", "eu", "--correlation-subject", "order"];
    let correlation = server
        .json(&[&by_region[..], &["--correlation-property", "region=eu"]].concat(), "rule.json");
    assert_eq!(correlation["rule"]["CorrelationFilter"]["Label"], "order");
    assert_eq!(correlation["rule"]["CorrelationFilter"]["Properties"]["region"], "eu");

    let listed = server.json(&["rule", "list", "events", "red"], "rule-list.json");
    let names: Vec<&str> =
        listed.as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(names, ["$Default", "eu", "only-red"]);
    let updated = server.json(
        &["rule", "update", "events", "red", "only-red", "--sql", "color = 'green'"],
        "rule.json",
    );
    assert_eq!(updated["rule"]["SqlFilter"]["SqlExpression"], "color = 'green'");
    assert_eq!(updated["rule"]["Action"]["SqlExpression"], "SET seen = 1", "kept");

    let error = server.fails(&["rule", "create", "events", "red", "bad", "--sql", "color = = 'x'"]);
    assert!(error.contains("HTTP 400") && error.contains("SqlExpression"), "{error}");
    server.json(&["rule", "delete", "events", "red", "$Default"], "deleted.json");

    server.ok(&["send", "events", "x", "--property", "color=green"]);
    server.ok(&["send", "events", "y", "--property", "color=blue"]);
    let peeked = server.json(&["peek", "events/Subscriptions/red"], "messages.json");
    let messages = peeked["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "only the green one matches: {peeked}");
    assert_eq!(messages[0]["application_properties"]["seen"], 1, "the action ran");
}

#[test]
fn scheduled_messages_are_numbered_cancelled_and_purged() {
    let server = server();
    server.ok(&["queue", "create", "orders"]);
    let at = ["send", "orders", "later", "--schedule", "2030-01-01T00:00:00Z", "--repeat", "3"];
    let sent = server.json(&at, "send.json");
    assert_eq!(sent["scheduled_enqueue_time"], "2030-01-01T00:00:00.000Z");
    let numbers: Vec<String> = sent["sequence_numbers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_i64().unwrap().to_string())
        .collect();
    assert_eq!(numbers.len(), 3);
    let peeked = server.json(&["peek", "orders"], "messages.json");
    assert_eq!(peeked["messages"][0]["state"], "scheduled");

    let cancelled = server.json(&["cancel-scheduled", "orders", &numbers[0]], "cancelled.json");
    assert_eq!(cancelled["cancelled"][0].to_string(), numbers[0]);
    let overview = server.json(&["overview"], "overview.json");
    assert_eq!(overview["queues"][0]["counts"]["scheduled"], 2);

    server.ok(&["send", "orders", "now"]);
    let purged = server.json(&["purge", "orders", "--scheduled", "--yes"], "purge.json");
    assert_eq!(purged["deleted"], 2);
    let overview = server.json(&["overview"], "overview.json");
    let counts = &overview["queues"][0]["counts"];
    assert_eq!((counts["scheduled"].as_u64(), counts["active"].as_u64()), (Some(0), Some(1)));
}

#[test]
fn watch_prints_one_line_per_refresh_into_a_pipe() {
    let server = server();
    server.ok(&["queue", "create", "orders"]);
    server.ok(&["send", "orders", "x", "--repeat", "2"]);
    let plain = server.ok(&["watch", "--interval", "1", "--iterations", "2"]);
    let lines: Vec<&str> = plain.lines().collect();
    assert_eq!(lines.len(), 2, "{plain}");
    assert!(lines[0].contains("entities=1 active=2 active/s=-"), "{plain}");
    assert!(lines[1].contains("active/s=+0.0"), "{plain}");
    assert!(!plain.contains('\u{1b}'), "no escape codes into a pipe");
    let json = server.ok(&["watch", "--interval", "1", "--iterations", "2", "--output", "json"]);
    for line in json.lines() {
        let value: Value = serde_json::from_str(line).unwrap();
        validate(&value, &load("watch.json"), "watch.json", "$");
        assert_eq!(value["active"], 2);
    }
}

/// Without UseDevelopmentEmulator the CLI speaks TLS on both protocols, as against Azure
/// Service Bus: AMQPS on the Endpoint's port and HTTPS, trusting the CA of `--ca-file`.
#[test]
fn without_the_emulator_flag_both_protocols_use_tls_and_check_the_certificate() {
    let dir = std::env::temp_dir().join(format!("ironbus-cli-tls-{}", std::process::id()));
    let (amqp, amqps, https) = (free_port(), free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_ironbus"))
        .args(["--store", "memory", "--http-addr", "off", "--data-dir", dir.to_str().unwrap()])
        .args(["--amqp-addr", &format!("127.0.0.1:{amqp}")])
        .args(["--amqps-addr", &format!("127.0.0.1:{amqps}")])
        .args(["--https-addr", &format!("127.0.0.1:{https}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    assert!(lines.by_ref().map_while(Result::ok).any(|l| l.starts_with("Endpoint=sb://")));
    std::thread::spawn(move || lines.for_each(drop));
    let server = Server {
        child: Some(child),
        connection_string: format!(
            "Endpoint=sb://localhost:{amqps}/;SharedAccessKeyName=RootManageSharedAccessKey;\
             SharedAccessKey=SAS_KEY_VALUE"
        ),
        http: format!("https://localhost:{https}"),
    };
    let ca = dir.join("tls/ca.pem");
    let ca = ca.to_str().unwrap();
    server.ok(&["queue", "create", "secure", "--ca-file", ca]);
    server.ok(&["send", "secure", "over tls", "--ca-file", ca]);
    let peeked = server.json(&["peek", "secure", "--ca-file", ca], "messages.json");
    assert_eq!(peeked["messages"][0]["body"], "over tls");
    let untrusted = server.fails(&["peek", "secure"]);
    assert!(
        untrusted.contains("TLS handshake with localhost") && untrusted.contains("--ca-file"),
        "{untrusted}"
    );
    let insecure = server.json(&["overview", "--insecure"], "overview.json");
    assert_eq!(insecure["queues"][0]["name"], "secure");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_connection_string_may_carry_a_ready_token_instead_of_the_key() {
    let server = server();
    let key = "SAS_KEY_VALUE";
    let token =
        ironbus_cli::sas::sign("sb://localhost/", "RootManageSharedAccessKey", key, 4_000_000_000);
    let with_token = server.signed_with(&format!("SharedAccessSignature={token}"));
    with_token.ok(&["queue", "create", "orders"]);
    with_token.ok(&["send", "orders", "signed elsewhere"]);
    let peeked = with_token.json(&["peek", "orders"], "messages.json");
    assert_eq!(peeked["messages"][0]["body"], "signed elsewhere");

    let wrong =
        server.signed_with("SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=nope");
    let error = wrong.fails(&["overview"]);
    assert!(error.contains("HTTP 401"), "{error}");
    let error = wrong.fails(&["peek", "orders"]);
    assert!(error.contains("$cbs put-token") && error.contains("401"), "{error}");
}

#[test]
fn received_messages_can_be_abandoned_deferred_or_received_and_deleted() {
    let server = server();
    server.ok(&["queue", "create", "orders"]);
    server.ok(&["send", "orders", "a"]);
    server.ok(&["send", "orders", "b"]);
    let abandoned = server.json(&["receive", "orders", "--then", "abandon"], "messages.json");
    assert_eq!(
        (abandoned["messages"][0]["body"].as_str(), abandoned["settlement"].as_str()),
        (Some("a"), Some("abandon"))
    );
    let peeked = server.json(&["peek", "orders"], "messages.json");
    assert_eq!(peeked["messages"][0]["delivery_count"], 1, "abandoning counts a delivery");
    server.json(&["receive", "orders", "--then", "defer"], "messages.json");
    let peeked = server.json(&["peek", "orders"], "messages.json");
    assert_eq!(peeked["messages"][0]["state"], "deferred");
    let deleted = server.json(
        &["receive", "orders", "--delete", "--count", "5", "--timeout", "1"],
        "messages.json",
    );
    assert_eq!(deleted["settlement"], "receive-and-delete");
    assert_eq!(deleted["messages"][0]["body"], "b", "the deferred one is not received");
    let left = server.json(&["peek", "orders"], "messages.json");
    assert_eq!(left["messages"].as_array().unwrap().len(), 1, "the deferred message stays: {left}");
}

/// On a terminal (`script` from util-linux gives the CLI one) purge asks first, and deletes
/// only after a yes, showing its progress.
#[test]
fn purge_on_a_terminal_asks_and_shows_progress() {
    let server = server();
    server.ok(&["queue", "create", "orders"]);
    server.ok(&["send", "orders", "x", "--repeat", "3"]);
    let on_terminal = |answer: &str| {
        let command = format!(
            "{} purge orders --http-endpoint {}",
            env!("CARGO_BIN_EXE_ironbus"),
            server.http
        );
        let mut child = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .env("SERVICEBUS_CONNECTION_STRING", &server.connection_string)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script (util-linux) runs");
        let mut stdin = child.stdin.take().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        stdin.write_all(answer.as_bytes()).unwrap();
        drop(stdin);
        let output = child.wait_with_output().unwrap();
        (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let (ok, seen) = on_terminal("n\n");
    assert!(!ok && seen.contains("delete every message of `orders`? [y/N]"), "{seen}");
    assert!(seen.contains("not confirmed; nothing was deleted"), "{seen}");
    assert_eq!(
        server.json(&["peek", "orders"], "messages.json")["messages"].as_array().unwrap().len(),
        3
    );
    let (ok, seen) = on_terminal("y\n");
    assert!(ok && seen.contains("deleted 3 messages") && seen.contains("purged orders"), "{seen}");
    assert_eq!(
        server.json(&["peek", "orders"], "messages.json")["messages"],
        serde_json::json!([])
    );
}
