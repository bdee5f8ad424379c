//! `cargo xtask compat [python|js|rust|all|config] [--store rocksdb|postgres] [-- ARGS]`: the
//! SDK compatibility suites against a real `ironbus` process, on RocksDB (the default) or on a
//! throwaway PostgreSQL that the task starts and removes ([`crate::postgres`]).
//!
//! Suites: `python` (official `azure-servicebus`, pytest), `js` (official `@azure/service-bus`,
//! node's test runner), `rust` (the unofficial `azservicebus` crate, `compat/rust`, its own cargo
//! workspace because it links OpenSSL); `all` (the default) runs the three. `mssuite` (only when
//! named) runs Microsoft's own `azure-servicebus` test suite, downloaded from PyPI at run time, with
//! the stand-ins and the ratchet of `compat/mssuite` (`compat/mssuite/run.py`).
//!
//! Steps: build `ironbus` (release, with its testing-only feature `fault-injection`); install the SDKs if missing (`compat/python/.venv`,
//! `compat/js/node_modules`) and build `compat/rust`; generate the emulator-format `config.json`
//! with every queue the suites use and three namespace policies (Listen, Send, Manage); start the
//! server on free ports (AMQP, AMQPS, plain HTTP, HTTPS with its development CA, testing fault
//! injection on), its output in a log file; wait until the ports accept connections; run each
//! suite with `IRONBUS_CONNECTION_STRING`, `IRONBUS_ADMIN_CONNECTION_STRING`,
//! `IRONBUS_TLS_CONNECTION_STRING` (AMQP over TLS), `IRONBUS_HTTP_URL`, `IRONBUS_CA_CERT`,
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
    io::{BufRead, BufReader},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};

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
/// How long the server may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines of the server log shown when something failed.
pub(crate) const LOG_TAIL_LINES: usize = 80;

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
    let (store, selection) = postgres::take_store_flag(selection, StoreKind::Rocksdb, &STORES)?;
    let suites: Vec<&Suite> = match selection.as_slice() {
        [] => SUITES.iter().filter(|suite| suite.in_all).collect(),
        [one] if one == "all" => SUITES.iter().filter(|suite| suite.in_all).collect(),
        [one] if one == "config" => {
            print_config()?;
            return Ok(());
        }
        [one] => {
            vec![SUITES.iter().find(|suite| suite.name == one.as_str()).with_context(|| {
                format!("unknown suite `{one}`; known: python, js, rust, mssuite, all, config")
            })?]
        }
        _ => bail!(
            "`compat` takes one suite (python, js, rust, mssuite or all), got `{}`",
            selection.join(" ")
        ),
    };
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
    let log = work.path.join("ironbus.log");
    let port = free_port()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let http = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    let standard_ports = suites.iter().any(|suite| suite.name == "mssuite");
    let (https, amqps) = if standard_ports {
        (standard_port(MSSUITE_HTTPS_PORT)?, standard_port(MSSUITE_AMQPS_PORT)?)
    } else {
        (free_port()?, free_port()?)
    };
    let https = SocketAddr::from((Ipv4Addr::LOCALHOST, https));
    let amqps = SocketAddr::from((Ipv4Addr::LOCALHOST, amqps));
    let data_dir = work.path.join("data");
    let database = postgres::start_for(store)?;

    let mut command = Command::new(&binary);
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
        // Lets the admin tests make a partition unavailable (POST /$ironbus/faults); the
        // server is built with the feature that has it (SERVER_FEATURES).
        .arg("--testing-fault-injection")
        .arg("--config")
        .arg(&config)
        .args(postgres::server_args(store, database.as_ref())?);
    let mut server = Server::start(command, &log)?;
    for listening in [addr, http, https, amqps] {
        server.wait_until_listening(listening, READY_TIMEOUT)?;
    }
    let target = Target {
        connection_string: connection_string(port),
        admin_connection_string: admin_connection_string(https.port()),
        tls_connection_string: tls_connection_string(amqps.port()),
        http_url: format!("http://{http}"),
        ca_cert: data_dir.join("tls").join("ca.pem"),
    };
    eprintln!(
        "xtask: server listening on {addr}, amqps {amqps}, http {http}, https {https}; log: {}",
        log.display()
    );

    let mut failed = Vec::new();
    for suite in &suites {
        eprintln!("xtask: compat suite `{}`", suite.name);
        match run_suite(suite, &target, runner_args) {
            Ok(true) => eprintln!("xtask: compat suite `{}` passed", suite.name),
            Ok(false) => failed.push(suite.name),
            Err(err) => {
                eprintln!("xtask: compat suite `{}`: {err:#}", suite.name);
                failed.push(suite.name);
            }
        }
    }
    if let Some(status) = server.exited()? {
        eprintln!("xtask: the server exited during the suites ({status})");
        failed.push("server");
    }
    server.stop();
    drop(database);

    if failed.is_empty() {
        work.remove();
        eprintln!("xtask: compat passed ({}; store {})", names(&suites), store.name());
        return Ok(());
    }
    eprintln!("{}", log_tail(&log, LOG_TAIL_LINES));
    eprintln!("xtask: kept config and server log in {}", work.path.display());
    bail!("compat failed: {}", failed.join(", "))
}

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
    /// The development CA the HTTPS listener's certificate chains to (`IRONBUS_CA_CERT`, and
    /// `NODE_EXTRA_CA_CERTS` for node).
    ca_cert: PathBuf,
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
/// order: optimised, unless `IRONBUS_XTASK_PROFILE=dev` asks for the dev profile (CI does, so
/// that RocksDB's C++ is compiled once, for the tests and the servers alike).
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
    let mut args = vec!["build"];
    match std::env::var("IRONBUS_XTASK_PROFILE").as_deref() {
        Ok("dev") => {}
        Ok("release") | Err(_) => args.push("--release"),
        Ok(other) => bail!("IRONBUS_XTASK_PROFILE must be `dev` or `release`, not `{other}`"),
    }
    for package in packages {
        args.extend(["-p", package]);
    }
    if !features.is_empty() {
        args.extend(["--features", features.as_str()]);
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
    // The last artifact of each binary target that has an executable is the binary.
    let mut found: Vec<Option<PathBuf>> = vec![None; binaries.len()];
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else { continue };
        let is_bin = message["reason"] == "compiler-artifact"
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
        .env("IRONBUS_CA_CERT", &target.ca_cert)
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

/// A free TCP port on the loopback interface: bind port 0, read the port, close.
pub(crate) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .context("binding 127.0.0.1:0 for a free port")?;
    Ok(listener.local_addr().context("reading the bound address")?.port())
}

/// `port` on the loopback interface, after checking that nothing listens there (the readiness
/// check would otherwise find the other listener).
fn standard_port(port: u16) -> Result<u16> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).with_context(|| {
        format!("Microsoft's suite needs 127.0.0.1:{port} (Service Bus's port) and it is taken")
    })?;
    Ok(port)
}

/// Waits for `child` to exit, at most `timeout`; kills it after that (`Ok(None)`).
pub(crate) fn wait_at_most(child: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().context("waiting for a child process")? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            // Already exited in between is fine: kill only fails then.
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// The server process. Dropping it stops the process (SIGTERM, then SIGKILL).
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) child: Option<Child>,
    log: PathBuf,
}

impl Server {
    /// Starts `command` with stdout and stderr appended to `log`.
    pub(crate) fn start(mut command: Command, log: &Path) -> Result<Server> {
        let out = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().context("sharing the log file")?;
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        eprintln!("$ {} > {} 2>&1", shown(&command), log.display());
        let child =
            command.spawn().with_context(|| format!("could not start `{}`", shown(&command)))?;
        Ok(Server { child: Some(child), log: log.to_owned() })
    }

    /// Waits until `addr` accepts TCP connections; fails if the process exits first or `timeout`
    /// passes, showing the log.
    pub(crate) fn wait_until_listening(
        &mut self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited()? {
                bail!(
                    "the server exited before listening on {addr} ({status})\n{}",
                    log_tail(&self.log, LOG_TAIL_LINES)
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(250)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the server did not listen on {addr} within {timeout:?}\n{}",
                    log_tail(&self.log, LOG_TAIL_LINES)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The exit status, if the process has exited.
    pub(crate) fn exited(&mut self) -> Result<Option<ExitStatus>> {
        match &mut self.child {
            Some(child) => child.try_wait().context("checking on the server process"),
            None => Ok(None),
        }
    }

    /// Stops the process: SIGTERM (graceful shutdown), then SIGKILL after [`STOP_TIMEOUT`].
    pub(crate) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        let terminated = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if terminated {
            let deadline = Instant::now() + STOP_TIMEOUT;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                thread::sleep(Duration::from_millis(50));
            }
            eprintln!(
                "xtask: the server did not stop within {STOP_TIMEOUT:?} of SIGTERM: killing it"
            );
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `lines` lines of the log, framed, for failure reports.
pub(crate) fn log_tail(log: &Path, lines: usize) -> String {
    let Ok(file) = fs::File::open(log) else {
        return format!("(no server log at {})", log.display());
    };
    let all: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
    let start = all.len().saturating_sub(lines);
    format!(
        "---- server log {} (last {} of {} lines) ----\n{}\n---- end of server log ----",
        log.display(),
        all.len() - start,
        all.len(),
        all[start..].join("\n")
    )
}

/// A fresh directory under the system temp dir for the config and the server log (and, for the
/// crash test, the data directory).
#[derive(Debug)]
pub(crate) struct WorkDir {
    pub(crate) path: PathBuf,
}

impl WorkDir {
    /// `ironbus-<task>-<pid>-<nanos>` under the temp dir.
    pub(crate) fn create(task: &str) -> Result<WorkDir> {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let path = env::temp_dir().join(format!("ironbus-{task}-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(WorkDir { path })
    }

    /// Removes the directory (after a successful run; failures keep it for inspection).
    pub(crate) fn remove(self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests;
mod venv;

pub(crate) use venv::python_sdk;
