//! `serve`'s log output: text or JSON lines on stderr, filtered by `RUST_LOG`.
//!
//! Colours only when stderr is a terminal: a file, journald or a pipe gets plain text, not
//! escape sequences. Text lines escape the control characters of what they carry (a CR or
//! LF in a header value must not start a forged line, an ESC must not drive the operator's
//! terminal); JSON escapes them by its own rules.

use std::io::{self, IsTerminal, Write};

use crate::cli::LogFormat;

/// Installs the global subscriber (once; later calls do nothing).
pub(crate) fn init(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(ansi)
            .with_writer(move || Escaping {
                inner: io::stderr(),
                keep_esc: ansi,
            })
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .with_writer(io::stderr)
            .try_init(),
    };
}

/// A writer that escapes control characters; the subscriber writes one whole line per
/// event, so only the newline that ends it stays a newline.
struct Escaping<W> {
    inner: W,
    /// Our own colours, on a terminal.
    keep_esc: bool,
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(&escape(buf, self.keep_esc))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `line` with every control character but a final newline (and tabs, and ESC when
/// `keep_esc`) written as `\r`, `\n` or `\xNN`.
fn escape(line: &[u8], keep_esc: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let last = line.len().saturating_sub(1);
    for (i, &b) in line.iter().enumerate() {
        match b {
            b'\n' if i == last => out.push(b),
            b'\t' => out.push(b),
            0x1b if keep_esc => out.push(b),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn control_characters_in_a_line_are_escaped_and_its_end_kept() {
        let forged = b"key=evil\r\nINFO forged line\x1b[31m\x00 end\n";
        assert_eq!(
            escape(forged, false),
            b"key=evil\\r\\nINFO forged line\\x1b[31m\\x00 end\n".to_vec()
        );
        assert_eq!(
            escape(b"\x1b[2mcolour\x1b[0m\n", true),
            b"\x1b[2mcolour\x1b[0m\n".to_vec()
        );
        assert_eq!(escape(b"plain\ttext\n", false), b"plain\ttext\n".to_vec());
    }
}
