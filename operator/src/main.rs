//! `videoflow-operator`: parses arguments and wires; the logic lives in the library.

use std::io::Write;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// The videoflow operator: runs Flow resources (videoflow.io/v1alpha1) on Kubernetes.
///
/// Today it only prints the Flow CRD (`crd`); the controller (`run`) and offline rendering of
/// a Flow's child objects (`render`) arrive with later slices of issue #7.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the Flow CustomResourceDefinition as YAML.
    ///
    /// Generated from the Rust types, so it always matches this binary.
    ///
    /// Refresh the committed copy (a test fails when it drifts):
    ///   cargo run -p videoflow-operator -- crd > crds/flows.videoflow.io.yaml
    ///
    /// Install it into a cluster:
    ///   videoflow-operator crd | kubectl apply --server-side -f -
    #[command(verbatim_doc_comment)]
    Crd,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => {
            let yaml = videoflow_operator::crd::crd_yaml();
            let mut out = std::io::stdout().lock();
            out.write_all(yaml.as_bytes())
                .and_then(|()| out.flush())
                .context("writing the CRD to stdout")?;
        }
    }
    Ok(())
}
