//! `ironbus`: the default server — the broker engine on the chosen store (RocksDB by default, in
//! `--data-dir`), the AMQP and HTTP transports, SAS keys and entities declared in a config file,
//! Prometheus metrics on `/metrics` — until Ctrl-C or SIGTERM. The assembly is the `ironbus`
//! library's (`src/lib.rs`); this is flags in, library calls out. An error ends it with its
//! whole chain of sources (what failed, where, and why), as `anyhow` prints it.
//!
//! `ironbus <command> ...` runs the operators' command line instead (`ironbus-cli`): a client
//! of a running ironbus, the emulator or Azure Service Bus.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::Parser;
use ironbus_metrics::PrometheusExporter;

/// An Azure Service Bus compatible message broker. Without a command it runs the server; with
/// one it is a client of a running namespace (see `ironbus help <command>`).
#[derive(Debug, Parser)]
#[command(name = "ironbus", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(flatten)]
    server: ironbus::Args,
    #[command(subcommand)]
    command: Option<ironbus_cli::Command>,
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    if let Some(command) = cli.command {
        return Ok(ironbus_cli::run(command).await);
    }
    let args = cli.server;
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
    Ok(ExitCode::SUCCESS)
}
