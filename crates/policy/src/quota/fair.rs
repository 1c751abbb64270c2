//! Max-min fairness ("water filling"): whoever wants less than an equal share gets what it
//! wants; what is left is shared equally among the rest.

/// Splits `capacity` among `wants` max-min fairly, in whole units: the grants, in the
/// order of `wants`. Every grant is at most its want, and they add up to at most
/// `capacity` (a remainder that does not divide evenly stays unassigned).
///
/// # Examples
///
/// ```
/// use ratewarden_policy::quota::max_min;
///
/// assert_eq!(max_min(120, &[1000, 50, 10]), [60, 50, 10]);
/// assert_eq!(max_min(600, &[50, 60]), [50, 60]);
/// ```
pub fn max_min(capacity: u64, wants: &[u64]) -> Vec<u64> {
    max_min_weighted(capacity, &wants.iter().map(|&w| (w, 1)).collect::<Vec<_>>())
}

/// [`max_min`] with weights: `(want, weight)` pairs, each fair share proportional to its
/// weight (`capacity_left · weight / Σ weights` of those still unsatisfied). A weight of
/// zero gets nothing.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::quota::max_min_weighted;
///
/// // Weights 2 and 1 of 300: 200 and 100, unless one wants less.
/// assert_eq!(max_min_weighted(300, &[(1000, 2), (1000, 1)]), [200, 100]);
/// assert_eq!(max_min_weighted(300, &[(50, 2), (1000, 1)]), [50, 250]);
/// ```
pub fn max_min_weighted(capacity: u64, wants: &[(u64, u64)]) -> Vec<u64> {
    let mut grants = vec![0u64; wants.len()];
    // Those still unsatisfied, in the order of their want per unit of weight (smallest
    // first: they are the ones an equal share may satisfy).
    let mut open: Vec<usize> = (0..wants.len()).filter(|&i| wants[i].1 > 0).collect();
    open.sort_by(|&a, &b| {
        let (wa, ka) = (u128::from(wants[a].0), u128::from(wants[a].1));
        let (wb, kb) = (u128::from(wants[b].0), u128::from(wants[b].1));
        (wa * kb).cmp(&(wb * ka))
    });
    let mut left = capacity;
    let mut from = 0;
    while from < open.len() {
        let weights: u128 = open[from..].iter().map(|&i| u128::from(wants[i].1)).sum();
        let (want, weight) = wants[open[from]];
        let share = u128::from(left) * u128::from(weight) / weights;
        if u128::from(want) <= share {
            // Satisfied: what it does not take is shared by the rest.
            grants[open[from]] = want;
            left -= want;
            from += 1;
            continue;
        }
        // Every remaining want exceeds its share: each gets the share.
        for &i in &open[from..] {
            let share = u128::from(left) * u128::from(wants[i].1) / weights;
            grants[i] = u64::try_from(share).unwrap_or(u64::MAX).min(wants[i].0);
        }
        break;
    }
    grants
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference's vectors.
    #[test]
    fn the_reference_vectors() {
        assert_eq!(max_min(120, &[1000, 50, 10]), [60, 50, 10]);
        assert_eq!(max_min(600, &[100, 200, 1000]), [100, 200, 300]);
        assert_eq!(max_min(600, &[700, 700, 700]), [200, 200, 200]);
        assert_eq!(max_min(600, &[50, 60]), [50, 60]);
        assert_eq!(max_min(0, &[5, 5]), [0, 0]);
        assert_eq!(max_min(10, &[]), Vec::<u64>::new());
        // Weighted: shares in proportion to the weights.
        assert_eq!(max_min_weighted(600, &[(700, 1), (700, 2)]), [200, 400]);
        assert_eq!(
            max_min_weighted(600, &[(100, 1), (700, 2), (700, 0)]),
            [100, 500, 0]
        );
    }

    proptest! {
        /// Never over the capacity, never over a want, nothing wasted when wants exceed the
        /// capacity (but for the remainder of a division), and no one below the smallest
        /// unsatisfied grant unless it wanted less (that is max-min).
        #[test]
        fn grants_are_max_min(capacity in 0u64..10_000, wants in proptest::collection::vec(0u64..5_000, 0..12)) {
            let grants = max_min(capacity, &wants);
            let total: u64 = grants.iter().sum();
            prop_assert!(total <= capacity);
            for (g, w) in grants.iter().zip(&wants) {
                prop_assert!(g <= w);
            }
            let wanted: u64 = wants.iter().sum();
            if wanted <= capacity {
                prop_assert_eq!(total, wanted);
            } else {
                prop_assert!(capacity - total < wants.len() as u64);
                let least_capped = grants.iter().zip(&wants).filter(|(g, w)| g < w).map(|(g, _)| *g).min();
                if let Some(least) = least_capped {
                    for (g, w) in grants.iter().zip(&wants) {
                        prop_assert!(g + 1 >= least.min(*w), "{grants:?} of {wants:?}");
                    }
                }
            }
        }
    }
}
