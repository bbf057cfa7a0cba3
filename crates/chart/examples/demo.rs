//! Writes demo charts to a directory: `cargo run -p znswap-chart --example demo -- OUT_DIR`.

use std::path::PathBuf;

use znswap_chart::{Align, BarChart, Canvas, Color, LineChart};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: demo OUT_DIR")?);
    std::fs::create_dir_all(&dir)?;

    let util = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0];
    let zns: Vec<(f64, f64)> = util.iter().map(|&u| (u, 960.0 - u * 0.6)).collect();
    let block: Vec<(f64, f64)> = util.iter().map(|&u| (u, 520.0 - u * u * 0.045)).collect();
    let block_discard: Vec<(f64, f64)> = util.iter().map(|&u| (u, 560.0 - u * u * 0.035)).collect();
    let waf: Vec<(f64, f64)> = util.iter().map(|&u| (u, 1.0 + (u / 100.0f64).powi(3) * 3.5)).collect();
    let waf_zns: Vec<(f64, f64)> = util.iter().map(|&u| (u, 1.0)).collect();

    let mut line =
        LineChart::new("Fig. 1: swap-out bandwidth vs. swap utilization", "swap utilization (%)", "bandwidth (MiB/s)");
    line.series("ZNSwap, ZNS SSD", &zns);
    line.series("Linux swap, block SSD", &block);
    line.series("Linux swap + discard", &block_discard);
    line.series_right("WAF, block SSD", &waf);
    line.series_right("WAF, ZNSwap", &waf_zns);
    line.right_axis_label("write amplification (WAF)");
    line.reference_line(300.0, "target 300 MiB/s");
    line.save(dir.join("line.png"), 800, 500)?;

    let mut simple = LineChart::new("Latency: p99 swap-in (µs)", "threads", "latency (µs)");
    simple.series("ZNSwap", &[(1.0, 92.0), (2.0, 95.0), (4.0, 101.0), (8.0, 118.0), (16.0, 160.0), (32.0, 245.0)]);
    simple.series("Linux swap", &[(1.0, 98.0), (2.0, 104.0), (4.0, 131.0), (8.0, 190.0), (16.0, 340.0), (32.0, 720.0)]);
    simple.save(dir.join("line_simple.png"), 640, 400)?;

    // A dense time series: no markers (too many points), a reference line.
    let mut dense = LineChart::new("Swap-out bandwidth over time", "time (s)", "MiB/s");
    let zns: Vec<(f64, f64)> = (0..600).map(|i| (i as f64 * 0.1, 900.0 + 40.0 * ((i as f64) * 0.37).sin())).collect();
    let blk: Vec<(f64, f64)> = (0..600)
        .map(|i| {
            let t = i as f64 * 0.1;
            let gc = if (i / 50) % 3 == 2 { 250.0 } else { 0.0 };
            (t, 520.0 - gc + 30.0 * ((i as f64) * 0.91).cos())
        })
        .collect();
    dense.series("ZNSwap", &zns);
    dense.series("Linux swap (GC stalls)", &blk);
    dense.reference_line(300.0, "target 300 MiB/s");
    dense.save(dir.join("line_dense.png"), 800, 400)?;

    let mut bars = BarChart::new("Fig. 7: memcached throughput (ETC)", "swap utilization", "kops/s");
    bars.categories(&["10%", "30%", "50%", "70%", "90%"]);
    bars.series("ZNSwap", &[412.0, 405.3, 398.0, 391.0, 380.0]);
    bars.series("Linux swap", &[401.0, 371.0, 322.5, 260.0, 171.0]);
    bars.series("Linux swap + discard", &[396.0, 380.0, 350.0, 300.0, 240.0]);
    bars.show_values(true);
    bars.reference_line(350.0, "SLO 350 kops/s");
    bars.save(dir.join("bars.png"), 800, 500)?;

    let mut many = BarChart::new("Tenants: normalized throughput", "workload", "normalized");
    many.categories(&["ETC", "YCSB-A", "sequential scan", "random 4K", "mixed tenants"]);
    for (i, name) in ["A", "B", "C", "D", "E", "F", "G"].iter().enumerate() {
        let vals: Vec<f64> = (0..5).map(|c| 0.4 + ((i * 7 + c * 3) % 10) as f64 / 12.0).collect();
        many.series(name, &vals);
    }
    many.show_values(true);
    many.save(dir.join("bars_many.png"), 640, 400)?;

    // The built-in font at both scales, for checking glyphs by eye.
    let mut sheet = Canvas::new(560, 230, Color::WHITE)?;
    let ascii: String = (32u8..=126).map(char::from).collect();
    let ink = Color::hex(0x222222);
    for (row, chunk) in ascii.as_bytes().chunks(32).enumerate() {
        let text = std::str::from_utf8(chunk)?;
        sheet.text(10, 10 + row as i64 * 16, text, 1, Align::Left, ink);
        sheet.text(10, 70 + row as i64 * 28, text, 2, Align::Left, ink);
    }
    sheet.text(10, 160, "µs × ° ± ≈ – — → ← … ≤ ≥ 中", 2, Align::Left, ink);
    sheet.text(10, 200, "The quick brown fox jumps over the lazy dog: 0123456789.", 1, Align::Left, ink);
    sheet.save_png(dir.join("font.png"))?;

    println!(
        "wrote line.png, line_simple.png, line_dense.png, bars.png, bars_many.png and font.png to {}",
        dir.display()
    );
    Ok(())
}
