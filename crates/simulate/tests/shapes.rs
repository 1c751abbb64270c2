//! The counter with 10 sub-windows against the exact log on traces of every shape: it wrongly
//! refuses under 0.003% of the well-behaved sources' requests, where the two-window counter
//! refuses more, and admits few the log refused.

use std::time::Duration;

use ratewarden_simulate::accuracy::{compare, Accuracy, WELL_BEHAVED};
use ratewarden_simulate::gen::{self, GenArgs, Shape};

/// About 350,000 requests of 2,000 sources at around 1 a second, 1% abusive at 20–50.
fn trace(shape: Shape) -> Vec<ratewarden_simulate::Arrival> {
    gen::generate(&GenArgs {
        sources: 2_000,
        seconds: 86,
        abusive: 1,
        median: 1.0,
        sigma: 1.0,
        abusive_rate: "20-50".to_owned(),
        seed: 1,
        shape,
    })
    .unwrap()
}

/// Wrongly refused of the well-behaved, and wrongly admitted of the abusive, as shares.
fn errors(got: &Accuracy, counter: usize) -> (f64, f64) {
    let classes = &got.counters[counter].classes;
    let (well, abusive) = (&classes[WELL_BEHAVED], &classes["abusive"]);
    (
        well.wrongly_refused as f64 / well.requests as f64,
        abusive.wrongly_admitted as f64 / abusive.requests as f64,
    )
}

fn check(shape: Shape) {
    let got = compare(trace(shape), 10, Duration::from_secs(1), &[1, 10], false).unwrap();
    let (plain, _) = errors(&got, 0);
    let (refused, admitted) = errors(&got, 1);
    let name = shape.name();
    assert!(
        plain > 0.003e-2,
        "{name}: the plain counter refused {plain:e}"
    );
    assert!(
        refused < 0.003e-2,
        "{name}: 10 sub-windows refused {refused:e} of the well-behaved"
    );
    assert!(
        admitted < 0.2e-2,
        "{name}: 10 sub-windows admitted {admitted:e} of the abusive"
    );
}

#[test]
fn sub_windows_refuse_few_well_behaved_on_poisson_sources() {
    check(Shape::Poisson);
}

#[test]
fn sub_windows_refuse_few_well_behaved_on_bursty_sources() {
    check(Shape::Bursts);
}

#[test]
fn sub_windows_refuse_few_well_behaved_on_diurnal_sources() {
    check(Shape::Diurnal);
}

#[test]
fn sub_windows_refuse_few_well_behaved_on_on_off_sources() {
    check(Shape::OnOff);
}
