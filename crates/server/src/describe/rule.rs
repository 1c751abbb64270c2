//! A rule as a table row, and an algorithm with its numbers, as a config would write them.

use ratewarden_core::{Algorithm, DisplayDuration, Limit};
use ratewarden_policy::{config, Cost, KeyPart, Mode, OnStoreFailure, Rule, WhenKeyMissing};

/// A rule as the table shows it: name, applies to, key, algorithm, mode, store down.
pub(crate) fn row(rule: &Rule) -> [String; 6] {
    let m = &rule.matches;
    let mut applies: Vec<String> = Vec::new();
    if let Some(method) = &m.method {
        applies.push(method.clone());
    }
    if let Some(path) = &m.path {
        applies.push(path.clone());
    }
    if let Some(host) = &m.host {
        applies.push(format!("host {host}"));
    }
    if let Some((name, value)) = &m.header {
        applies.push(match value {
            Some(v) => format!("{name}: {v}"),
            None => format!("has {name}"),
        });
    }
    let entry = |(k, v): &(String, Option<String>)| match v {
        Some(v) => format!("{k}={v}"),
        None => k.clone(),
    };
    match (&m.domain, &m.bucket) {
        (Some(domain), Some(bucket)) => {
            let entries: Vec<String> = bucket.entries.iter().map(entry).collect();
            let weights: Vec<String> = bucket
                .weights
                .iter()
                .map(|(k, v, w)| format!(" {k}={v}:{w}"))
                .collect();
            applies.push(format!(
                "envoy {domain} bucket {{{}}}{}",
                entries.join(", "),
                if weights.is_empty() {
                    String::new()
                } else {
                    format!(" weights{}", weights.concat())
                }
            ));
        }
        (Some(domain), None) => {
            let entries: Vec<String> = m.descriptor.iter().map(entry).collect();
            applies.push(format!("envoy {domain} [{}]", entries.join(", ")));
        }
        (None, _) => {}
    }
    let applies = if applies.is_empty() {
        "every request".to_owned()
    } else {
        applies.join(" ")
    };
    let key: Vec<String> = rule.key.iter().map(ToString::to_string).collect();
    // An adaptive rule's `limit` is only its starting place: the limit moves.
    let mut algorithm = match &rule.adaptive {
        Some(adaptive) => {
            let mut text = format!("adaptive-concurrency ({})", adaptive.strategy.name());
            if let Some(queue) = &adaptive.queue {
                text.push_str(", ");
                text.push_str(&describe_queue(queue));
            }
            text
        }
        None => describe(&rule.limit),
    };
    match &rule.cost {
        Cost::Fixed(1) => {}
        Cost::Fixed(n) => algorithm.push_str(&format!(", cost {n}")),
        Cost::Header { name, max } => {
            algorithm.push_str(&format!(", cost from {name} (at most {max})"));
        }
        Cost::Body { terms, max } => {
            let terms: Vec<String> = terms.iter().map(ToString::to_string).collect();
            algorithm.push_str(&format!(
                ", cost estimated from the body as {} (at most {max})",
                terms.join(" + ")
            ));
        }
    }
    match (&rule.settle_from, rule.settle_within) {
        (Some(from), Some(within)) => algorithm.push_str(&format!(
            ", settled from the answer's {from} within {}",
            DisplayDuration(within)
        )),
        (_, Some(within)) => {
            algorithm.push_str(&format!(", settled within {}", DisplayDuration(within)));
        }
        _ => {}
    }
    let mut mode = match rule.mode {
        Mode::Enforce => "enforce".to_owned(),
        Mode::Shadow => "shadow".to_owned(),
        Mode::Rollout { basis_points } => {
            format!("rollout {}.{:02}%", basis_points / 100, basis_points % 100)
        }
    };
    if rule.sensitive {
        mode.push_str(", bare 429");
    }
    // The default (the client's address for a missing part) shows in the keys themselves,
    // `name@fingerprint~client|…`; the choices that let a request past or refuse it show here.
    let may_miss = rule
        .key
        .iter()
        .any(|p| matches!(p, KeyPart::ApiKey | KeyPart::Tenant | KeyPart::Header(_)));
    match rule.when_key_missing {
        WhenKeyMissing::Skip if may_miss => mode.push_str(", skipped without its key part"),
        WhenKeyMissing::Refuse if may_miss => mode.push_str(", refuses without its key part"),
        _ => {}
    }
    let failure = match rule.on_store_failure {
        OnStoreFailure::Open => "open".to_owned(),
        OnStoreFailure::Closed => "closed (503)".to_owned(),
        OnStoreFailure::Local { divide_by } => format!("local, limit / {divide_by}"),
    };
    let failure = match rule.wait_for_replicas {
        0 => failure,
        1 => format!("{failure}, waits for 1 replica"),
        n => format!("{failure}, waits for {n} replicas"),
    };
    [
        rule.name.clone(),
        applies,
        key.join(" + "),
        algorithm,
        mode,
        failure,
    ]
}

/// An adaptive rule's `[limit.queue]`: whose turn it is, how long a request may wait, the
/// lanes, and the weights named.
pub fn describe_queue(queue: &config::Queue) -> String {
    let shape = queue.shape;
    let mut text = format!(
        "queued by {} up to {} ({} queues, hand {}, {} each)",
        queue.key,
        DisplayDuration(std::time::Duration::from_nanos(shape.max_wait_ns)),
        shape.queues,
        shape.hand,
        shape.queue_length,
    );
    if !queue.weights.is_empty() {
        let weights: Vec<String> = queue
            .weights
            .iter()
            .map(|(value, weight)| format!("{value}={weight}"))
            .collect();
        text.push_str(&format!(", weights {}", weights.join(" ")));
    }
    text
}

/// An algorithm with its numbers, as a config would write them.
pub fn describe(limit: &Limit) -> String {
    let kind = limit.kind();
    match limit {
        Limit::FixedWindow(l) => {
            format!("{kind} {} per {}", l.limit(), DisplayDuration(l.window()))
        }
        Limit::SlidingLog(l) => format!("{kind} {} per {}", l.limit(), DisplayDuration(l.window())),
        Limit::SlidingWindow(l) if l.sub_windows() > 1 => format!(
            "{kind} {} per {} in {} sub-windows",
            l.limit(),
            DisplayDuration(l.window()),
            l.sub_windows()
        ),
        Limit::SlidingWindow(l) => {
            format!("{kind} {} per {}", l.limit(), DisplayDuration(l.window()))
        }
        Limit::TokenBucket(l) => format!("{kind} {}, burst {}", l.rate(), l.burst()),
        Limit::LeakyBucket(l) => format!("{kind} {}, burst {}", l.rate(), l.burst()),
        Limit::LeakyQueue(l) => format!("{kind} {}, {} may wait", l.rate(), l.burst()),
        Limit::Gcra(l) => format!("{kind} {}, burst {}", l.rate(), l.burst()),
        Limit::Quota(l) => format!("{kind} {} per {} ({})", l.limit(), l.unit(), l.timezone()),
        Limit::Concurrency(l) => format!(
            "{kind} {} in flight, lease {}",
            l.limit(),
            DisplayDuration(l.lease())
        ),
    }
}
