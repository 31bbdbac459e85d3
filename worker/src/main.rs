//! `videoflow-worker`: parses arguments and wires; the work lives in the library and in
//! `videoflow-core`.
//!
//! Today it validates and compiles Flow files; the node runtime (default mode), `provision`
//! and `run` land with issues #3, #5 and #6.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use videoflow_core::compile::compile;
use videoflow_core::errors::EXIT_USER;
use videoflow_core::load::parse_flow;
use videoflow_core::validate::{Diagnostic, has_errors, validate_flow};

/// Runs videoflow nodes; also checks and compiles Flow files.
#[derive(Parser)]
#[command(
    name = "videoflow-worker",
    version,
    about = "videoflow worker: checks and compiles Flow files (node runtime, provision and local run are coming)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a Flow file and print every problem with its path and remedy.
    ///
    /// Exits 0 when the flow is valid (warnings allowed), 2 when it has errors.
    Validate {
        /// The Flow file (YAML or JSON), the same document `kubectl apply` takes.
        flow: PathBuf,
    },
    /// Compile a Flow file into `specs.json` (the per-node records provisioning reads).
    ///
    /// Prints the records as JSON on stdout; exits 2 when the flow is invalid.
    Compile {
        /// The Flow file (YAML or JSON).
        flow: PathBuf,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ERROR [VF_CONFIG]: {e:#}");
            ExitCode::from(EXIT_USER as u8)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate { flow } => {
            let text = read(&flow)?;
            let diags = match parse_flow(&text) {
                Ok(doc) => validate_flow(&doc),
                Err(diags) => diags,
            };
            report(&flow, &diags);
            if has_errors(&diags) {
                return Ok(ExitCode::from(EXIT_USER as u8));
            }
            println!("{}: valid", flow.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Compile { flow } => {
            let text = read(&flow)?;
            let compiled = parse_flow(&text).and_then(|doc| compile(&doc));
            match compiled {
                Ok(c) => {
                    eprintln!(
                        "flow {} run {} ({} nodes)",
                        c.flow_id,
                        c.run_id,
                        c.nodes.len()
                    );
                    println!("{}", c.specs_json());
                    Ok(ExitCode::SUCCESS)
                }
                Err(diags) => {
                    report(&flow, &diags);
                    Ok(ExitCode::from(EXIT_USER as u8))
                }
            }
        }
    }
}

fn read(path: &PathBuf) -> anyhow::Result<String> {
    std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the Flow file {}", path.display()))
}

fn report(path: &std::path::Path, diags: &[Diagnostic]) {
    for d in diags {
        eprintln!("{}: {d}", path.display());
    }
}
