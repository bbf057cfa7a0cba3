//! Prints the full JSON report of one seed: `report <seed> [ops]`.
fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|arg| arg.parse().expect("number")).collect();
    let options = znswap_dst::DstOptions::new(args[0], args.get(1).copied().unwrap_or(1_000_000));
    let report = znswap_dst::run(&options);
    println!("{}", serde_json::to_string_pretty(&report).expect("json"));
}
