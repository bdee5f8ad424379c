//! `cargo xtask compat [python|js|rust|all|config] [--store rocksdb|postgres] [--cluster]
//! [-- ARGS]`: the SDK compatibility suites against a real `ironbus` process, on RocksDB (the
//! default) or on a throwaway PostgreSQL that the task starts and removes ([`crate::postgres`]);
//! `--cluster` (PostgreSQL) against three cluster nodes instead, each kind of client connected to
//! a different node ([`cluster`]).
//!
//! Suites: `python` (official `azure-servicebus`, pytest), `js` (official `@azure/service-bus`,
//! node's test runner), `rust` (the unofficial `azservicebus` crate, `compat/rust`, its own cargo
//! workspace because it links OpenSSL); `all` (the default) runs the three. `mssuite` (only when
//! named) runs Microsoft's own `azure-servicebus` test suite, downloaded from PyPI at run time, with
//! the stand-ins and the ratchet of `compat/mssuite` (`compat/mssuite/run.py`). `console` (only
//! when named) runs the web console's browser tests, which start servers of their own
//! ([`console`]).
//!
//! Steps: build `ironbus` (release, with its testing-only feature `fault-injection`); install the SDKs if missing (`compat/python/.venv`,
//! `compat/js/node_modules`) and build `compat/rust`; generate the emulator-format `config.json`
//! with every queue the suites use and three namespace policies (Listen, Send, Manage); start the
//! server on free ports (AMQP, AMQPS, plain HTTP, HTTPS with its development CA, testing fault
//! injection on), its output in a log file; wait until the ports accept connections; run each
//! suite with `IRONBUS_CONNECTION_STRING`, `IRONBUS_ADMIN_CONNECTION_STRING`,
//! `IRONBUS_TLS_CONNECTION_STRING` (AMQP over TLS), `IRONBUS_HTTP_URL` (and every server's as
//! `IRONBUS_HTTP_URLS`), `IRONBUS_CA_CERT`,
//! `IRONBUS_POLICIES` and `NODE_EXTRA_CA_CERTS` set; stop the server. A failure prints the tail of the server log and leaves the work directory
//! (config + log) in place.
//!
//! `IRONBUS_COMPAT_SERVER=<executable>` runs that instead of building `ironbus`.
//!
//! ARGS (only with a single suite) go to the runner: `cargo xtask compat python -- -k peek`,
//! `cargo xtask compat js -- --test-name-pattern=peek`, `cargo xtask compat rust -- batch`.
//! `cargo xtask compat config` prints the generated config, for running a server by hand.
//!
//! Invariants:
//! - Every queue the Python and JS suites use is declared in [`QUEUES`], once for both; suite `s`
//!   gets it as `<s.prefix>-<name>`, so the suites never share a queue and every test has its own.
//!   The Rust suite has its one queue, [`RUST_QUEUE`].
//! - The server never outlives the task: [`Server`]'s `Drop` stops it, on every path.

use std::{
    env, fs,
    net::{Ipv4Addr, SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};

use crate::cluster::Nodes;
use crate::postgres::{self, StoreKind};
use crate::workspace_root;

/// The stores the suites run the server on.
const STORES: [StoreKind; 2] = [StoreKind::Rocksdb, StoreKind::Postgres];

/// The namespace the suites' connection string points at (the emulator's default name).
pub(crate) const NAMESPACE: &str = "sbemulatorns";
/// The development key the server uses when started without `--sas-key`.
pub(crate) const SAS_KEY: &str = "SAS_KEY_VALUE";
/// Names an executable to run instead of building `ironbus` (a debug build, a stand-in); it gets
/// the same arguments.
const SERVER_ENV: &str = "IRONBUS_COMPAT_SERVER";
/// How long the server may take to accept TCP connections after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one suite may run before it is killed (each test also has its own deadline).
const SUITE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How long Microsoft's suite may run (hundreds of tests, some waiting out lock durations).
const MSSUITE_TIMEOUT: Duration = Duration::from_secs(90 * 60);
/// Microsoft's suite addresses the namespace by host name alone (`localhost`), so its clients
/// use Service Bus's own ports: HTTPS 443 (the admin API, AMQP over WebSockets) and AMQPS 5671.
/// A run that includes it binds the server there (and fails early when they are taken).
const MSSUITE_HTTPS_PORT: u16 = 443;
const MSSUITE_AMQPS_PORT: u16 = 5671;

/// A queue property value in the emulator's config format.
#[derive(Debug, Clone, Copy)]
enum Prop {
    Str(&'static str),
    Int(i64),
    Bool(bool),
}

/// Every queue the suites use: its name (without the suite prefix) and the properties that differ
/// from [`DEFAULT_PROPERTIES`]. Short lock durations and TTLs keep the suites fast.
const QUEUES: &[(&str, &[(&str, Prop)])] = &[
    ("send-single", &[]),
    ("send-batch", &[]),
    ("receive-and-delete", &[]),
    ("complete", &[]),
    ("app-properties", &[]),
    // A message with a footer, which rhea writes before the body (send-receive.test.mjs).
    ("footer", &[]),
    ("abandon", &[]),
    ("defer", &[]),
    ("dead-letter", &[]),
    ("renew-lock", &[("LockDuration", Prop::Str("PT5S"))]),
    ("lock-expiry", &[("LockDuration", Prop::Str("PT5S")), ("MaxDeliveryCount", Prop::Int(2))]),
    ("peek", &[]),
    ("schedule", &[]),
    ("ttl", &[]),
    ("ttl-dlq", &[("DeadLetteringOnMessageExpiration", Prop::Bool(true))]),
    (
        "dedup",
        &[
            ("RequiresDuplicateDetection", Prop::Bool(true)),
            ("DuplicateDetectionHistoryTimeWindow", Prop::Str("PT1M")),
        ],
    ),
    ("partitioned", &[("EnablePartitioning", Prop::Bool(true)), ("PartitionCount", Prop::Int(16))]),
    (
        "partitioned-dedup",
        &[
            ("EnablePartitioning", Prop::Bool(true)),
            ("PartitionCount", Prop::Int(16)),
            ("RequiresDuplicateDetection", Prop::Bool(true)),
            ("DuplicateDetectionHistoryTimeWindow", Prop::Str("PT1M")),
        ],
    ),
    ("wrong-key", &[]),
    ("oversize", &[("MaxMessageSizeInKilobytes", Prop::Int(256))]),
    ("rest", &[("LockDuration", Prop::Str("PT10S"))]),
    ("metrics", &[]),
    // Batch delete with the 7.10 beta SDK (delete-messages.test.mjs).
    ("delete-messages", &[]),
    ("delete-dead-letters", &[]),
    ("purge-messages", &[]),
    ("delete-sessions", &[("RequiresSession", Prop::Bool(true))]),
    // AMQP over TLS and over WebSockets (test_transports.py, transports.test.mjs).
    ("tls", &[]),
    ("websocket", &[]),
];

/// The Rust suite's queue (`compat/rust` reads `IRONBUS_RUST_QUEUE`, default `rust-q`); its tests
/// share it and run one at a time.
const RUST_QUEUE: &str = "rust-q";
/// The queue of the Rust REST client test (`azure_messaging_servicebus`, `IRONBUS_RUST_REST_QUEUE`).
const RUST_REST_QUEUE: &str = "rust-rest";
/// The Rust transaction tests' queues (fe2o3-amqp's controller, `compat/rust/tests/transactions.rs`):
/// received from and sent through, and the send-via destination.
const RUST_TXN_QUEUES: [&str; 2] = ["rust-txn", "rust-txn-out"];

/// Every property of the emulator's queue format, with the value a queue gets unless it says
/// otherwise in [`QUEUES`].
const DEFAULT_PROPERTIES: &[(&str, Prop)] = &[
    ("DeadLetteringOnMessageExpiration", Prop::Bool(false)),
    ("DefaultMessageTimeToLive", Prop::Str("PT1H")),
    ("DuplicateDetectionHistoryTimeWindow", Prop::Str("PT20S")),
    ("ForwardDeadLetteredMessagesTo", Prop::Str("")),
    ("ForwardTo", Prop::Str("")),
    ("LockDuration", Prop::Str("PT30S")),
    ("MaxDeliveryCount", Prop::Int(10)),
    ("RequiresDuplicateDetection", Prop::Bool(false)),
    ("RequiresSession", Prop::Bool(false)),
];

/// One SDK suite.
#[derive(Debug)]
struct Suite {
    /// The name on the command line.
    name: &'static str,
    /// Its queues are `<prefix>-<name>` for every name in [`QUEUES`]; `None`: it uses none of them.
    prefix: Option<&'static str>,
    /// Its directory under the workspace root.
    dir: &'static str,
    /// Part of `all` (and of a bare `cargo xtask compat`); otherwise it runs only when named.
    in_all: bool,
    /// How long it may run before it is killed (each test also has its own deadline).
    timeout: Duration,
}

const SUITES: &[Suite] = &[
    Suite {
        name: "python",
        prefix: Some("py"),
        dir: "compat/python",
        in_all: true,
        timeout: SUITE_TIMEOUT,
    },
    Suite {
        name: "js",
        prefix: Some("js"),
        dir: "compat/js",
        in_all: true,
        timeout: SUITE_TIMEOUT,
    },
    Suite { name: "rust", prefix: None, dir: "compat/rust", in_all: true, timeout: SUITE_TIMEOUT },
    Suite {
        name: "mssuite",
        prefix: None,
        dir: "compat/mssuite",
        in_all: false,
        timeout: MSSUITE_TIMEOUT,
    },
];

pub(crate) fn run(args: &[String]) -> Result<()> {
    let (selection, runner_args) = match args.iter().position(|arg| arg == "--") {
        Some(dashes) => (&args[..dashes], &args[dashes + 1..]),
        None => (args, &[][..]),
    };
    // The console's browser tests start servers of their own (never in `all`).
    if selection.len() == 1 && selection[0] == "console" {
        return console::run(runner_args);
    }
    let clustered = selection.iter().any(|arg| arg == "--cluster");
    let selection: Vec<String> =
        selection.iter().filter(|arg| *arg != "--cluster").cloned().collect();
    let default_store = if clustered { StoreKind::Postgres } else { StoreKind::Rocksdb };
    let (store, selection) = postgres::take_store_flag(&selection, default_store, &STORES)?;
    if clustered && store != StoreKind::Postgres {
        bail!("--cluster runs on PostgreSQL: drop `--store {}`", store.name());
    }
    let suites: Vec<&Suite> = match selection.as_slice() {
        [] => SUITES.iter().filter(|suite| suite.in_all).collect(),
        [one] if one == "all" => SUITES.iter().filter(|suite| suite.in_all).collect(),
        [one] if one == "config" => {
            print_config()?;
            return Ok(());
        }
        [one] => {
            vec![SUITES.iter().find(|suite| suite.name == one.as_str()).with_context(|| {
                format!(
                    "unknown suite `{one}`; known: python, js, rust, mssuite, console, all, config"
                )
            })?]
        }
        _ => bail!(
            "`compat` takes one suite (python, js, rust, mssuite or all), got `{}`",
            selection.join(" ")
        ),
    };
    if clustered && suites.iter().any(|suite| suite.name == "mssuite") {
        bail!("Microsoft's suite needs Service Bus's own ports on one server: not with --cluster");
    }
    if !runner_args.is_empty() && suites.len() > 1 {
        bail!("arguments after `--` go to one suite's runner: name the suite (python, js or rust)");
    }

    let binary = match env::var_os(SERVER_ENV) {
        Some(path) => {
            eprintln!(
                "xtask: {SERVER_ENV} is set: running {} as the server",
                Path::new(&path).display()
            );
            PathBuf::from(path)
        }
        None => build_server()?,
    };
    for suite in &suites {
        prepare(suite)?;
    }

    let work = WorkDir::create("compat")?;
    let config = work.path.join("config.json");
    let text = serde_json::to_string_pretty(&config_json()).context("encoding the config")?;
    fs::write(&config, text + "\n").with_context(|| format!("writing {}", config.display()))?;
    let database = postgres::start_for(store)?;
    let (mut serving, target) = if clustered {
        let database = database.as_ref().context("a cluster needs PostgreSQL")?;
        cluster::start(&binary, &config, &work.path, database)?
    } else {
        let standard_ports = suites.iter().any(|suite| suite.name == "mssuite");
        start_one(&binary, &config, &work.path, store, database.as_ref(), standard_ports)?
    };

    let mut failed = Vec::new();
    for suite in &suites {
        eprintln!("xtask: compat suite `{}`", suite.name);
        let started = Instant::now();
        let outcome = run_suite(suite, &target, runner_args);
        let took = format!("{:.0} s", started.elapsed().as_secs_f64());
        match outcome {
            Ok(true) => eprintln!("xtask: compat suite `{}` passed ({took})", suite.name),
            Ok(false) => {
                eprintln!("xtask: compat suite `{}` failed ({took})", suite.name);
                failed.push(suite.name);
            }
            Err(err) => {
                eprintln!("xtask: compat suite `{}`: {err:#}", suite.name);
                failed.push(suite.name);
            }
        }
    }
    if let Some(exited) = serving.exited()? {
        eprintln!("xtask: {exited} during the suites");
        failed.push("server");
    }
    let logs = serving.logs();
    drop(serving);
    drop(database);

    let setup = if clustered { "a cluster of 3 nodes" } else { store.name() };
    if failed.is_empty() {
        work.remove();
        eprintln!("xtask: compat passed ({}; store {setup})", names(&suites));
        return Ok(());
    }
    for log in &logs {
        eprintln!("{}", log_tail(log, LOG_TAIL_LINES / logs.len()));
    }
    eprintln!("xtask: kept config and server logs in {}", work.path.display());
    bail!("compat failed: {}", failed.join(", "))
}

/// What serves the suites: one server, or the nodes of a cluster. Stops them when dropped.
#[derive(Debug)]
enum Serving {
    One { server: Server, log: PathBuf },
    Cluster(Nodes),
}

impl Serving {
    /// What exited by itself, if anything did.
    fn exited(&mut self) -> Result<Option<String>> {
        Ok(match self {
            Serving::One { server, .. } => {
                server.exited()?.map(|status| format!("the server exited ({status})"))
            }
            Serving::Cluster(nodes) => nodes.check_running().err().map(|err| format!("{err:#}")),
        })
    }

    /// Every server's log.
    fn logs(&self) -> Vec<PathBuf> {
        match self {
            Serving::One { log, .. } => vec![log.clone()],
            Serving::Cluster(nodes) => nodes.latest_logs(),
        }
    }
}

/// Starts one server on free loopback ports (HTTPS and AMQPS on Service Bus's own when
/// `standard_ports`), with the store `store`, and waits until it listens.
fn start_one(
    binary: &Path,
    config: &Path,
    work: &Path,
    store: StoreKind,
    database: Option<&postgres::Database>,
    standard_ports: bool,
) -> Result<(Serving, Target)> {
    let log = work.join("ironbus.log");
    let port = free_port()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let http = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    let (https, amqps) = if standard_ports {
        (standard_port(MSSUITE_HTTPS_PORT)?, standard_port(MSSUITE_AMQPS_PORT)?)
    } else {
        (free_port()?, free_port()?)
    };
    let https = SocketAddr::from((Ipv4Addr::LOCALHOST, https));
    let amqps = SocketAddr::from((Ipv4Addr::LOCALHOST, amqps));
    let data_dir = work.join("data");

    let mut command = Command::new(binary);
    command
        .arg("--amqp-addr")
        .arg(addr.to_string())
        .arg("--http-addr")
        .arg(http.to_string())
        .arg("--https-addr")
        .arg(https.to_string())
        .arg("--amqps-addr")
        .arg(amqps.to_string())
        .arg("--data-dir")
        .arg(&data_dir)
        .args(TESTING_FLAGS)
        .arg("--config")
        .arg(config)
        .args(postgres::server_args(store, database)?);
    let mut server = Server::start(command, &log)?;
    for listening in [addr, http, https, amqps] {
        server.wait_until_listening(listening, READY_TIMEOUT)?;
    }
    let target = Target {
        connection_string: connection_string(port),
        admin_connection_string: admin_connection_string(https.port()),
        tls_connection_string: tls_connection_string(amqps.port()),
        http_url: format!("http://{http}"),
        http_urls: vec![format!("http://{http}")],
        ca_cert: data_dir.join("tls").join("ca.pem"),
        namespaces_on_demand: true,
    };
    eprintln!(
        "xtask: server listening on {addr}, amqps {amqps}, http {http}, https {https}; log: {}",
        log.display()
    );
    Ok((Serving::One { server, log }, target))
}

/// The server flag every server of the suites needs: `--testing-fault-injection`, with which the
/// admin tests make a partition unavailable (`POST /$ironbus/faults`); the server is built with
/// the feature that has it ([`SERVER_FEATURES`]).
const FAULT_FLAGS: &[&str] = &["--testing-fault-injection"];

/// Flags of the single server the suites run against: the fault endpoint, and namespaces on
/// demand (`test_namespaces.py`, told by `IRONBUS_NAMESPACES_ON_DEMAND`), which a cluster node
/// refuses.
const TESTING_FLAGS: &[&str] = &["--testing-fault-injection", "--namespaces-on-demand"];

fn names(suites: &[&Suite]) -> String {
    suites.iter().map(|suite| suite.name).collect::<Vec<_>>().join(", ")
}

#[allow(clippy::print_stdout, reason = "the asked-for config goes to stdout")]
fn print_config() -> Result<()> {
    println!("{}", serde_json::to_string_pretty(&config_json())?);
    Ok(())
}

/// Where the suites find the server.
#[derive(Debug)]
struct Target {
    /// AMQP, for the messaging clients (`IRONBUS_CONNECTION_STRING`).
    connection_string: String,
    /// The HTTPS port, for the admin clients (`IRONBUS_ADMIN_CONNECTION_STRING`).
    admin_connection_string: String,
    /// AMQP over TLS, without `UseDevelopmentEmulator` (`IRONBUS_TLS_CONNECTION_STRING`).
    tls_connection_string: String,
    /// The plain HTTP listener: REST, /health, /metrics, faults (`IRONBUS_HTTP_URL`).
    http_url: String,
    /// Every server's plain HTTP listener, `http_url` among them (`IRONBUS_HTTP_URLS`, joined
    /// by spaces): a fault is injected on the node that runs the partition.
    http_urls: Vec<String>,
    /// The development CA the HTTPS listener's certificate chains to (`IRONBUS_CA_CERT`, and
    /// `NODE_EXTRA_CA_CERTS` for node).
    ca_cert: PathBuf,
    /// Whether the server creates namespaces on demand (`IRONBUS_NAMESPACES_ON_DEMAND=1`).
    namespaces_on_demand: bool,
}

/// The admin clients' connection string: `localhost` (the development certificate's name) and
/// the HTTPS port; the admin SDKs always speak HTTPS.
fn admin_connection_string(port: u16) -> String {
    format!(
        "Endpoint=sb://localhost:{port};SharedAccessKeyName=RootManageSharedAccessKey;\
         SharedAccessKey={SAS_KEY}"
    )
}

/// The messaging clients' connection string over TLS: `localhost` (the development certificate's
/// name) and the AMQPS port, without `UseDevelopmentEmulator`. Node takes the port from it;
/// Python always connects to 5671 unless given `custom_endpoint_address` (the tests do).
fn tls_connection_string(port: u16) -> String {
    format!(
        "Endpoint=sb://localhost:{port}/;SharedAccessKeyName=RootManageSharedAccessKey;\
         SharedAccessKey={SAS_KEY}"
    )
}

/// The connection string the suites use: the emulator's, with our port.
fn connection_string(port: u16) -> String {
    format!(
        "Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;\
         SharedAccessKey={SAS_KEY};UseDevelopmentEmulator=true"
    )
}

/// The Microsoft emulator's config.json, declaring every queue of [`QUEUES`] for every suite
/// that has a prefix, and [`RUST_QUEUE`].
/// Namespace policies beyond the root key, one for each set of rights Microsoft's suite asks its
/// preparer for (`name`, `key`, `rights`). The suites get them as `IRONBUS_POLICIES`
/// (`name:key:rights`, joined by `;`).
const POLICIES: [(&str, &str, &str); 3] = [
    ("compat-listen", "Y29tcGF0LWxpc3Rlbi1rZXktZm9yLXRlc3RzLW9ubHk=", "Listen"),
    ("compat-send", "Y29tcGF0LXNlbmQta2V5LWZvci10ZXN0cy1vbmx5", "Send"),
    ("compat-manage", "Y29tcGF0LW1hbmFnZS1rZXktZm9yLXRlc3RzLW9ubHk=", "Manage"),
];

fn policies_env() -> String {
    POLICIES.map(|(name, key, rights)| format!("{name}:{key}:{rights}")).join(";")
}

fn config_json() -> Value {
    let queue = |name: String, overrides: &[(&str, Prop)]| {
        let mut properties = Map::new();
        for (key, value) in DEFAULT_PROPERTIES.iter().chain(overrides) {
            properties.insert((*key).to_owned(), prop_json(*value));
        }
        json!({ "Name": name, "Properties": properties })
    };
    let mut queues = Vec::new();
    for prefix in SUITES.iter().filter_map(|suite| suite.prefix) {
        for (name, overrides) in QUEUES {
            queues.push(queue(format!("{prefix}-{name}"), overrides));
        }
    }
    queues.push(queue(RUST_QUEUE.to_owned(), &[]));
    queues.push(queue(RUST_REST_QUEUE.to_owned(), &[]));
    for name in RUST_TXN_QUEUES {
        // A short lock: a completion a commit failed to make shows within the test.
        queues.push(queue(name.to_owned(), &[("LockDuration", Prop::Str("PT5S"))]));
    }
    json!({
        "UserConfig": {
            "Namespaces": [{
                "Name": NAMESPACE,
                "Queues": queues,
                "Topics": [],
                "Policies": POLICIES.map(|(name, key, rights)| {
                    json!({ "Name": name, "Key": key, "Rights": rights })
                }),
            }],
            "Logging": { "Type": "File" },
        }
    })
}

fn prop_json(value: Prop) -> Value {
    match value {
        Prop::Str(text) => Value::from(text),
        Prop::Int(number) => Value::from(number),
        Prop::Bool(flag) => Value::from(flag),
    }
}

/// The server's cargo feature the suites need: `--testing-fault-injection`, with which the admin
/// tests make a partition unavailable (`POST /$ironbus/faults`). A default build has neither.
const SERVER_FEATURES: &[&str] = &["ironbus/fault-injection"];

/// Builds the server (release, with [`SERVER_FEATURES`]) and returns the path of its executable.
fn build_server() -> Result<PathBuf> {
    let mut binaries = build_release_with(&["ironbus"], SERVER_FEATURES, &["ironbus"])?;
    Ok(binaries.remove(0))
}

/// Builds `packages` (default features) and returns the executables of `binaries`, in that
/// order: optimised, unless `IRONBUS_XTASK_PROFILE=dev` asks for the dev profile (CI does): then
/// they are the binaries `cargo xtask ci`'s test step builds (every package, every feature), so
/// that RocksDB's C++ is compiled once for the tests and the servers alike.
pub(crate) fn build_release(packages: &[&str], binaries: &[&str]) -> Result<Vec<PathBuf>> {
    build_release_with(packages, &[], binaries)
}

/// [`build_release`] with the cargo `features` (`package/feature`) on.
fn build_release_with(
    packages: &[&str],
    features: &[&str],
    binaries: &[&str],
) -> Result<Vec<PathBuf>> {
    let features = features.join(",");
    let mut args = vec![];
    match std::env::var("IRONBUS_XTASK_PROFILE").as_deref() {
        // Exactly the build of `cargo xtask ci`'s test step, whose binaries (every feature on,
        // `fault-injection` included) are those: a build of the packages alone resolves their
        // dependencies' features differently (dev-dependencies add some), which would compile
        // RocksDB's C++ a second time.
        Ok("dev") => args.extend(crate::ci::TEST_ARGS.iter().copied().chain(["--no-run"])),
        Ok("release") | Err(_) => {
            args.extend(["build", "--release"]);
            for package in packages {
                args.extend(["-p", package]);
            }
            if !features.is_empty() {
                args.extend(["--features", features.as_str()]);
            }
        }
        Ok(other) => bail!("IRONBUS_XTASK_PROFILE must be `dev` or `release`, not `{other}`"),
    }
    args.push("--message-format=json-render-diagnostics");
    eprintln!("$ cargo {}", args.join(" "));
    let output = crate::cargo()
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .context("building: could not start cargo")?;
    if !output.status.success() {
        bail!("building {} failed ({})", packages.join(", "), output.status);
    }
    // The last artifact of each binary target that has an executable is the binary (not the
    // harness of its unit tests, which `cargo test` builds too).
    let mut found: Vec<Option<PathBuf>> = vec![None; binaries.len()];
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else { continue };
        let is_bin = message["reason"] == "compiler-artifact"
            && message["profile"]["test"] == false
            && message["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.contains(&"bin".into()));
        let (Some(name), Some(path)) =
            (message["target"]["name"].as_str(), message["executable"].as_str())
        else {
            continue;
        };
        if let (true, Some(index)) = (is_bin, binaries.iter().position(|b| *b == name)) {
            found[index] = Some(PathBuf::from(path));
        }
    }
    binaries
        .iter()
        .zip(found)
        .map(|(name, path)| path.with_context(|| format!("cargo built no `{name}` executable")))
        .collect()
}

/// Installs a suite's SDK when it is missing or its lock file changed since the last install.
fn prepare(suite: &Suite) -> Result<()> {
    let dir = workspace_root().join(suite.dir);
    match suite.name {
        "python" | "mssuite" => venv::prepare(&dir),
        "js" => {
            let lock = read(&dir.join("package-lock.json"))?;
            let stamp = dir.join("node_modules").join(".ironbus-package-lock.json");
            if fs::read_to_string(&stamp).ok().as_deref() == Some(lock.as_str()) {
                return Ok(());
            }
            let mut npm = Command::new("npm");
            npm.args(["ci", "--no-audit", "--no-fund"]);
            run_step("installing the JS SDK", &dir, npm)?;
            fs::write(&stamp, lock).with_context(|| format!("writing {}", stamp.display()))
        }
        "rust" => {
            // Build now, so the server does not wait through the build (cargo is incremental).
            let mut build = rust_tests(&dir);
            build.arg("--no-run");
            run_step("building the Rust suite", &dir, build)
        }
        other => bail!("no installer for suite `{other}`"),
    }
}

/// `cargo test` of the Rust suite, its build kept under the workspace's target directory.
fn rust_tests(dir: &Path) -> Command {
    let target = env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), |t| workspace_root().join(t));
    let mut cargo = crate::cargo();
    cargo.arg("test").arg("--manifest-path").arg(dir.join("Cargo.toml"));
    cargo.arg("--target-dir").arg(target.join("compat-rust"));
    cargo
}

/// Runs one suite; `Ok(false)` when its tests failed.
fn run_suite(suite: &Suite, target: &Target, runner_args: &[String]) -> Result<bool> {
    let dir = workspace_root().join(suite.dir);
    let mut command = match suite.name {
        "python" => {
            let mut pytest = Command::new(venv::python(&dir));
            pytest.args(["-m", "pytest", "-q"]);
            pytest.env("PYTHONDONTWRITEBYTECODE", "1");
            pytest
        }
        "mssuite" => {
            let mut harness = Command::new(venv::python(&dir));
            harness.arg("run.py");
            harness
        }
        "js" => {
            let mut node = Command::new("node");
            // Exit once the tests are done, even if a failed test left a connection behind.
            node.args(["--test", "--test-force-exit"]);
            node
        }
        "rust" => {
            let mut cargo_test = rust_tests(&dir);
            cargo_test.args(["--", "--ignored", "--test-threads", "1"]);
            cargo_test
        }
        other => bail!("no runner for suite `{other}`"),
    };
    command
        .args(runner_args)
        .current_dir(&dir)
        .env("IRONBUS_CONNECTION_STRING", &target.connection_string)
        .env("IRONBUS_ADMIN_CONNECTION_STRING", &target.admin_connection_string)
        .env("IRONBUS_TLS_CONNECTION_STRING", &target.tls_connection_string)
        .env("IRONBUS_HTTP_URL", &target.http_url)
        .env("IRONBUS_HTTP_URLS", target.http_urls.join(" "))
        .env("IRONBUS_CA_CERT", &target.ca_cert)
        .env("IRONBUS_NAMESPACES_ON_DEMAND", if target.namespaces_on_demand { "1" } else { "0" })
        .env("IRONBUS_POLICIES", policies_env())
        .env("NODE_EXTRA_CA_CERTS", &target.ca_cert);
    eprintln!("$ (cd {}) {}", suite.dir, shown(&command));
    let mut child =
        command.spawn().with_context(|| format!("could not start `{}`", shown(&command)))?;
    match wait_at_most(&mut child, suite.timeout)? {
        Some(status) => Ok(status.success()),
        None => {
            eprintln!(
                "xtask: suite `{}` still running after {:?}: killed",
                suite.name, suite.timeout
            );
            Ok(false)
        }
    }
}

/// Runs a setup command in `dir` after echoing it; an error names `step`.
fn run_step(step: &str, dir: &Path, mut command: Command) -> Result<()> {
    let shown = shown(&command);
    eprintln!("$ (cd {}) {shown}", dir.strip_prefix(workspace_root()).unwrap_or(dir).display());
    let status = command
        .current_dir(dir)
        .status()
        .with_context(|| format!("{step}: could not start `{shown}`"))?;
    if !status.success() {
        bail!("{step} failed ({status}): `{shown}`");
    }
    Ok(())
}

pub(crate) fn shown(command: &Command) -> String {
    let mut parts = vec![command.get_program().to_string_lossy().into_owned()];
    parts.extend(command.get_args().map(|arg| arg.to_string_lossy().into_owned()));
    parts.join(" ")
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// `port` on the loopback interface, after checking that nothing listens there (the readiness
/// check would otherwise find the other listener).
fn standard_port(port: u16) -> Result<u16> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).with_context(|| {
        format!("Microsoft's suite needs 127.0.0.1:{port} (Service Bus's port) and it is taken")
    })?;
    Ok(port)
}

mod cluster;
pub(crate) mod console;
mod process;
#[cfg(test)]
mod tests;
mod venv;

pub(crate) use process::{free_port, log_tail, wait_at_most, Server, WorkDir, LOG_TAIL_LINES};
pub(crate) use venv::python_sdk;
