//! `Retry-After` (RFC 9110 section 10.2.3): delta-seconds or an HTTP-date.

use std::time::{Duration, UNIX_EPOCH};

use crate::Error;

/// How long `Retry-After: value` asks a client to wait, read at `now` (nanoseconds since the
/// Unix epoch): delta-seconds as they are, an HTTP-date as its distance from `now` (zero
/// when it has passed).
///
/// # Errors
///
/// [`Error::Field`] naming the value, when it is neither form.
///
/// # Examples
///
/// ```
/// use ratewarden_client::retry_after;
/// use std::time::Duration;
///
/// assert_eq!(retry_after("120", 0)?, Duration::from_secs(120));
/// // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
/// let now = 784_111_770 * 1_000_000_000;
/// assert_eq!(retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now)?, Duration::from_secs(7));
/// # Ok::<(), ratewarden_client::Error>(())
/// ```
pub fn retry_after(value: &str, now: u64) -> Result<Duration, Error> {
    let value = value.trim();
    let bad = |reason: &str| Error::Field {
        field: "retry-after",
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Absurd values saturate rather than fail: a caller's deadline cuts them short anyway.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Ok(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value)
        .map_err(|_| bad("neither delta-seconds nor an HTTP-date"))?;
    let at = at
        .duration_since(UNIX_EPOCH)
        .map_err(|_| bad("a date before 1970"))?;
    Ok(at.saturating_sub(Duration::from_nanos(now)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOV_1994: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT

    #[test]
    fn all_three_http_date_formats_are_read() {
        let now = (NOV_1994 - 30) * 1_000_000_000;
        for date in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                retry_after(date, now).unwrap(),
                Duration::from_secs(30),
                "{date}"
            );
        }
    }

    #[test]
    fn a_date_in_the_past_means_no_wait() {
        let now = (NOV_1994 + 5) * 1_000_000_000;
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now).unwrap(),
            Duration::ZERO
        );
    }

    #[test]
    fn a_date_is_measured_from_now_to_the_nanosecond() {
        let now = NOV_1994 * 1_000_000_000 - 250_000_000;
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now).unwrap(),
            Duration::from_millis(250)
        );
    }

    #[test]
    fn garbage_is_an_error_naming_the_value() {
        for bad in ["", "-1", "1.5", "soon", "Sun, 32 Nov 1994 08:49:37 GMT"] {
            let e = retry_after(bad, 0).unwrap_err().to_string();
            assert!(e.contains("retry-after"), "{e}");
        }
    }

    #[test]
    fn huge_delta_seconds_saturate() {
        assert_eq!(
            retry_after("99999999999999999999999", 0).unwrap(),
            Duration::from_secs(u64::MAX)
        );
    }
}
