//! `videoflow-operator`: parses arguments and wires; the logic lives in the library.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use videoflow_operator::render::{self, RenderConfig};

/// The videoflow operator: runs Flow resources (videoflow.io/v1alpha1) on Kubernetes.
///
/// Today it prints the Flow CRD (`crd`) and renders a Flow's child objects offline
/// (`render`); the controller (`run`) arrives with a later slice of issue #7.
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
    /// Print the Kubernetes objects the operator would create for a Flow, as YAML.
    ///
    /// Works offline: the same pure rendering the controller applies. The output can be
    /// inspected, diffed, or applied by hand:
    ///   videoflow-operator render -f flow.yaml --nats-url nats://nats:4222 \
    ///     | kubectl apply --server-side -f -
    #[command(verbatim_doc_comment)]
    Render {
        /// The Flow file (YAML or JSON), as given to `kubectl apply`; `-` reads stdin.
        #[arg(short = 'f', long = "file", value_name = "FLOW")]
        file: PathBuf,
        /// Worker image when the Flow's spec.image.worker is absent.
        #[arg(long, value_name = "IMAGE", default_value = render::DEFAULT_WORKER_IMAGE)]
        image: String,
        /// Pull policy when the Flow's spec.image.pullPolicy is absent.
        #[arg(long, value_name = "POLICY", default_value = "IfNotPresent")]
        image_pull_policy: String,
        /// NATS URL when the Flow names no broker (spec.broker.url / urlFrom).
        #[arg(long, value_name = "URL")]
        nats_url: Option<String>,
        /// Namespace when the Flow's metadata has none.
        #[arg(long, short = 'n', value_name = "NAMESPACE", default_value = "default")]
        namespace: String,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let text = match cli.command {
        Command::Crd => videoflow_operator::crd::crd_yaml(),
        Command::Render {
            file,
            image,
            image_pull_policy,
            nats_url,
            namespace,
        } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading the Flow from stdin")?
            } else {
                std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?
            };
            let flow = match render::load::flow_from_text(&text) {
                Ok(flow) => flow,
                Err(diags) => {
                    let lines: Vec<String> = diags.iter().map(ToString::to_string).collect();
                    bail!(
                        "{} is not a valid Flow:\n{}",
                        file.display(),
                        lines.join("\n")
                    );
                }
            };
            let config = RenderConfig {
                worker_image: image,
                image_pull_policy,
                namespace,
                nats_url,
            };
            let rendered = render::render(&flow, &config)
                .map_err(|e| anyhow::anyhow!("{e}\n  remedy: {}", e.remedy()))?;
            rendered.to_yaml()?
        }
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")?;
    Ok(())
}
