//! The ironbus nodes of `cargo xtask cluster`: each with its own loopback ports (AMQP, plain
//! HTTP, the cluster link), its own directory `node-<i>/` in the work directory (data, one log
//! per start: `ironbus-<incarnation>.log`), all on the same PostgreSQL and secret.
//!
//! A node keeps its ports and id across restarts. `/health` over plain HTTP says when it is up.

use std::{
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
    /// More arguments for every node (`cargo xtask bench cluster`: `--stores N`).
    extra_args: Vec<String>,
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
            nodes: Vec::new(),
        }
    }

    /// Gives every node started from now on `args` as well.
    pub(crate) fn add_args(&mut self, args: &[&str]) {
        self.extra_args.extend(args.iter().map(|arg| (*arg).to_owned()));
    }

    /// Declares one more node (not started): its id, ports and directory. Returns its index.
    pub(crate) fn add(&mut self) -> Result<usize> {
        let index = self.nodes.len();
        let id = format!("node-{}", index + 1);
        let dir = self.work.join(&id);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = || compat::free_port().map(|port| SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        let (amqp, http, link) = (port()?, port()?, port()?);
        let postgres_url = None;
        self.nodes.push(Node {
            id,
            amqp,
            http,
            link,
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

    fn command(&self, node: &Node) -> Command {
        let url = node.postgres_url.as_deref().unwrap_or(&self.postgres_url);
        let mut command = Command::new(&self.binary);
        command
            .args(["--store", "postgres", "--postgres-url", url])
            .arg("--data-dir")
            .arg(node.dir.join("data"))
            .arg("--amqp-addr")
            .arg(node.amqp.to_string())
            .args(["--amqps-addr", "off"])
            .arg("--http-addr")
            .arg(node.http.to_string())
            .args(["--https-addr", "off"])
            .arg("--config")
            .arg(&self.config);
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
    pub(super) fn check_running(&mut self) -> Result<()> {
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
    pub(super) fn latest_logs(&self) -> Vec<PathBuf> {
        let started = self.nodes.iter().filter(|node| node.incarnation > 0);
        started.map(|node| node.log(node.incarnation - 1)).collect()
    }
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    let health: serde_json::Value = serde_json::from_str(body).ok()?;
    let mut partitions: Vec<(u64, Option<String>, bool)> = health["partitions"]
        .as_array()?
        .iter()
        .filter(|p| p["entity"] == entity)
        .filter_map(|p| {
            let owner = p["owner"].as_str().map(str::to_owned);
            Some((p["partition"].as_u64()?, owner, p["available"] == true))
        })
        .collect();
    partitions.sort_by_key(|(partition, _, _)| *partition);
    Some(Placement(
        partitions.into_iter().map(|(_, owner, available)| (owner, available)).collect(),
    ))
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
