//! How long an upstream takes per request in `simulate load`: a fixed time, or one with a
//! tail, as a Python or JVM service's latency has (garbage collection, a slow query, a
//! cold cache), drawn from a fixed sequence in integers so that every run is the same.

use crate::args::Noise;

/// The `n`th request's service time, for a mean of `mean_ns`.
///
/// With a tail, it is a fixed part plus `unit · (G + U)`: `G` the trailing zero bits of a
/// mixed 64-bit counter (a geometric count: 0 half the time, at least `k` one time in
/// `2^k`) and `U` a uniform fraction, so the tail is exponential-like and its mean is
/// `1.5 · unit`. `tail`: unit 9 % of the mean (a fixed part of 86.5 %), unloaded p99 about
/// 1.45× the mean; `heavy`: unit 20 % (fixed 70 %), p99 about 2×.
pub fn service_ns(noise: Noise, mean_ns: u64, n: u64) -> u64 {
    let unit_permille = match noise {
        Noise::None => return mean_ns,
        Noise::Tail => 90,
        Noise::Heavy => 200,
    };
    let unit = mean_ns * unit_permille / 1000;
    let fixed = mean_ns - unit * 3 / 2;
    let bits = mix(n);
    let geometric = u64::from(bits.trailing_zeros().min(40));
    // The fraction from the other end of the word, in 1/65536ths.
    let fraction = bits >> 48;
    fixed + unit * geometric + unit * fraction / 65_536
}

/// splitmix64's finalizer: consecutive counters to bits that look independent.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_mean_and_stretches_the_p99() {
        let ms = 1_000_000;
        for (noise, low, high) in [(Noise::Tail, 140, 150), (Noise::Heavy, 195, 210)] {
            let mut times: Vec<u64> = (0..100_000)
                .map(|n| service_ns(noise, 100 * ms, n))
                .collect();
            let mean = times.iter().sum::<u64>() / times.len() as u64;
            times.sort_unstable();
            let p99 = times[98_999] / ms;
            assert!(mean.abs_diff(100 * ms) < 2 * ms, "{noise:?}: mean {mean}");
            assert!((low..=high).contains(&p99), "{noise:?}: p99 {p99} ms");
        }
        assert_eq!(service_ns(Noise::None, 100 * ms, 7), 100 * ms);
    }
}
