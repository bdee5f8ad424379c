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
    // Colours for a person at a terminal; plain text into a file or a pipe.
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = cli.server;
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
    Ok(ExitCode::SUCCESS)
}
