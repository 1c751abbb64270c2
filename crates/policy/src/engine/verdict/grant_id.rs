//! The id a reservation or a permit is settled or released by.

use std::fmt;
use std::str::FromStr;

use ring::rand::{SecureRandom, SystemRandom};

/// A reservation's or a permit's id: 128 random bits from the operating system, written as
/// 32 lowercase hex digits. Knowing one id tells nothing of another; and an id alone is not
/// enough: a settle or a release must come from the client it was issued for (see
/// [`Owner`](crate::engine::Owner)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrantId(u128);

impl GrantId {
    pub(crate) fn random(rng: &SystemRandom) -> Option<Self> {
        let mut bytes = [0; 16];
        rng.fill(&mut bytes).ok()?;
        Some(GrantId(u128::from_be_bytes(bytes)))
    }
}

impl fmt::Display for GrantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl FromStr for GrantId {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("an id is 32 hex digits, not `{text}`"));
        }
        u128::from_str_radix(text, 16)
            .map(GrantId)
            .map_err(|e| format!("id `{text}`: {e}"))
    }
}
