//! `ratewarden simulate retries`: retry storms, simulated and drawn.
//!
//! N clients send to a server of capacity C that fails for D seconds; each client retries
//! by a strategy, from none to full jitter with a retry budget and adaptive throttling. The
//! clients run `ratewarden-client`'s own [`Policy`](ratewarden_client::Policy) on a
//! simulated clock: the numbers are those of the code that ships, not of a copy.

mod model;
mod plot;

use std::process::ExitCode;

use crate::args::RetriesArgs;
pub use model::{run, Figures, Run, Scenario, Second, Strategy};

/// The table of figures, a row per run.
pub fn table(scenario: &Scenario, runs: &[Run]) -> String {
    let mut out = format!(
        "{} clients x {}/s against {}/s, down from {:?} for {:?}, {:?} in all; timeout {:?}, queue {:?}, {} attempts\n\n",
        scenario.clients,
        scenario.rate,
        scenario.capacity,
        scenario.outage_at,
        scenario.outage,
        scenario.duration,
        scenario.timeout,
        scenario.queue,
        scenario.attempts,
    );
    out.push_str(&format!(
        "{:<22} {:>9} {:>9} {:>14} {:>10} {:>10} {:>10} {:>10}\n",
        "strategy",
        "requests",
        "attempts",
        "amplification",
        "in outage",
        "peak load",
        "succeeded",
        "recovery"
    ));
    for r in runs {
        let f = r.figures(scenario);
        let recovery = f
            .recovery
            .map_or_else(|| "never".to_owned(), |s| format!("{s} s"));
        out.push_str(&format!(
            "{:<22} {:>9} {:>9} {:>13.2}x {:>9.2}x {:>9.2}x {:>9.1}% {:>10}\n",
            r.strategy.name(),
            f.requests,
            f.attempts,
            f.amplification,
            f.outage_amplification,
            f.peak_load,
            f.success * 100.0,
            recovery,
        ));
    }
    out
}

/// Runs the command.
///
/// # Errors
///
/// An invalid scenario, or an SVG that cannot be written.
pub fn main(args: RetriesArgs) -> anyhow::Result<ExitCode> {
    let scenario = args.scenario()?;
    let strategies = if args.strategy.is_empty() {
        Strategy::ALL.to_vec()
    } else {
        args.strategy.clone()
    };
    let runs: Vec<Run> = strategies.iter().map(|s| run(&scenario, *s)).collect();
    // A closed pipe (`| head`) ends the table, not the run: the picture is still drawn.
    super::write_stdout(&table(&scenario, &runs))?;
    if let Some(path) = &args.svg {
        plot::write_svg(path, &scenario, &runs)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
