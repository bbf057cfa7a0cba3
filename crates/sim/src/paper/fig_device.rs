//! Fig. 6 (§3.2, "Is ZNS essential?"): sequential writes with erase-block-sized TRIMs
//! on the block SSD against zone resets on the ZNS SSD, by device utilization. No host:
//! the writers drive the device models directly.

use serde_json::json;
use znswap_chart::LineChart;
use znswap_flash::BlockConfig;

use super::exec::Progress;
use super::output::{f1, f2, ratio, Comparison, FigureOutput, Table};
use super::PaperError;
use super::PaperOptions;
use crate::device_runs::{block_sequential_trim, zns_sequential_reset, SequentialResult};
use crate::run::zns_device_for;

/// Writers ("multiple threads are used to emulate typical swap behavior").
const WRITERS: u32 = 8;

/// Superblocks of the paper's drive: 1 TB (10^12 B) with 7 % over-provisioning (§6) in
/// erase units of 1077 MiB (one ZN540 zone's capacity; the paper's "1GiB" erase block).
/// Fig. 6 writes the device itself, no swap: what matters is how many erase-block-sized
/// chunks each writer cycles through, so the scaled device keeps the real drive's count
/// of superblocks (they shrink with the capacity) rather than their size.
pub const PAPER_DRIVE_SUPERBLOCKS: u32 = 947;

pub fn figure_6(options: &PaperOptions, progress: &Progress) -> Result<FigureOutput, PaperError> {
    let scale = &options.scale;
    let points: Vec<u32> = if scale.quick { vec![30, 80] } else { vec![10, 20, 30, 40, 50, 60, 70, 80, 90] };
    // The same devices as the swap runs (logical = swap size, 12 % spare), but with the
    // real drive's number of superblocks (see PAPER_DRIVE_SUPERBLOCKS).
    let block = BlockConfig {
        logical_pages: scale.swap_pages,
        over_provisioning: 0.12,
        min_superblocks: PAPER_DRIVE_SUPERBLOCKS,
        ..BlockConfig::default()
    };
    let zns = zns_device_for(scale.swap_pages, 0.12, scale.zones);
    let physical = (scale.swap_pages as f64 * 1.12) as u64;
    let (warmup, measure) = (2 * physical, physical);
    let mut results: Vec<(SequentialResult, SequentialResult)> = Vec::new();
    for (index, &percent) in points.iter().enumerate() {
        progress.line(&format!("fig 6: {}/{} utilization points", index + 1, points.len()));
        let utilization = percent as f64 / 100.0;
        let on_block = block_sequential_trim(block, utilization, WRITERS, warmup, measure)?;
        let on_zns = zns_sequential_reset(zns, utilization, WRITERS, warmup, measure)?;
        results.push((on_block, on_zns));
    }
    let title = "Fig. 6: sequential writes with erase-block-sized TRIMs (block) or resets (ZNS)";
    let mut chart = LineChart::new(title, "device utilization (%)", "write MiB/s");
    let curve = |pick: &dyn Fn(&(SequentialResult, SequentialResult)) -> f64| -> Vec<(f64, f64)> {
        points.iter().zip(&results).map(|(&p, pair)| (p as f64, pick(pair))).collect()
    };
    chart.series("Block SSD", &curve(&|pair| pair.0.bandwidth_mib_s));
    chart.series("ZNS SSD", &curve(&|pair| pair.1.bandwidth_mib_s));
    chart.series_right("WAF, Block SSD", &curve(&|pair| pair.0.waf));
    chart.right_axis_label("WAF").y_from_zero(true);
    let mut table = Table::new(&["util %", "device", "write MiB/s", "WAF"]);
    for (&percent, (on_block, on_zns)) in points.iter().zip(&results) {
        for result in [on_block, on_zns] {
            table.row(vec![percent.to_string(), result.device.clone(), f1(result.bandwidth_mib_s), f2(result.waf)]);
        }
    }
    let at = |percent: u32| &results[points.iter().position(|&p| p == percent).expect("point")];
    let first = at(points[0]);
    let high = if points.contains(&80) { 80 } else { *points.last().expect("points") };
    let mut comparisons = Vec::new();
    if points.contains(&50) {
        let half = ratio(at(50).0.bandwidth_mib_s, first.0.bandwidth_mib_s);
        comparisons.push(Comparison::new(
            "Block SSD bandwidth at 50 % / at the lowest utilization",
            "about 1/2",
            format!("{half:.2}"),
            half < 0.7,
            "",
        ));
    }
    let quarter = ratio(at(high).0.bandwidth_mib_s, first.0.bandwidth_mib_s);
    comparisons.push(Comparison::new(
        &format!("Block SSD bandwidth at {high} % / at the lowest utilization"),
        "about 1/4 (at 80 %)",
        format!("{quarter:.2}"),
        quarter < 0.4,
        "",
    ));
    let flat = ratio(at(high).1.bandwidth_mib_s, first.1.bandwidth_mib_s);
    comparisons.push(Comparison::new(
        &format!("ZNS SSD bandwidth at {high} % / at the lowest utilization"),
        "flat (full bandwidth at any utilization)",
        format!("{flat:.2}"),
        flat > 0.9,
        "",
    ));
    let rows: Vec<serde_json::Value> = results.iter().map(|(b, z)| json!({ "block": b, "zns": z })).collect();
    Ok(FigureOutput {
        id: "6".into(),
        title: title.into(),
        table,
        json: json!({ "figure": "6", "title": title, "scale": options.scale, "writers": WRITERS, "points": points, "results": rows }),
        png: chart.render_png(900, 560)?,
        extra_png: Vec::new(),
        comparisons,
        notes: vec![format!(
            "Fig. 6: {WRITERS} writers with 64 KiB writes at queue depths 1 to 4 (unequal rates, as real threads \
             have; the paper: 4 KiB writes); the erase-block-sized chunk is the model's superblock (block) or zone (ZNS); the block SSD \
             has the paper's drive's {PAPER_DRIVE_SUPERBLOCKS} superblocks, shrunk with the capacity."
        )],
    })
}
