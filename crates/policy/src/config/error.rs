//! Errors that say where: the file, line, column and rule of everything wrong with a config.

use std::ops::Range;
use std::time::Duration;

use ratewarden_core::parse_duration;
use toml::Spanned;

/// One thing wrong with a config file, and where.
///
/// Shown as `file:line:column: limit `name`: message`, the parts not known left out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {}{message}", place(.position), in_rule(.rule))]
pub struct ConfigError {
    /// The file, as given.
    pub file: String,
    /// 1-based line and column of the offending value, when known.
    pub position: Option<(usize, usize)>,
    /// The rule (`[[limit]]` name) it belongs to, when it belongs to one.
    pub rule: Option<String>,
    /// What is wrong, and how to fix it where we can tell.
    pub message: String,
}

fn place(position: &Option<(usize, usize)>) -> String {
    position.map_or_else(String::new, |(line, column)| format!(":{line}:{column}"))
}

fn in_rule(rule: &Option<String>) -> String {
    rule.as_ref()
        .map_or_else(String::new, |rule| format!("limit `{rule}`: "))
}

/// Every error found in one config file, one a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", lines(.0))]
pub struct ConfigErrors(pub Vec<ConfigError>);

fn lines(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Collects errors for one file, turning byte spans into lines and columns.
pub(super) struct Errors<'a> {
    pub(super) file: &'a str,
    pub(super) text: &'a str,
    pub(super) found: Vec<ConfigError>,
}

impl Errors<'_> {
    pub(super) fn at(&mut self, span: Option<Range<usize>>, rule: Option<&str>, message: String) {
        let position = span.map(|s| line_column(self.text, s.start));
        self.found.push(ConfigError {
            file: self.file.to_owned(),
            position,
            rule: rule.map(str::to_owned),
            message,
        });
    }

    /// The 1-based line and column of byte `offset` of the file.
    pub(super) fn position(&self, offset: usize) -> (usize, usize) {
        line_column(self.text, offset)
    }

    /// The one check of a count: a whole number above zero (or zero too, when `zero_ok`)
    /// that fits `T`; `None` after recording what was wrong. `what` names the field as the
    /// message shows it (``"`burst`"``, ``"`[server]`: `max_body`"``).
    pub(super) fn whole<T: TryFrom<i64>>(
        &mut self,
        value: &Spanned<i64>,
        what: &str,
        rule: Option<&str>,
        zero_ok: bool,
    ) -> Option<T> {
        let n = *value.get_ref();
        let message = if n > 0 || (zero_ok && n == 0) {
            match T::try_from(n) {
                Ok(fits) => return Some(fits),
                Err(_) => format!("{what} is too large: {n}"),
            }
        } else {
            let least = if zero_ok {
                "zero or more"
            } else {
                "above zero"
            };
            format!("{what} must be a whole number {least}, not {n}")
        };
        self.at(Some(value.span()), rule, message);
        None
    }

    /// A duration field: `None` when absent, and when wrong (after recording what was
    /// wrong). Zero is refused unless `zero_ok`. `what` names the field as [`Errors::whole`].
    pub(super) fn duration(
        &mut self,
        value: Option<&Spanned<String>>,
        what: &str,
        rule: Option<&str>,
        zero_ok: bool,
    ) -> Option<Duration> {
        let v = value?;
        let message = match parse_duration(v.get_ref()) {
            Ok(d) if zero_ok || !d.is_zero() => return Some(d),
            Ok(_) => format!("{what} must be longer than zero"),
            Err(e) => format!("{what}: {e}"),
        };
        self.at(Some(v.span()), rule, message);
        None
    }
}

/// 1-based line and column (in bytes) of `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    // A span inside a character (never from toml, but cheap to rule out) counts from its
    // start rather than panicking.
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, column)
}
