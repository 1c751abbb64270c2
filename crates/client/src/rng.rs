//! The randomness of jitter and throttling, injected so runs can be replayed.

/// A small seedable generator (SplitMix64): enough for jitter, and the same seed gives the
/// same waits, so tests and the simulation are deterministic.
///
/// # Examples
///
/// ```
/// use ratewarden_client::SplitMix64;
///
/// let mut a = SplitMix64::new(7);
/// let mut b = SplitMix64::new(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.below(10) <= 10);
/// ```
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        // Steele, Lea and Flood's constants (the generator behind Java's SplittableRandom).
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..=n` (full jitter picks any wait from zero to the cap).
    pub fn below(&mut self, n: u64) -> u64 {
        match n.checked_add(1) {
            // Multiply-shift: no modulo bias worth the name at 64 bits, and no division.
            Some(span) => ((u128::from(self.next_u64()) * u128::from(span)) >> 64) as u64,
            None => self.next_u64(),
        }
    }

    /// A uniform number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        // The top 53 bits: every value exactly representable.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_within_its_bound_and_reaches_both_ends() {
        let mut rng = SplitMix64::new(1);
        let draws: Vec<u64> = (0..1000).map(|_| rng.below(3)).collect();
        assert!(draws.iter().all(|&d| d <= 3));
        assert!(draws.contains(&0) && draws.contains(&3));
    }

    #[test]
    fn unit_is_in_the_half_open_interval() {
        let mut rng = SplitMix64::new(2);
        assert!((0..1000)
            .map(|_| rng.unit())
            .all(|u| (0.0..1.0).contains(&u)));
    }
}
