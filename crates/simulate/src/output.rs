//! Where decisions go: a table, JSON lines, or totals.

use std::io::{self, Write};

use ratewarden_core::{Decision, Outcome};

use super::{millis, nanos, seconds, Arrival, Lineup, Report};

/// Receives a run's decisions as they are made.
pub trait Sink {
    /// Called once before the first arrival.
    fn start(&mut self, lineup: &Lineup) -> io::Result<()>;
    /// Called for each arrival with one decision per limit of the lineup.
    fn arrival(&mut self, arrival: &Arrival, decisions: &[Decision]) -> io::Result<()>;
    /// Called once after the last arrival.
    fn finish(&mut self, lineup: &Lineup, report: &Report) -> io::Result<()>;
}

/// A row per arrival and a column per algorithm, with totals at the end.
pub struct Table<W> {
    out: W,
    widths: Vec<usize>,
}

const TIME_WIDTH: usize = 8;
const KEY_WIDTH: usize = 10;
const COST_WIDTH: usize = 5;

impl<W: Write> Table<W> {
    /// A table written to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            widths: Vec::new(),
        }
    }

    fn cell(d: &Decision) -> String {
        match d.outcome {
            Outcome::Allowed => "pass".to_owned(),
            Outcome::Delayed { delay_ns } => format!("pass+{}ms", millis(delay_ns)),
            Outcome::Limited { retry_after_ns } => format!("no {}ms", millis(retry_after_ns)),
            Outcome::CostTooHigh => "never".to_owned(),
        }
    }
}

impl<W: Write> Sink for Table<W> {
    fn start(&mut self, lineup: &Lineup) -> io::Result<()> {
        writeln!(self.out, "# {}", lineup.describe())?;
        write!(
            self.out,
            "{:<TIME_WIDTH$} {:<KEY_WIDTH$} {:>COST_WIDTH$}",
            "time_s", "key", "cost"
        )?;
        self.widths = lineup
            .limits
            .iter()
            .map(|l| l.kind().as_str().len().max(12))
            .collect();
        for (limit, width) in lineup.limits.iter().zip(&self.widths) {
            write!(self.out, "  {:<width$}", limit.kind().as_str())?;
        }
        writeln!(self.out)
    }

    fn arrival(&mut self, arrival: &Arrival, decisions: &[Decision]) -> io::Result<()> {
        write!(
            self.out,
            "{:<TIME_WIDTH$} {:<KEY_WIDTH$} {:>COST_WIDTH$}",
            seconds(arrival.at),
            arrival.key,
            arrival.cost
        )?;
        for (d, width) in decisions.iter().zip(&self.widths) {
            write!(self.out, "  {:<width$}", Self::cell(d))?;
        }
        writeln!(self.out)
    }

    fn finish(&mut self, _lineup: &Lineup, report: &Report) -> io::Result<()> {
        write!(
            self.out,
            "{:<w$}",
            "passed",
            w = TIME_WIDTH + KEY_WIDTH + COST_WIDTH + 2
        )?;
        for (totals, width) in report.totals.iter().zip(&self.widths) {
            let cell = format!("{}/{}", totals.passed(), report.arrivals);
            write!(self.out, "  {cell:<width$}")?;
        }
        writeln!(self.out)
    }
}

/// One JSON object per arrival and algorithm:
/// `{"t":0.7,"key":"k","cost":1,"algorithm":"gcra","allowed":true,"outcome":"allowed",
/// "limit":5,"remaining":4,"reset_after_ms":200,"retry_after_ms":null,"delay_ms":0}`.
///
/// Numbers are exact decimals (seconds for `t`, milliseconds for the rest).
pub struct Jsonl<W> {
    out: W,
    names: Vec<&'static str>,
}

impl<W: Write> Jsonl<W> {
    /// JSON lines written to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            names: Vec::new(),
        }
    }
}

impl<W: Write> Sink for Jsonl<W> {
    fn start(&mut self, lineup: &Lineup) -> io::Result<()> {
        self.names = lineup.limits.iter().map(|l| l.kind().as_str()).collect();
        Ok(())
    }

    fn arrival(&mut self, arrival: &Arrival, decisions: &[Decision]) -> io::Result<()> {
        let key = serde_json::to_string(&arrival.key).map_err(io::Error::other)?;
        let t = seconds(arrival.at);
        for (d, name) in decisions.iter().zip(&self.names) {
            let (outcome, retry) = match d.outcome {
                Outcome::Allowed => ("allowed", "null".to_owned()),
                Outcome::Delayed { .. } => ("delayed", "null".to_owned()),
                Outcome::Limited { retry_after_ns } => ("limited", millis(retry_after_ns)),
                Outcome::CostTooHigh => ("cost-too-high", "null".to_owned()),
            };
            writeln!(
                self.out,
                "{{\"t\":{t},\"key\":{key},\"cost\":{},\"algorithm\":\"{name}\",\
                 \"allowed\":{},\"outcome\":\"{outcome}\",\"limit\":{},\"remaining\":{},\
                 \"reset_after_ms\":{},\"retry_after_ms\":{retry},\"delay_ms\":{}}}",
                arrival.cost,
                d.is_allowed(),
                d.limit,
                d.remaining,
                millis(d.reset_after_ns),
                millis(nanos(d.delay())),
            )?;
        }
        Ok(())
    }

    fn finish(&mut self, _lineup: &Lineup, _report: &Report) -> io::Result<()> {
        Ok(())
    }
}

/// Only the totals per algorithm.
pub struct Summary<W> {
    out: W,
}

impl<W: Write> Summary<W> {
    /// Totals written to `out`.
    pub fn new(out: W) -> Self {
        Self { out }
    }
}

impl<W: Write> Sink for Summary<W> {
    fn start(&mut self, _lineup: &Lineup) -> io::Result<()> {
        Ok(())
    }

    fn arrival(&mut self, _arrival: &Arrival, _decisions: &[Decision]) -> io::Result<()> {
        Ok(())
    }

    fn finish(&mut self, lineup: &Lineup, report: &Report) -> io::Result<()> {
        writeln!(self.out, "# {}", lineup.describe())?;
        writeln!(
            self.out,
            "{:<16} {:>10} {:>10} {:>10} {:>10} {:>14}",
            "algorithm", "passed", "delayed", "rejected", "never", "max_delay_ms"
        )?;
        for (limit, t) in lineup.limits.iter().zip(&report.totals) {
            writeln!(
                self.out,
                "{:<16} {:>10} {:>10} {:>10} {:>10} {:>14}",
                limit.kind().as_str(),
                t.passed(),
                t.delayed,
                t.limited,
                t.never,
                millis(t.max_delay)
            )?;
        }
        writeln!(self.out, "{} arrivals", report.arrivals)
    }
}
