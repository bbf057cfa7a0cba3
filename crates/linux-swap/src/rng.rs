//! `prandom_u32_max` for the model: a seeded SplitMix64, so a run is a pure function of
//! its configuration.

#[derive(Clone, Debug)]
pub(crate) struct Prandom {
    state: u64,
}

impl Prandom {
    pub(crate) fn new(seed: u64) -> Prandom {
        Prandom { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (`prandom_u32_max(bound)`, which multiplies and shifts too).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "prandom_u32_max needs a positive bound");
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
    }
}
