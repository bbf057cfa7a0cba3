//! Every key-value stream stays inside its footprint, whatever the configuration.

use std::sync::Arc;

use proptest::prelude::*;
use znswap_workload::{EtcConfig, EtcLayout, EtcStream, KvStream, OpKind, Popularity, YcsbConfig, YcsbStream};

fn popularity() -> impl Strategy<Value = Popularity> {
    prop_oneof![
        Just(Popularity::Uniform),
        (1u8..=100, 0u8..=100)
            .prop_map(|(hot_percent, hot_access_percent)| Popularity::Hotspot { hot_percent, hot_access_percent }),
    ]
}

fn check(stream: &mut dyn KvStream, ops: usize) {
    let mut out = Vec::new();
    for _ in 0..ops {
        let op = stream.next_op(&mut out);
        assert!(op.record < stream.records());
        assert!(out.len() >= 2, "a lookup and the record");
        assert!(!out[0].write, "the lookup only reads");
        assert!(out.iter().all(|access| access.page < stream.pages()));
        let writes = out.iter().filter(|access| access.write).count();
        match op.kind {
            OpKind::Get => assert_eq!(writes, 0),
            OpKind::Set => assert!(writes >= 1),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn etc_accesses_stay_in_the_arena(
        records in 1u64..3000,
        gets_per_set in 1u32..40,
        popularity in popularity(),
        hot_scattered in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let config = EtcConfig { records, gets_per_set, popularity, hot_scattered, seed };
        let layout = Arc::new(EtcLayout::new(&config).unwrap());
        check(&mut EtcStream::new(layout, seed ^ 1), 2000);
    }

    #[test]
    fn ycsb_accesses_stay_in_the_arena(
        records in 1u64..3000,
        field_count in 1u32..20,
        field_bytes in 1u32..3000,
        read_percent in 0u8..=100,
        popularity in popularity(),
        seed in any::<u64>(),
    ) {
        let config = YcsbConfig { records, field_count, field_bytes, read_percent, popularity };
        check(&mut YcsbStream::new(config, seed).unwrap(), 2000);
    }
}
