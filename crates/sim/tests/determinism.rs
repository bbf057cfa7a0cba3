//! A run is a pure function of its configuration and seed.

mod common;

use znswap_sim::run::{run, DiscardMode};

fn json(config: &znswap_sim::RunConfig) -> String {
    serde_json::to_string(&run(config).expect("the run works")).expect("results serialize")
}

#[test]
fn the_same_seed_gives_identical_results() {
    for backend in [common::zns(), common::linux(DiscardMode::Fine8)] {
        let config = common::wrand(30, backend, 7);
        let first = json(&config);
        let second = json(&config);
        assert_eq!(first, second, "{}: two runs of one seed differ", config.name);
        let other = json(&common::wrand(30, backend, 8));
        assert_ne!(first, other, "{}: another seed, the same results", config.name);
    }
}
