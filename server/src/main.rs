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
    let args = ironbus::Args::parse();
    // Colours for a person at a terminal; plain text into a file or a pipe; JSON on request.
    let log_format = args.log_format;
    ironbus::output::init_logging(log_format);
    // Before the broker opens, so that nothing it records is lost.
    // A cluster node labels every series with its id, so that one Prometheus scrapes them all.
    let metrics = match (&args.cluster.node_id, args.cluster.cluster) {
        (Some(node), true) => PrometheusExporter::install_labelled(&[("node", node)])?,
        _ => PrometheusExporter::install()?,
    };
    let started = ironbus::start(args, &metrics).await?;
    started.announce(log_format);
    started.server.serve_until(ironbus::shutdown_requested()).await?;
    Ok(())
}
