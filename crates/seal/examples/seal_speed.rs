//! Prints what sealing and opening a 4 KiB page costs where it runs (µs per page and
//! GB/s), the floor under `--encrypt`'s cost: `cargo run --release -p znswap-seal
//! --example seal_speed`.

use std::time::Instant;

use znswap_seal::Sealer;

fn main() {
    let sealer = Sealer::new().expect("a sealer");
    let mut page = vec![0x5au8; 4096];
    let pages = 200_000u64;
    let mut seals = Vec::with_capacity(pages as usize);
    let started = Instant::now();
    for index in 0..pages {
        seals.push(sealer.seal(1, index, &mut page));
    }
    let seal_s = started.elapsed().as_secs_f64();
    // Open the last one repeatedly (the others' ciphertext is gone): the same work per page.
    let last = *seals.last().unwrap();
    let started = Instant::now();
    for _ in 0..pages {
        let mut copy = page.clone();
        sealer.open(1, pages - 1, &mut copy, &last).expect("opens");
    }
    let open_s = started.elapsed().as_secs_f64();
    for (what, seconds) in [("seal", seal_s), ("open (with a page copy)", open_s)] {
        println!(
            "{what:24} {:6.2} µs per 4 KiB page, {:5.2} GB/s",
            seconds * 1e6 / pages as f64,
            pages as f64 * 4096.0 / seconds / 1e9
        );
    }
}
