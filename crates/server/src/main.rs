//! `ratewarden`: a rate limiter. `ratewarden --help` lists the commands.

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use ratewarden_server::cli::{Cli, Command};

/// Per-thread heaps: requests on different tokio workers never contend for an allocator lock.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => ratewarden_server::run::main(args),
        Command::Simulate(args) => ratewarden_simulate::main(*args),
        Command::CheckConfig { file } => ratewarden_server::check_config::main(&file),
        Command::Explain {
            config,
            request,
            json,
        } => ratewarden_server::explain::main(&config, &request, json),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "ratewarden",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { dir: None } => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
        Command::Man { dir: Some(dir) } => clap_mangen::generate_to(Cli::command(), &dir)
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| anyhow::anyhow!("writing the man pages into {}: {e}", dir.display())),
    };
    match result {
        Ok(code) => code,
        // A reader that closed the pipe (`ratewarden check-config … | head -1`) has seen
        // enough: not an error to report.
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Whether `e` is, or was caused by, writing to a closed pipe.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
