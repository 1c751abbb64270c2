//! `sub_windows` on a `sliding-window` rule: read into the limit, defaulted to 1, and refused
//! with its file, line, column and rule when it is out of range or on another algorithm.

use ratewarden_core::Limit;
use ratewarden_policy::config::parse;

fn rule(extra: &str) -> String {
    format!(
        "[[limit]]\nname = \"per-ip\"\nkey = [\"ip\"]\nalgorithm = \"sliding-window\"\nlimit = 10\nwindow = \"1s\"\n{extra}\n"
    )
}

fn sub_windows(text: &str) -> u32 {
    let config = parse("t.toml", text).expect("a valid config");
    let Limit::SlidingWindow(sw) = &config.rules[0].limit else {
        panic!("not a sliding window")
    };
    sw.sub_windows()
}

#[test]
fn sub_windows_default_to_one_and_are_read() {
    assert_eq!(sub_windows(&rule("")), 1);
    assert_eq!(sub_windows(&rule("sub_windows = 10")), 10);
    assert_eq!(sub_windows(&rule("sub_windows = 60")), 60);
}

#[test]
fn bad_sub_windows_are_located() {
    for (extra, says) in [
        (
            "sub_windows = 0",
            "t.toml:7:15: limit `per-ip`: `sub_windows` must be a whole number from 1 to 60, got 0",
        ),
        (
            "sub_windows = 61",
            "t.toml:7:15: limit `per-ip`: `sub_windows` must be a whole number from 1 to 60, got 61",
        ),
        (
            "sub_windows = -3",
            "t.toml:7:15: limit `per-ip`: `sub_windows` must be a whole number from 1 to 60, got -3",
        ),
    ] {
        let e = parse("t.toml", &rule(extra)).unwrap_err().to_string();
        assert!(e.contains(says), "{extra}: {e}");
    }
    // A window of fewer nanoseconds than slots.
    let short = rule("sub_windows = 10").replace("\"1s\"", "\"5ns\"");
    let e = parse("t.toml", &short).unwrap_err().to_string();
    assert!(
        e.contains("t.toml:7:15: limit `per-ip`: `sub_windows`: ")
            && e.contains("shorter than a nanosecond"),
        "{e}"
    );
    // On another algorithm.
    let gcra = "[[limit]]\nname = \"k\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"5/s\"\nburst = 5\nsub_windows = 4\n";
    let e = parse("t.toml", gcra).unwrap_err().to_string();
    assert!(
        e.contains("limit `k`: `sub_windows` does not apply to `gcra`, which takes rate and burst"),
        "{e}"
    );
}
