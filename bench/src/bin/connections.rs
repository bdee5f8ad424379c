//! `ironbus-connections`: what idle AMQP connections cost the broker (`cargo xtask bench
//! connections`).
//!
//! Starts an `ironbus` server (memory store, plain AMQP on a free loopback port, HTTP off), then
//! opens `--connections` connections the way an idle SDK client leaves them — protocol header,
//! `open` with an idle time-out, one `begin` — and holds them, sending an empty frame (a
//! heartbeat) every 20 s. It reports the server's resident memory before and with the
//! connections, per connection, and how long fresh handshakes take while they are held (is the
//! broker still responsive?). Exit status 1 when the RSS exceeds `--max-rss-mb`, a connection
//! failed or was closed by the server, or a fresh handshake failed.
//!
//! The process raises its open-file limit (and the server's, which it inherits) to fit the
//! connections. The server needs one descriptor per connection plus a few of its own, so the
//! hard limit must exceed the count (or be raisable: CAP_SYS_RESOURCE).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::BytesMut;
use clap::Parser;
use fe2o3_amqp_types::performatives::{Begin, Open, Performative};
use ironbus_transport_amqp::frame::{self, ProtocolHeader};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often a held connection sends a heartbeat (the broker's idle time-out is 240 s).
const HEARTBEAT: Duration = Duration::from_secs(20);

#[derive(Debug, Parser)]
#[command(about = "Holds many idle AMQP connections to a fresh ironbus and reports its memory")]
struct Args {
    /// The server binary to start.
    #[arg(long, default_value = "target/release/ironbus")]
    server: PathBuf,
    /// Idle connections to hold.
    #[arg(long, default_value_t = 20_000)]
    connections: usize,
    /// Seconds to hold them once all are open (RSS is sampled meanwhile).
    #[arg(long, default_value_t = 10)]
    hold: u64,
    /// Handshakes in flight while opening.
    #[arg(long, default_value_t = 200)]
    concurrency: usize,
    /// Fresh handshakes timed while the connections are held.
    #[arg(long, default_value_t = 50)]
    probes: usize,
    /// Fail when the server's RSS with the connections held exceeds this.
    #[arg(long, default_value_t = 400)]
    max_rss_mb: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build();
    let result = runtime.context("tokio runtime").and_then(|rt| rt.block_on(run(args)));
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The server process; killed and its data directory removed when dropped.
struct Server {
    child: Child,
    data_dir: PathBuf,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

impl Server {
    fn start(binary: &PathBuf) -> Result<Server> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let data_dir =
            std::env::temp_dir().join(format!("ironbus-connections-{}", std::process::id()));
        let child = Command::new(binary)
            .args(["--store", "memory", "--http-addr", "off", "--https-addr", "off"])
            .args(["--amqps-addr", "off"])
            .arg("--amqp-addr")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(&data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("could not start {}", binary.display()))?;
        Ok(Server { child, data_dir, addr })
    }

    /// Resident set size in bytes, from /proc.
    fn rss(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .context("no VmRSS in /proc/<pid>/status")?;
        Ok(kb * 1024)
    }
}

/// Raises the soft open-file limit (this process's and so the server's) to fit the connections
/// plus some room: the hard limit if that is enough, else a higher hard limit (root only).
fn raise_open_file_limit(connections: usize) -> Result<()> {
    let want = connections as u64 + 64;
    let (soft, hard) = rlimit::Resource::NOFILE.get()?;
    if soft >= want {
        return Ok(());
    }
    if hard >= want {
        return Ok(rlimit::Resource::NOFILE.set(hard, hard)?);
    }
    rlimit::Resource::NOFILE.set(want, want).with_context(|| {
        format!(
            "{connections} connections need an open-file limit of {want}, the hard limit is \
             {hard} and cannot be raised here (it needs CAP_SYS_RESOURCE); ask for fewer"
        )
    })
}

/// `header`, `open` and `begin` as an idle SDK connection sends them.
fn handshake_bytes(n: usize) -> BytesMut {
    let mut out = BytesMut::new();
    out.extend_from_slice(&ProtocolHeader::Amqp.bytes());
    let open = Open {
        container_id: format!("idle-{n}"),
        hostname: Some("localhost".into()),
        max_frame_size: 65_536.into(),
        channel_max: 0.into(),
        idle_time_out: Some(60_000),
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    frame::write_performative(&mut out, 0, &Performative::Open(open));
    let begin = Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 5000,
        outgoing_window: 5000,
        handle_max: 255.into(),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    frame::write_performative(&mut out, 0, &Performative::Begin(begin));
    out
}

/// Connects and completes the handshake: the broker's header, `open` and `begin` read back.
async fn handshake(addr: SocketAddr, n: usize) -> Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.context("connect")?;
    stream.write_all(&handshake_bytes(n)).await.context("write handshake")?;
    let mut header = [0u8; 8];
    stream.read_exact(&mut header).await.context("read header")?;
    if header != ProtocolHeader::Amqp.bytes() {
        bail!("unexpected protocol header {header:02x?}");
    }
    for expected in [0x10u8, 0x11] {
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).await.context("read frame size")?;
        let size = u32::from_be_bytes(size) as usize;
        if !(8..=65_536).contains(&size) {
            bail!("frame size {size}");
        }
        let mut rest = vec![0u8; size - 4];
        stream.read_exact(&mut rest).await.context("read frame")?;
        let body = &rest[usize::from(rest[0]) * 4 - 4..];
        if body.get(..3) != Some(&[0x00, 0x53, expected][..]) {
            bail!("expected performative {expected:#04x}, got {:02x?}", &body[..body.len().min(8)]);
        }
    }
    Ok(stream)
}

/// Keeps `stream` open, answering with a heartbeat every [`HEARTBEAT`]; counts it in `closed`
/// if the broker closes it.
async fn hold(mut stream: TcpStream, closed: Arc<AtomicUsize>) {
    let mut buf = [0u8; 256];
    let mut beat = tokio::time::interval(HEARTBEAT);
    beat.tick().await;
    loop {
        tokio::select! {
            read = stream.read(&mut buf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    closed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
            _ = beat.tick() => {
                if stream.write_all(&[0, 0, 0, 8, 2, 0, 0, 0]).await.is_err() {
                    closed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

#[allow(clippy::print_stdout, reason = "the report is this tool's output")]
async fn run(args: Args) -> Result<bool> {
    raise_open_file_limit(args.connections)?;
    let server = Server::start(&args.server)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(server.addr).await.is_err() {
        if Instant::now() > deadline {
            bail!("the server did not listen on {} within 60 s", server.addr);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(handshake(server.addr, usize::MAX).await.context("warm-up handshake")?);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = server.rss()?;

    let started = Instant::now();
    let gate = Arc::new(Semaphore::new(args.concurrency.max(1)));
    let closed = Arc::new(AtomicUsize::new(0));
    let mut opening = tokio::task::JoinSet::new();
    for n in 0..args.connections {
        let permit = gate.clone().acquire_owned().await?;
        let closed = closed.clone();
        let addr = server.addr;
        opening.spawn(async move {
            let stream = handshake(addr, n).await;
            drop(permit);
            stream.map(|s| tokio::spawn(hold(s, closed)))
        });
    }
    let mut failed = 0usize;
    let mut first_error = None;
    let mut holders = Vec::with_capacity(args.connections);
    while let Some(joined) = opening.join_next().await {
        match joined? {
            Ok(holder) => holders.push(holder),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    let open_time = started.elapsed();

    let mut peak = 0u64;
    let mut latencies = Vec::with_capacity(args.probes);
    let hold_until = Instant::now() + Duration::from_secs(args.hold);
    let mut probe_failures = 0usize;
    for n in 0..args.probes {
        let t = Instant::now();
        match handshake(server.addr, usize::MAX - 1 - n).await {
            Ok(_stream) => latencies.push(t.elapsed()),
            Err(e) => {
                probe_failures += 1;
                first_error.get_or_insert(e);
            }
        }
        peak = peak.max(server.rss()?);
    }
    while Instant::now() < hold_until {
        peak = peak.max(server.rss()?);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    peak = peak.max(server.rss()?);
    let closed_by_server = closed.load(Ordering::Relaxed);
    for holder in &holders {
        holder.abort();
    }

    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    };
    let per_connection = peak.saturating_sub(before) / holders.len().max(1) as u64;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "connections {} held ({} failed, {} closed by the server) in {:.1} s",
        holders.len(),
        failed,
        closed_by_server,
        open_time.as_secs_f64()
    );
    println!(
        "server RSS: {:.1} MiB before, {:.1} MiB peak with the connections; {} B per connection",
        mib(before),
        mib(peak),
        per_connection
    );
    println!(
        "fresh handshakes meanwhile: {} ok, {} failed; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        probe_failures,
        pct(0.5),
        pct(0.99),
        latencies.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    );
    println!(
        "{{\"connections\":{},\"failed\":{},\"closed\":{},\"rss_before\":{},\"rss_peak\":{},\"per_connection\":{},\"handshake_p50_ms\":{:.3},\"handshake_p99_ms\":{:.3}}}",
        holders.len(),
        failed,
        closed_by_server,
        before,
        peak,
        per_connection,
        pct(0.5),
        pct(0.99)
    );
    if let Some(e) = first_error {
        eprintln!("first failure: {e:#}");
    }
    let ok = failed == 0
        && probe_failures == 0
        && closed_by_server == 0
        && peak <= args.max_rss_mb * 1024 * 1024;
    if peak > args.max_rss_mb * 1024 * 1024 {
        eprintln!("server RSS {:.1} MiB exceeds --max-rss-mb {}", mib(peak), args.max_rss_mb);
    }
    Ok(ok)
}
