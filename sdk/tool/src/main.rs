//! `kk-plugin`: a plugin author's one tool, from an empty directory to a plugin serving in a
//! cluster (docs/plugins.md walks through it).
//!
//! * [`scaffold`]: `new`, a standalone plugin crate whose native test already passes;
//! * [`build`]: `build`, the crate to a component (and `componentize`, `world`);
//! * [`calls`]: `run` and `test`, calls under the controller's exact bounds and checks;
//! * [`manifest`]: `configmap`, `apply` and `keygen`, the plugin's ConfigMap, optionally signed;
//! * [`ask`]: `explain` and `what-if`, questions to a running controller.

mod ask;
mod build;
mod calls;
mod manifest;
mod scaffold;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "kk-plugin",
    version,
    about = "Write, test and ship policy plugins for karpenter-provider-kakaocloud"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Creates a plugin crate: policy, native test, a case, README and a CI snippet.
    New(scaffold::New),
    /// Builds a plugin crate to a WebAssembly component; prints its path, world, size and digest.
    Build(build::Build),
    /// Runs one case against a component under the controller's bounds; prints the answer
    /// and the time.
    Run(calls::Run),
    /// Runs a directory of cases against a component (the files the native tests run).
    Test(calls::Test),
    /// Prints the plugin's ConfigMap (YAML).
    Configmap(manifest::ConfigMapArgs),
    /// Applies the plugin's ConfigMap to the cluster of the current kubeconfig.
    Apply(manifest::ConfigMapArgs),
    /// Asks a running controller why a pod got its node, or why a node is (not) disrupted.
    Explain(ask::Explain),
    /// Replays the controller's latest instance-selector decisions on a candidate component.
    WhatIf(ask::WhatIf),
    /// Writes an ed25519 signing key and prints its trust.json entry.
    Keygen {
        /// Where the PKCS#8 key is written (mode 0600; never overwritten).
        key: PathBuf,
        /// The key's id in trust.json and in signatures.
        id: String,
    },
    /// Turns a core wasm module into a component; prints its world.
    Componentize { core: PathBuf, out: PathBuf },
    /// Prints the world a core module or component implements.
    World { wasm: PathBuf },
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kk-plugin: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    // Plugin log lines and the runtime's notes go to stderr; answers go to stdout.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KK_PLUGIN_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .without_time()
        .init();
    match Cli::parse().command {
        Command::New(args) => scaffold::new(&args),
        Command::Build(args) => build::build(&args),
        Command::Run(args) => calls::run(&args),
        Command::Test(args) => calls::test(&args),
        Command::Configmap(args) => manifest::print(&args),
        Command::Apply(args) => manifest::apply(&args),
        Command::Explain(args) => ask::explain(&args),
        Command::WhatIf(args) => ask::what_if(&args),
        Command::Keygen { key, id } => manifest::keygen(&key, &id),
        Command::Componentize { core, out } => {
            println!("{}", build::componentize(&core, &out)?);
            Ok(())
        }
        Command::World { wasm } => {
            let bytes = build::read(&wasm)?;
            println!("{}", build::world_of(&bytes)?);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
