//! End-to-end checks: charts decode as PNGs of the requested size, data lands where the
//! layout says in the right colour, odd data never panics, and output is deterministic.

use std::io::Cursor;

use znswap_chart::{
    font, nice_ticks, series_color, Align, BarChart, Canvas, ChartError, Color, LineChart, LineStyle, Marker, Side,
};

/// Decodes PNG bytes into (width, height, RGB8 pixels).
fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(Cursor::new(bytes));
    let mut reader = decoder.read_info().expect("valid PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
    let info = reader.next_frame(&mut buf).expect("valid PNG data");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

fn pixel(img: &(u32, u32, Vec<u8>), x: i64, y: i64) -> Color {
    let i = (y as usize * img.0 as usize + x as usize) * 3;
    Color::rgb(img.2[i], img.2[i + 1], img.2[i + 2])
}

fn sample_line_chart() -> LineChart {
    let mut chart = LineChart::new("Fig. 1: swap-out bandwidth", "swap utilization (%)", "MiB/s");
    chart.series("ZNSwap", &[(10.0, 950.0), (50.0, 940.0), (90.0, 930.0)]);
    chart.series("Linux swap", &[(10.0, 480.0), (50.0, 350.0), (90.0, 120.0)]);
    chart.series_right("WAF", &[(10.0, 1.1), (50.0, 1.9), (90.0, 4.2)]);
    chart.right_axis_label("WAF");
    chart.reference_line(300.0, "target 300 MiB/s");
    chart
}

fn sample_bar_chart() -> BarChart {
    let mut bars = BarChart::new("Throughput", "utilization", "kops/s");
    bars.categories(&["10%", "50%", "90%"]);
    bars.series("ZNSwap", &[400.0, 390.0, 380.0]);
    bars.series("Linux swap", &[390.0, 300.0, 150.0]);
    bars.show_values(true);
    bars
}

#[test]
fn line_chart_png_decodes_to_the_requested_size() {
    for (w, h) in [(800, 500), (640, 400), (1200, 700), (320, 240)] {
        let img = decode(&sample_line_chart().render_png(w, h).unwrap());
        assert_eq!((img.0, img.1), (w, h));
        assert_eq!(img.2.len(), (w * h * 3) as usize);
        // A chart is mostly background but not only background.
        let non_white = img.2.chunks(3).filter(|p| p != &[255, 255, 255]).count();
        assert!(non_white > 1000 && non_white < (w * h / 2) as usize, "{w}x{h}: {non_white} inked pixels");
    }
}

#[test]
fn bar_chart_png_decodes_to_the_requested_size() {
    for (w, h) in [(800, 500), (400, 300)] {
        let img = decode(&sample_bar_chart().render_png(w, h).unwrap());
        assert_eq!((img.0, img.1), (w, h));
    }
}

#[test]
fn plotted_points_have_their_series_colour() {
    let chart = sample_line_chart();
    let (w, h) = (800, 500);
    let layout = chart.layout(w, h).unwrap();
    let img = decode(&chart.render_png(w, h).unwrap());
    // The first point of each series is clear of the others and of the legend.
    let checks = [(0, 10.0, 950.0, Side::Left), (1, 90.0, 120.0, Side::Left), (2, 90.0, 4.2, Side::Right)];
    for (index, x, y, side) in checks {
        let (px, py) = layout.map(x, y, side).unwrap();
        assert!(layout.plot.contains(px as i64, py as i64), "({x}, {y}) maps outside the plot");
        assert_eq!(
            pixel(&img, px.floor() as i64, py.floor() as i64),
            series_color(index),
            "series {index} at ({x}, {y})"
        );
    }
    // The middle of a segment is on the line too (not just at markers).
    let (ax, ay) = layout.map(10.0, 480.0, Side::Left).unwrap();
    let (bx, by) = layout.map(50.0, 350.0, Side::Left).unwrap();
    let (mx, my) = ((ax + bx) / 2.0, (ay + by) / 2.0);
    assert_eq!(pixel(&img, mx.floor() as i64, my.floor() as i64), series_color(1));
}

#[test]
fn layout_mapping_is_monotonic_and_inside_the_plot() {
    let layout = sample_line_chart().layout(800, 500).unwrap();
    let p = layout.plot;
    assert!(p.x > 0 && p.y > 0 && p.right() < 800 && p.bottom() < 500);
    let (x0, y0) = layout.map(10.0, 0.0, Side::Left).unwrap();
    let (x1, y1) = layout.map(90.0, 900.0, Side::Left).unwrap();
    assert!(x1 > x0 && y1 < y0, "x grows right, y grows up");
    assert!(layout.y_ticks.min <= 0.0 && layout.y_ticks.max >= 950.0);
    let right = layout.y_right_ticks.as_ref().unwrap();
    assert!(right.min <= 1.1 && right.max >= 4.2);
    // The right axis shares the left axis' grid: same number of ticks.
    assert_eq!(right.values.len(), layout.y_ticks.values.len());
    // Right-axis mapping exists only when the chart has one.
    let mut left_only = LineChart::new("t", "x", "y");
    left_only.series("a", &[(0.0, 1.0), (1.0, 2.0)]);
    assert!(left_only.layout(400, 300).unwrap().map_y(1.0, Side::Right).is_none());
}

#[test]
fn x_tick_labels_do_not_collide() {
    let mut chart = LineChart::new("t", "x", "y");
    chart.series("a", &[(0.0, 1.0), (123456.0, 2.0)]);
    for w in [200, 300, 480, 640, 800, 1200] {
        let layout = chart.layout(w, 300).unwrap();
        let t = &layout.x_ticks;
        let widest =
            t.values.iter().map(|v| font::text_width(&znswap_chart::format_tick(*v, t.step), 1)).max().unwrap();
        let xs: Vec<f64> = t.values.iter().map(|v| layout.map_x(*v)).collect();
        for pair in xs.windows(2) {
            assert!(
                pair[1] - pair[0] > widest as f64,
                "width {w}: ticks {:?} too close for labels {widest} px",
                t.values
            );
        }
    }
}

#[test]
fn bars_have_their_series_colour() {
    let bars = sample_bar_chart();
    let layout = bars.layout(800, 500).unwrap();
    let img = decode(&bars.render_png(800, 500).unwrap());
    let zero = layout.map_y(0.0, Side::Left).unwrap();
    for (ci, values) in [[400.0, 390.0], [390.0, 300.0], [380.0, 150.0]].iter().enumerate() {
        let (left, slot) = layout.category_slot(ci).unwrap();
        // Two series share the central 80% of the slot: bar s is centred at 0.3 or 0.7.
        for (si, v) in values.iter().enumerate() {
            let x = left + slot * (0.3 + 0.4 * si as f64);
            let y = (zero + layout.map_y(*v, Side::Left).unwrap()) / 2.0;
            assert_eq!(pixel(&img, x as i64, y as i64), series_color(si), "category {ci}, series {si}");
        }
        // Between groups there is background.
        assert_eq!(pixel(&img, (left + 2.0) as i64, (zero - 5.0) as i64), Color::WHITE);
    }
}

#[test]
fn reference_line_and_legend_are_drawn() {
    let chart = sample_line_chart();
    let layout = chart.layout(800, 500).unwrap();
    let img = decode(&chart.render_png(800, 500).unwrap());
    let y = layout.map_y(300.0, Side::Left).unwrap().floor() as i64;
    let p = layout.plot;
    let grey = (p.x..p.right()).filter(|&x| pixel(&img, x, y) == Color::hex(0x666666)).count();
    // Dashed: a good part of the width is inked, but not all of it.
    assert!(grey > p.width as usize / 4 && grey < p.width as usize * 9 / 10, "{grey} of {} px", p.width);
    // Legend samples sit above the plot, in each series' colour.
    for i in 0..3 {
        let found = (0..p.y).any(|yy| (0..800).any(|xx| pixel(&img, xx, yy) == series_color(i)));
        assert!(found, "legend entry {i} missing");
    }
}

#[test]
fn text_draws_inside_its_box_only() {
    for (text, scale) in [("Fig. 1: swap-out (MiB/s)", 1), ("gjpqy|", 2), ("µs ±1 → ok", 1)] {
        let mut canvas = Canvas::new(400, 100, Color::WHITE).unwrap();
        let (x, y, w, h) = canvas.text(200, 30, text, scale, Align::Center, Color::BLACK);
        assert_eq!(w as u32, font::text_width(text, scale));
        assert_eq!(h as u32, font::CELL_HEIGHT * scale);
        let mut inside = 0;
        for py in 0..100 {
            for px in 0..400 {
                if canvas.pixel(px, py).unwrap() != Color::WHITE {
                    assert!(
                        px >= x && px < x + w && py >= y && py < y + h,
                        "{text:?}: ink at ({px}, {py}) outside box"
                    );
                    inside += 1;
                }
            }
        }
        assert!(inside > 10 * scale * scale, "{text:?}: only {inside} inked pixels");
    }
}

#[test]
fn text_alignment_and_vertical_text() {
    let mut canvas = Canvas::new(300, 200, Color::WHITE).unwrap();
    let (l, ..) = canvas.text(100, 10, "abc", 1, Align::Left, Color::BLACK);
    let (c, _, cw, _) = canvas.text(100, 30, "abc", 1, Align::Center, Color::BLACK);
    let (r, _, rw, _) = canvas.text(100, 50, "abc", 1, Align::Right, Color::BLACK);
    assert_eq!(l, 100);
    assert!((c + cw / 2 - 100).abs() <= 1);
    assert_eq!(r + rw, 100);

    let mut canvas = Canvas::new(100, 200, Color::WHITE).unwrap();
    let (x, y, w, h) = canvas.text_vertical(40, 100, "MiB/s", 1, Align::Center, Color::BLACK);
    assert_eq!(w as u32, font::CELL_HEIGHT);
    assert_eq!(h as u32, font::text_width("MiB/s", 1));
    assert!((y + h / 2 - 100).abs() <= 1);
    let mut inked = 0;
    for py in 0..200 {
        for px in 0..100 {
            if canvas.pixel(px, py).unwrap() != Color::WHITE {
                assert!(px >= x && px < x + w && py >= y && py < y + h, "ink at ({px}, {py}) outside vertical box");
                inked += 1;
            }
        }
    }
    assert!(inked > 30);
    // Rotated counter-clockwise: the first letter ('M', starting with a full-height stem)
    // is at the bottom, so the bottom row of the box is inked along the glyph's height.
    let bottom_row = (x..x + w).filter(|&px| canvas.pixel(px, y + h - 1).unwrap() != Color::WHITE).count();
    assert!(bottom_row >= font::CAP_HEIGHT as usize, "bottom row has {bottom_row} inked pixels");
}

#[test]
fn font_covers_printable_ascii() {
    for code in 32u8..=126 {
        assert!(font::has_glyph(code as char), "missing glyph {code}");
        assert!(font::glyph(code as char).advance() > 0);
    }
    assert_eq!(font::ASCII.len(), 95);
}

#[test]
fn nice_ticks_cover_the_range() {
    for (lo, hi) in [(10.0, 90.0), (0.0, 957.0), (1.0, 4.2), (-0.5, 0.25)] {
        let t = nice_ticks(lo, hi, 6);
        assert!(t.min <= lo && t.max >= hi);
        let mantissa = t.step / 10f64.powf(t.step.log10().floor());
        assert!([1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9), "step {}", t.step);
    }
}

#[test]
fn rendering_is_deterministic() {
    let a = sample_line_chart().render_png(800, 500).unwrap();
    let b = sample_line_chart().render_png(800, 500).unwrap();
    assert_eq!(a, b);
    let c = sample_bar_chart().render_png(640, 400).unwrap();
    let d = sample_bar_chart().clone().render_png(640, 400).unwrap();
    assert_eq!(c, d);
    assert_ne!(a, c);
}

#[test]
fn odd_data_never_panics() {
    let nasty: Vec<Vec<(f64, f64)>> = vec![
        vec![],
        vec![(5.0, 5.0)],
        vec![(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)],
        vec![(3.0, 1.0), (3.0, 2.0)],
        vec![(0.0, f64::NAN), (1.0, 2.0), (f64::INFINITY, 3.0), (2.0, f64::NEG_INFINITY), (3.0, 4.0)],
        vec![(f64::NAN, f64::NAN)],
        vec![(0.0, -1e300), (1.0, 1e300)],
        vec![(-1e308, 0.0), (1e308, 1.0)],
        vec![(0.0, 1e-300), (1.0, 2e-300)],
        vec![(0.0, -5.0), (1.0, -7.0)],
        vec![(1e15, 1.0), (1e15 + 1.0, 2.0)],
    ];
    for points in &nasty {
        for style in [LineStyle::Solid, LineStyle::Dashed, LineStyle::MarkersOnly] {
            let mut chart = LineChart::new("odd", "x", "y");
            chart.series("s", points).style(style);
            chart.series_right("r", points).marker(Marker::None);
            chart.reference_line(f64::NAN, "nan");
            let img = decode(&chart.render_png(400, 300).unwrap());
            assert_eq!((img.0, img.1), (400, 300), "{points:?}");
        }
    }
    // No series, no labels at all.
    let empty = LineChart::new("", "", "");
    assert_eq!(decode(&empty.render_png(200, 150).unwrap()).0, 200);
    // Fixed ranges that cut the data off, and silly ranges that are ignored.
    let mut fixed = LineChart::new("fixed", "x", "y");
    fixed.series("s", &[(0.0, 0.0), (10.0, 1e6)]).width(f64::NAN);
    fixed.x_range(2.0, 5.0).y_range(0.0, 10.0).right_range(f64::NAN, 1.0);
    assert!(fixed.render_png(300, 200).is_ok());

    // Bars: no categories, missing values, negative values, NaN.
    let mut bars = BarChart::new("odd bars", "c", "v");
    assert!(bars.render_png(300, 200).is_ok());
    bars.categories(&["a", "b", "c"]);
    assert!(bars.render_png(300, 200).is_ok());
    bars.series("short", &[1.0]).series("nan", &[f64::NAN, f64::INFINITY, -3.0]).series("long", &[1.0, 2.0, 3.0, 4.0]);
    bars.show_values(true).reference_line(1e300, "far");
    assert!(bars.render_png(300, 200).is_ok());
    let mut equal = BarChart::new("equal", "", "");
    equal.categories(&["x"]).series("zero", &[0.0]).show_values(true);
    assert!(equal.render_png(300, 200).is_ok());
}

#[test]
fn long_labels_and_many_series_fit() {
    let mut chart = LineChart::new(
        "A very long title that cannot possibly fit on a small image at the large text scale",
        "a long x-axis label",
        "a long y label",
    );
    for i in 0..12 {
        chart.series(&format!("series number {i}"), &[(0.0, i as f64), (1.0, 2.0 * i as f64)]);
    }
    let img = decode(&chart.render_png(640, 480).unwrap());
    assert_eq!((img.0, img.1), (640, 480));
    // Long texts are shortened rather than cut off at the image edge: the outer columns and
    // rows stay background.
    for (w, h) in [(640, 480), (360, 400), (250, 420)] {
        let img = decode(&chart.render_png(w, h).unwrap());
        for y in 0..h as i64 {
            for x in (0..4).chain(w as i64 - 4..w as i64) {
                assert_eq!(pixel(&img, x, y), Color::WHITE, "{w}x{h}: ink at ({x}, {y})");
            }
        }
        for x in 0..w as i64 {
            for y in (0..4).chain(h as i64 - 4..h as i64) {
                assert_eq!(pixel(&img, x, y), Color::WHITE, "{w}x{h}: ink at ({x}, {y})");
            }
        }
    }
    // With too many legend rows for the height, the error says why.
    let err = chart.render_png(640, 120).unwrap_err();
    assert!(err.to_string().contains("too short"), "{err}");

    let mut bars = BarChart::new("bars", "x", "y");
    let names: Vec<String> = (0..12).map(|i| format!("category with a long name {i}")).collect();
    bars.categories(&names);
    bars.series("s", &[1.0; 12]);
    assert!(bars.render_png(500, 300).is_ok());
}

#[test]
fn bad_sizes_are_errors_with_clear_messages() {
    let chart = sample_line_chart();
    for (w, h) in [(0, 500), (800, 0), (20, 20), (100_000, 500)] {
        let err = chart.render_png(w, h).unwrap_err();
        assert!(matches!(err, ChartError::BadSize { .. }), "{w}x{h}: {err:?}");
        assert!(err.to_string().starts_with(&format!("bad chart size {w}x{h}")), "{err}");
    }
    assert!(Canvas::new(0, 1, Color::WHITE).is_err());
    assert!(sample_bar_chart().render_png(30, 30).is_err());
}

#[test]
fn save_writes_a_png_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chart.png");
    sample_line_chart().save(&path, 640, 400).unwrap();
    let img = decode(&std::fs::read(&path).unwrap());
    assert_eq!((img.0, img.1), (640, 400));
    sample_bar_chart().save(dir.path().join("bars.png"), 640, 400).unwrap();
    let err = sample_bar_chart().save(dir.path().join("missing/dir/bars.png"), 640, 400).unwrap_err();
    assert!(matches!(err, ChartError::Io { .. }) && err.to_string().contains("missing/dir"), "{err}");
}
