//! Reading traces: one arrival a line, `time_s[,cost[,key]]`, streamed.

use std::fmt;
use std::io::BufRead;

use ratewarden_core::{parse_decimal, NANOS_PER_SEC};

/// The lesson's Figure 1: a burst of 14 in 0.7 s straddling the one-second mark, then a steady
/// 4 a second.
pub const FIGURE1: &str = include_str!("../fixtures/figure1.csv");

/// One arrival of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// The line it came from (1-based).
    pub line: usize,
    /// Nanoseconds since the trace's time 0.
    pub at: u64,
    /// Its cost.
    pub cost: u64,
    /// Its key; arrivals with different keys have separate state.
    pub key: String,
}

/// A line that is not an arrival, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// The line (1-based).
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// Streams arrivals out of a trace, one line at a time.
pub struct TraceReader<R> {
    input: R,
    buf: String,
    line: usize,
    bytes: u64,
    last: u64,
    seen_data: bool,
}

impl<R: BufRead> TraceReader<R> {
    /// Reads a trace from `input`.
    pub fn new(input: R) -> Self {
        Self {
            input,
            buf: String::new(),
            line: 0,
            bytes: 0,
            last: 0,
            seen_data: false,
        }
    }

    /// Bytes consumed so far, for progress.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    fn parse(&mut self) -> Result<Option<Arrival>, String> {
        let text = self.buf.trim();
        if text.is_empty() || text.starts_with('#') {
            return Ok(None);
        }
        let fields: Vec<&str> = text.split(',').map(str::trim).collect();
        if fields.len() > 3 {
            return Err(format!(
                "{} fields, expected at most 3: time_s[,cost[,key]]",
                fields.len()
            ));
        }
        let at = match parse_decimal(fields[0], NANOS_PER_SEC) {
            Ok(at) => at,
            // A header line such as `time_s,cost,key` is allowed before the data.
            Err(_) if !self.seen_data && fields[0].starts_with(|c: char| c.is_alphabetic()) => {
                return Ok(None);
            }
            Err(e) => return Err(format!("time `{}`: {e}", fields[0])),
        };
        let cost = match fields.get(1).filter(|c| !c.is_empty()) {
            Some(c) => c
                .parse()
                .map_err(|_| format!("cost `{c}` is not a whole number of units"))?,
            None => 1,
        };
        let key = fields
            .get(2)
            .filter(|k| !k.is_empty())
            .map_or("default", |k| k);
        if at < self.last {
            return Err(format!(
                "time {} s goes back before the previous arrival at {} s; sort the trace",
                fields[0],
                super::seconds(self.last)
            ));
        }
        self.seen_data = true;
        self.last = at;
        Ok(Some(Arrival {
            line: self.line,
            at,
            cost,
            key: key.to_owned(),
        }))
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Arrival, LineError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.buf.clear();
            self.line += 1;
            match self.input.read_line(&mut self.buf) {
                Ok(0) => return None,
                Ok(n) => self.bytes += n as u64,
                Err(e) => {
                    return Some(Err(LineError {
                        line: self.line,
                        reason: format!("cannot read: {e}"),
                    }))
                }
            }
            match self.parse() {
                Ok(Some(arrival)) => return Some(Ok(arrival)),
                Ok(None) => continue,
                Err(reason) => {
                    return Some(Err(LineError {
                        line: self.line,
                        reason,
                    }))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<Result<Arrival, LineError>> {
        TraceReader::new(text.as_bytes()).collect()
    }

    #[test]
    fn figure1_has_twenty_arrivals_of_one_key() {
        let arrivals: Vec<Arrival> = read(FIGURE1).into_iter().map(Result::unwrap).collect();
        assert_eq!(arrivals.len(), 20);
        assert_eq!(arrivals[0].at, 700_000_000);
        assert!(arrivals.iter().all(|a| a.key == "k_8f2a" && a.cost == 1));
        assert_eq!(arrivals[0].line, 4);
    }

    #[test]
    fn bad_lines_are_reported_with_their_number_and_reason() {
        let got = read("time_s\n0.5\n# fine\nabc\n0.6,x\n0.7,1,k,extra\n0.4\n0.8,,\n");
        let errors: Vec<String> = got
            .iter()
            .filter_map(|r| r.as_ref().err().map(ToString::to_string))
            .collect();
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(errors[0].starts_with("line 4: time `abc`"), "{}", errors[0]);
        assert!(errors[1].starts_with("line 5: cost `x`"), "{}", errors[1]);
        assert!(errors[2].starts_with("line 6: 4 fields"), "{}", errors[2]);
        assert!(
            errors[3].starts_with("line 7: time 0.4 s goes back"),
            "{}",
            errors[3]
        );
        let last = got.last().unwrap().as_ref().unwrap();
        assert_eq!((last.line, last.cost, last.key.as_str()), (8, 1, "default"));
    }
}
