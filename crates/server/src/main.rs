//! `ratewarden`: a rate limiter. `ratewarden --help` lists the commands.

use std::process::ExitCode;

use clap::Parser;
use ratewarden_server::cli::{Cli, Command};

/// Per-thread heaps: requests on different tokio workers never contend for an allocator lock.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => ratewarden_server::serve::main(args),
        Command::Simulate(args) => ratewarden_server::simulate::main(*args),
        Command::CheckConfig { file } => ratewarden_server::check_config::main(&file),
        Command::Explain {
            config,
            request,
            json,
        } => ratewarden_server::explain::main(&config, &request, json),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
