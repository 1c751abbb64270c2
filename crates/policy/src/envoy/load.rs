//! Reading files and directories of envoyproxy/ratelimit configs, every error located.

use std::path::Path;

use super::errors::Errors;
use super::validate::validate_root;
use super::yaml::read_yaml;
use super::EnvoyConfig;
use crate::config::{ConfigError, ConfigErrors};

/// Reads the config file at `path`, or every `*.yaml` / `*.yml` file of the directory at
/// `path` (in name order, not recursing).
///
/// # Errors
///
/// Every problem found in every file, each with its file, line and column.
pub fn load(path: &Path) -> Result<EnvoyConfig, ConfigErrors> {
    let unreadable = |file: &Path, e: std::io::Error| ConfigError {
        file: file.display().to_string(),
        position: None,
        rule: None,
        message: format!("cannot read: {e}"),
    };
    let files = if path.is_dir() {
        let listing =
            std::fs::read_dir(path).map_err(|e| ConfigErrors(vec![unreadable(path, e)]))?;
        let mut files: Vec<_> = listing
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut config = EnvoyConfig::default();
    let mut errors = Vec::new();
    for file in files {
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) => {
                errors.push(unreadable(&file, e));
                continue;
            }
        };
        let parsed = parse(&file.display().to_string(), &text).and_then(|c| config.merge(c));
        if let Err(ConfigErrors(found)) = parsed {
            errors.extend(found);
        }
    }
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Reads one config file's `text`, naming it `file` in errors.
///
/// # Errors
///
/// Every problem found, in file order, each with its line and column.
pub fn parse(file: &str, text: &str) -> Result<EnvoyConfig, ConfigErrors> {
    let mut errors = Errors {
        file,
        found: Vec::new(),
    };
    let root = match read_yaml(text) {
        Ok(root) => root,
        Err(e) => {
            let at = (e.marker().line(), e.marker().col() + 1);
            errors.at(at, None, format!("invalid YAML: {}", e.info()));
            return Err(ConfigErrors(errors.found));
        }
    };
    let Some(root) = root else {
        errors.at(
            (1, 1),
            None,
            "the file is empty: it needs a `domain`".to_owned(),
        );
        return Err(ConfigErrors(errors.found));
    };
    let domain = validate_root(&root, &mut errors);
    errors
        .found
        .sort_by_key(|e| e.position.unwrap_or((usize::MAX, 0)));
    match domain {
        Some((name, domain)) if errors.found.is_empty() => {
            let mut config = EnvoyConfig::default();
            config.domains.insert(name, domain);
            Ok(config)
        }
        _ => Err(ConfigErrors(errors.found)),
    }
}
