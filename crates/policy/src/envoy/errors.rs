//! The errors one YAML file's reading finds, each at its line and column.

use crate::config::ConfigError;

/// The errors found in one file so far.
pub(super) struct Errors<'a> {
    pub(super) file: &'a str,
    pub(super) found: Vec<ConfigError>,
}

impl Errors<'_> {
    pub(super) fn at(&mut self, position: (usize, usize), rule: Option<&str>, message: String) {
        self.found.push(ConfigError {
            file: self.file.to_owned(),
            position: Some(position),
            rule: rule.map(str::to_owned),
            message,
        });
    }
}
