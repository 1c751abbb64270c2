//! The `[regions]` section: this server's region, and the home store that counts the
//! `scope = "global"` rules for all of them.

use toml::Spanned;

use super::error::Errors;
use super::raw::RawRegions;
use super::store::store_settings;
use super::{Regions, StoreKind, GLOBAL_HORIZON, HOME_IN_FLIGHT};

pub(super) fn regions(raw: Spanned<RawRegions>, errors: &mut Errors<'_>) -> Option<Regions> {
    let at = raw.span();
    let raw = raw.into_inner();
    let name = match raw.name {
        Some(name) if !name.get_ref().trim().is_empty() => name.into_inner().trim().to_owned(),
        given => {
            let at = given.map_or(at.clone(), |n| n.span());
            errors.at(
                Some(at),
                None,
                "`[regions]` needs `name`, this server's region, such as \"eu-west\"".to_owned(),
            );
            String::new()
        }
    };
    let horizon = errors
        .duration(raw.horizon.as_ref(), "`[regions]`: `horizon`", None, false)
        .unwrap_or(GLOBAL_HORIZON);
    let Some(home) = raw.home else {
        errors.at(
            Some(at),
            None,
            "`[regions]` needs a `[regions.home]` table: the store every region takes its \
             `scope = \"global\"` units from, written as `[store]` is (kind = \"redis\", url = ...)"
                .to_owned(),
        );
        return None;
    };
    let home_at = home.span();
    let home = home.into_inner();
    let in_flight_given = home.batch_in_flight.is_some();
    let mut home = store_settings(home, "`[regions.home]`", errors);
    if !in_flight_given {
        home.batch_in_flight = HOME_IN_FLIGHT;
    }
    if home.kind == StoreKind::Memory {
        errors.at(
            Some(home_at),
            None,
            "`[regions.home]`: the home store is shared by every region's servers: `kind` is \
             `redis`, `redis-cluster` or `redis-sentinel`, not `memory`"
                .to_owned(),
        );
    }
    Some(Regions {
        name,
        horizon,
        home,
    })
}
