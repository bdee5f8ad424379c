//! `ironbus`: the default server — the broker engine on the chosen store (RocksDB by default, in
//! `--data-dir`), the AMQP and HTTP transports, SAS keys and entities declared in a config file,
//! Prometheus metrics on `/metrics` — until Ctrl-C or SIGTERM. The assembly is the `ironbus`
//! library's (`src/lib.rs`); this is flags in, library calls out. An error ends it with its
//! whole chain of sources (what failed, where, and why), as `anyhow` prints it.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use ironbus_metrics::PrometheusExporter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Colours for a person at a terminal; plain text into a file or a pipe.
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = ironbus::Args::parse();
    // Before the broker opens, so that nothing it records is lost.
    // A cluster node labels every series with its id, so that one Prometheus scrapes them all.
    let metrics = match (&args.cluster.node_id, args.cluster.cluster) {
        (Some(node), true) => PrometheusExporter::install_labelled(&[("node", node)])?,
        _ => PrometheusExporter::install()?,
    };
    let started = ironbus::start(args, &metrics).await?;
    #[allow(clippy::print_stdout, reason = "the connection strings are for people to copy")]
    for connection_string in started.connection_strings() {
        println!("{connection_string}");
    }
    started.server.serve_until(ironbus::shutdown_requested()).await?;
    Ok(())
}
