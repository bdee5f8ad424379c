//! The ironbus nodes of `cargo xtask cluster`: each with its own loopback ports (AMQP, plain
//! HTTP, the cluster link), its own directory `node-<i>/` in the work directory (data, one log
//! per start: `ironbus-<incarnation>.log`), all on the same PostgreSQL and secret.
//!
//! A node keeps its ports and id across restarts. `/health` over plain HTTP says when it is up.
//!
//! `cargo xtask compat --cluster` starts its nodes here too, with TLS listeners
//! ([`Nodes::serve_tls`]: AMQPS and HTTPS, one certificate for all) and flags of its own
//! ([`Nodes::extra_args`]).

use std::{
    collections::BTreeMap,
    fs,
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::compat::{self, Server, LOG_TAIL_LINES};
use crate::rig::time_seed;

/// One node: where it listens and, while it runs, its process.
#[derive(Debug)]
struct Node {
    id: String,
    amqp: SocketAddr,
    http: SocketAddr,
    link: SocketAddr,
    /// AMQPS and HTTPS, when the nodes serve TLS.
    tls: Option<(SocketAddr, SocketAddr)>,
    dir: PathBuf,
    /// Its own `--postgres-url`, instead of the one every node shares.
    postgres_url: Option<String>,
    /// Starts so far; the current log is `ironbus-<incarnation - 1>.log`.
    incarnation: u32,
    server: Option<Server>,
}

impl Node {
    fn log(&self, incarnation: u32) -> PathBuf {
        self.dir.join(format!("ironbus-{incarnation}.log"))
    }
}

/// The nodes of one run.
#[derive(Debug)]
pub(crate) struct Nodes {
    binary: PathBuf,
    config: PathBuf,
    work: PathBuf,
    postgres_url: String,
    /// Shared by every node: at least 16 bytes.
    secret: String,
    lease_ms: u64,
    /// False: plain servers (no `--cluster`), for a one-node baseline.
    clustered: bool,
    /// More arguments for every node, after the others (`cargo xtask bench cluster`:
    /// `--stores N`; `cargo xtask compat --cluster`).
    extra_args: Vec<String>,
    /// Nodes declared from now on listen for AMQPS and HTTPS too ([`Nodes::serve_tls`]).
    tls: bool,
    nodes: Vec<Node>,
}

impl Nodes {
    pub(crate) fn new(
        binary: &Path,
        config: &Path,
        work: &Path,
        postgres_url: String,
        lease_ms: u64,
        clustered: bool,
    ) -> Nodes {
        Nodes {
            binary: binary.to_owned(),
            config: config.to_owned(),
            work: work.to_owned(),
            postgres_url,
            secret: format!("{:016x}{:016x}", time_seed(), time_seed().rotate_left(17)),
            lease_ms,
            clustered,
            extra_args: Vec::new(),
            tls: false,
            nodes: Vec::new(),
        }
    }

    /// Gives every node started from now on `args` as well (after the others).
    pub(crate) fn add_args(&mut self, args: &[&str]) {
        self.extra_args.extend(args.iter().map(|arg| (*arg).to_owned()));
    }

    /// Nodes declared from now on also serve AMQPS and HTTPS, all with the certificate of the
    /// first node: its development certificate, generated under its data directory when it
    /// starts (start it first: [`Nodes::tls_dir`]). The others get it as `--tls-cert`/`--tls-key`.
    pub(crate) fn serve_tls(&mut self) {
        self.tls = true;
    }

    /// Where the first node keeps the development certificate every TLS listener serves
    /// (`ca.pem`, the CA clients trust; `cert.pem`, `key.pem`).
    pub(crate) fn tls_dir(&self) -> PathBuf {
        self.work.join(node_id(0)).join("data").join("tls")
    }

    /// Declares one more node (not started): its id, ports and directory. Returns its index.
    pub(crate) fn add(&mut self) -> Result<usize> {
        let index = self.nodes.len();
        let id = node_id(index);
        let dir = self.work.join(&id);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = || compat::free_port().map(|port| SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        let (amqp, http, link) = (port()?, port()?, port()?);
        let tls = if self.tls { Some((port()?, port()?)) } else { None };
        let postgres_url = None;
        self.nodes.push(Node {
            id,
            amqp,
            http,
            link,
            tls,
            dir,
            postgres_url,
            incarnation: 0,
            server: None,
        });
        Ok(index)
    }

    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The nodes that run (started and not killed or stopped since).
    pub(crate) fn running(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&index| self.nodes[index].server.is_some()).collect()
    }

    /// The process id of node `index`, while it runs.
    pub(crate) fn pid(&self, index: usize) -> Option<u32> {
        self.nodes[index].server.as_ref()?.child.as_ref().map(std::process::Child::id)
    }

    /// The node's id, as in its `--node-id` and in progress lines.
    pub(crate) fn name(&self, index: usize) -> &str {
        &self.nodes[index].id
    }

    pub(crate) fn amqp(&self, index: usize) -> SocketAddr {
        self.nodes[index].amqp
    }

    /// Gives node `index` a `--postgres-url` of its own (from its next start).
    pub(super) fn set_postgres_url(&mut self, index: usize, url: String) {
        self.nodes[index].postgres_url = Some(url);
    }

    /// The log of node `index`'s current (or last) run.
    pub(super) fn log(&self, index: usize) -> PathBuf {
        let node = &self.nodes[index];
        node.log(node.incarnation.saturating_sub(1))
    }

    /// The plain HTTP listener: REST, `/health`, `/metrics`.
    pub(crate) fn http(&self, index: usize) -> SocketAddr {
        self.nodes[index].http
    }

    /// The AMQPS and HTTPS listeners, when the node serves TLS.
    pub(crate) fn tls(&self, index: usize) -> Option<(SocketAddr, SocketAddr)> {
        self.nodes[index].tls
    }

    fn command(&self, node: &Node) -> Command {
        let url = node.postgres_url.as_deref().unwrap_or(&self.postgres_url);
        let mut command = Command::new(&self.binary);
        command
            .args(["--store", "postgres", "--postgres-url", url])
            .arg("--data-dir")
            .arg(node.dir.join("data"))
            .arg("--amqp-addr")
            .arg(node.amqp.to_string())
            .arg("--http-addr")
            .arg(node.http.to_string())
            .arg("--config")
            .arg(&self.config);
        match node.tls {
            Some((amqps, https)) => {
                command.arg("--amqps-addr").arg(amqps.to_string());
                command.arg("--https-addr").arg(https.to_string());
                if node.id != node_id(0) {
                    let dir = self.tls_dir();
                    command.arg("--tls-cert").arg(dir.join("cert.pem"));
                    command.arg("--tls-key").arg(dir.join("key.pem"));
                }
            }
            None => {
                command.args(["--amqps-addr", "off", "--https-addr", "off"]);
            }
        }
        if self.clustered {
            command
                .args(["--cluster", "--node-id", &node.id])
                .arg("--link-addr")
                .arg(node.link.to_string())
                .args(["--cluster-secret", &self.secret])
                .arg("--lease-ms")
                .arg(self.lease_ms.to_string());
        }
        command.args(&self.extra_args);
        command
    }

    /// Starts node `index` (again), its output in a new log.
    pub(crate) fn start(&mut self, index: usize) -> Result<()> {
        let node = &self.nodes[index];
        if node.server.is_some() {
            bail!("{} is already running", node.id);
        }
        let server = Server::start(self.command(node), &node.log(node.incarnation))?;
        let node = &mut self.nodes[index];
        node.server = Some(server);
        node.incarnation += 1;
        Ok(())
    }

    /// Waits until node `index` answers `GET /health` with 200; returns how long that took.
    pub(crate) fn wait_ready(&mut self, index: usize, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        loop {
            let node = &mut self.nodes[index];
            let Some(server) = node.server.as_mut() else { bail!("{} is not running", node.id) };
            if let Some(status) = server.exited()? {
                bail!(
                    "{} exited before it was healthy ({status})\n{}",
                    node.id,
                    compat::log_tail(&node.log(node.incarnation - 1), LOG_TAIL_LINES)
                );
            }
            if health(node.http).is_some_and(|(status, _)| status == 200) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                bail!(
                    "{} did not answer /health with 200 within {timeout:?}\n{}",
                    node.id,
                    compat::log_tail(&node.log(node.incarnation - 1), LOG_TAIL_LINES)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Where every partition of `entity` runs, as node `index`'s `/health` says (`None`: it did
    /// not answer, or has no cluster view).
    pub(crate) fn placement(&self, index: usize, entity: &str) -> Option<Placement> {
        let (_, body) = health(self.nodes[index].http)?;
        parse_placement(&body, entity)
    }

    /// Where every partition of every entity runs, if every running node's `/health` says the
    /// same (`None`: they differ, or one did not answer).
    pub(crate) fn agreed(&self) -> Option<BTreeMap<String, Placement>> {
        let mut views = self.running().into_iter().map(|index| {
            let (_, body) = health(self.nodes[index].http)?;
            parse_placements(&body)
        });
        let first = views.next()??;
        views.all(|view| view.as_ref() == Some(&first)).then_some(first)
    }

    /// SIGKILLs node `index` and waits for it to exit.
    pub(super) fn kill(&mut self, index: usize) -> Result<()> {
        let node = &mut self.nodes[index];
        let Some(mut server) = node.server.take() else { bail!("{} is not running", node.id) };
        let Some(mut child) = server.child.take() else { bail!("{} has no process", node.id) };
        child.kill().with_context(|| format!("sending SIGKILL to {}", node.id))?;
        child.wait().with_context(|| format!("waiting for {} to exit", node.id))?;
        Ok(())
    }

    /// Stops node `index` with SIGTERM (SIGKILL after 5 s); returns how long it took to exit.
    pub(super) fn terminate(&mut self, index: usize) -> Result<Duration> {
        let node = &mut self.nodes[index];
        let Some(mut server) = node.server.take() else { bail!("{} is not running", node.id) };
        let started = Instant::now();
        server.stop();
        Ok(started.elapsed())
    }

    /// Fails when a node that should run has exited.
    pub(crate) fn check_running(&mut self) -> Result<()> {
        for node in &mut self.nodes {
            if let Some(server) = node.server.as_mut() {
                if let Some(status) = server.exited()? {
                    bail!("{} exited by itself ({status})", node.id);
                }
            }
        }
        Ok(())
    }

    /// Every node's latest log.
    pub(crate) fn latest_logs(&self) -> Vec<PathBuf> {
        let started = self.nodes.iter().filter(|node| node.incarnation > 0);
        started.map(|node| node.log(node.incarnation - 1)).collect()
    }
}

/// The id of the node declared `index`-th: `node-<index + 1>`.
fn node_id(index: usize) -> String {
    format!("node-{}", index + 1)
}

/// `GET /health` at `addr` over plain HTTP/1.0: the status code and the body, or `None` when the
/// node does not answer.
pub(super) fn health(addr: SocketAddr) -> Option<(u16, String)> {
    let timeout = Duration::from_millis(500);
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.take(64 * 1024).read_to_string(&mut response).ok()?;
    parse_response(&response)
}

/// Where the partitions of an entity run: for each partition in order, its owner's node id
/// (`None`: no node runs it) and whether it is available.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placement(pub(crate) Vec<(Option<String>, bool)>);

impl Placement {
    /// The partitions `node` runs.
    pub(crate) fn of(&self, node: &str) -> Vec<usize> {
        let owned = self.0.iter().enumerate();
        owned.filter(|(_, (owner, _))| owner.as_deref() == Some(node)).map(|(p, _)| p).collect()
    }

    /// Whether every partition runs somewhere and is available.
    pub(crate) fn settled(&self) -> bool {
        !self.0.is_empty() && self.0.iter().all(|(owner, available)| owner.is_some() && *available)
    }
}

/// The placement of `entity` in a cluster node's `/health` body (`partitions`: objects with
/// `entity`, `partition`, `owner`, `available`).
fn parse_placement(body: &str, entity: &str) -> Option<Placement> {
    Some(parse_placements(body)?.remove(entity).unwrap_or_default())
}

/// The placement of every entity in a cluster node's `/health` body, by entity name.
fn parse_placements(body: &str) -> Option<BTreeMap<String, Placement>> {
    let health: serde_json::Value = serde_json::from_str(body).ok()?;
    let mut partitions: Vec<(&str, u64, Option<String>, bool)> = health["partitions"]
        .as_array()?
        .iter()
        .filter_map(|p| {
            let owner = p["owner"].as_str().map(str::to_owned);
            Some((p["entity"].as_str()?, p["partition"].as_u64()?, owner, p["available"] == true))
        })
        .collect();
    partitions.sort_by_key(|(entity, partition, _, _)| (*entity, *partition));
    let mut placements = BTreeMap::<String, Placement>::new();
    for (entity, _, owner, available) in partitions {
        placements.entry(entity.to_owned()).or_default().0.push((owner, available));
    }
    Some(placements)
}

/// The status code and body of an HTTP/1.x response.
fn parse_response(response: &str) -> Option<(u16, String)> {
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Some((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_gives_its_status_and_body() {
        let ok = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"status\":\"ok\"}";
        assert_eq!(parse_response(ok), Some((200, "{\"status\":\"ok\"}".to_owned())));
        assert_eq!(parse_response("HTTP/1.1 503 Service Unavailable\r\n\r\n").unwrap().0, 503);
        assert_eq!(parse_response("garbage"), None);
    }

    #[test]
    fn placement_lists_owners_in_partition_order() {
        let body = r#"{"status":"Available","node":"node-1","partitions":[
            {"entity":"cluster","partition":1,"owner":"node-2","available":true},
            {"entity":"other","partition":0,"owner":"node-1","available":true},
            {"entity":"cluster","partition":0,"owner":"node-1","available":true},
            {"entity":"cluster","partition":2,"owner":null,"available":false}]}"#;
        let placement = parse_placement(body, "cluster").unwrap();
        assert_eq!(placement.of("node-1"), [0]);
        assert_eq!(placement.of("node-2"), [1]);
        assert!(!placement.settled());
        assert!(Placement(vec![(Some("a".into()), true)]).settled());
        assert!(!Placement(vec![]).settled());
        assert_eq!(parse_placement(r#"{"status":"Available"}"#, "cluster"), None);
        let all = parse_placements(body).unwrap();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["cluster", "other"]);
        assert_eq!(all["other"].of("node-1"), [0]);
    }

    #[test]
    fn tls_nodes_serve_the_first_nodes_certificate_with_the_extra_flags() {
        let work = std::env::temp_dir().join(format!("xtask-tls-nodes-{}", std::process::id()));
        let config = work.join("config.json");
        let mut nodes = Nodes::new(Path::new("ironbus"), &config, &work, String::new(), 3000, true);
        nodes.serve_tls();
        nodes.add_args(&["--testing-fault-injection"]);
        let (a, b) = (nodes.add().unwrap(), nodes.add().unwrap());
        let (amqps, https) = nodes.tls(b).unwrap();
        let second = compat::shown(&nodes.command(&nodes.nodes[b]));
        let cert = nodes.tls_dir().join("cert.pem");
        for expected in [
            format!("--amqps-addr {amqps} --https-addr {https} --tls-cert {}", cert.display()),
            "--testing-fault-injection".to_owned(),
        ] {
            assert!(second.contains(&expected), "{second} lacks {expected}");
        }
        let first = compat::shown(&nodes.command(&nodes.nodes[a]));
        assert!(!first.contains("--tls-cert") && !first.contains("--amqps-addr off"), "{first}");
        fs::remove_dir_all(&work).unwrap();
    }

    #[test]
    fn nodes_get_ids_ports_and_cluster_flags_of_their_own() {
        let work = std::env::temp_dir().join(format!("xtask-nodes-{}", std::process::id()));
        let mut nodes = Nodes::new(
            Path::new("ironbus"),
            &work.join("config.json"),
            &work,
            "postgresql://u@127.0.0.1:1/postgres".to_owned(),
            3000,
            true,
        );
        let (a, b) = (nodes.add().unwrap(), nodes.add().unwrap());
        assert_eq!((nodes.name(a), nodes.name(b)), ("node-1", "node-2"));
        assert_ne!(nodes.amqp(a), nodes.amqp(b));
        let shown = compat::shown(&nodes.command(&nodes.nodes[b]));
        for expected in [
            "--store postgres --postgres-url postgresql://u@127.0.0.1:1/postgres",
            "--cluster --node-id node-2 --link-addr 127.0.0.1:",
            "--amqps-addr off",
            "--https-addr off",
            "--lease-ms 3000",
        ] {
            assert!(shown.contains(expected), "{shown} lacks {expected}");
        }
        assert!(nodes.secret.len() >= 16);
        nodes.clustered = false;
        assert!(!compat::shown(&nodes.command(&nodes.nodes[a])).contains("--cluster"));
        fs::remove_dir_all(&work).unwrap();
    }
}
