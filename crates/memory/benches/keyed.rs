//! Keyed decisions per second against governor (being written).

fn main() {}
