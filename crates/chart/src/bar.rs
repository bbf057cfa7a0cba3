//! Grouped bar charts: categories on the x-axis, one bar per series in each group.

use std::path::Path;

use crate::canvas::{write_file, Align, Canvas, Color};
use crate::error::Result;
use crate::font::{self, CAP_HEIGHT};
use crate::frame::{FrameSpec, Layout, LegendEntry, PlotRect, SampleKind, Side, XSpec, YSpec, BACKGROUND, TEXT};
use crate::line::{draw_reference, draw_reference_label, finite_extent, ReferenceLine, REFERENCE_COLOR};
use crate::palette::{series_color, Marker};

/// Pixels reserved above the tallest bar for its printed value.
const VALUE_ROOM: i64 = 16;

/// A grouped bar chart.
#[derive(Debug, Clone)]
pub struct BarChart {
    title: String,
    x_label: String,
    y_label: String,
    categories: Vec<String>,
    series: Vec<(String, Vec<f64>, Option<Color>)>,
    references: Vec<ReferenceLine>,
    show_values: bool,
    decimals: Option<usize>,
    y_range: Option<(f64, f64)>,
}

impl BarChart {
    /// A chart with a title and axis labels (any may be empty).
    pub fn new(title: &str, x_label: &str, y_label: &str) -> BarChart {
        BarChart {
            title: title.to_string(),
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            categories: Vec::new(),
            series: Vec::new(),
            references: Vec::new(),
            show_values: false,
            decimals: None,
            y_range: None,
        }
    }

    /// Sets the category names (the groups along the x-axis).
    pub fn categories<S: AsRef<str>>(&mut self, names: &[S]) -> &mut BarChart {
        self.categories = names.iter().map(|s| s.as_ref().to_string()).collect();
        self
    }

    /// Adds a series: one value per category, in category order.
    pub fn series(&mut self, name: &str, values: &[f64]) -> &mut BarChart {
        self.series.push((name.to_string(), values.to_vec(), None));
        self
    }

    /// Adds a series with an explicit colour.
    pub fn series_colored(&mut self, name: &str, values: &[f64], color: Color) -> &mut BarChart {
        self.series.push((name.to_string(), values.to_vec(), Some(color)));
        self
    }

    /// Prints each bar's value above it (default off).
    pub fn show_values(&mut self, on: bool) -> &mut BarChart {
        self.show_values = on;
        self
    }

    /// Decimals for printed values (default: automatic).
    pub fn value_decimals(&mut self, decimals: usize) -> &mut BarChart {
        self.decimals = Some(decimals.min(10));
        self
    }

    /// A dashed horizontal line at `y`, labelled at its right end.
    pub fn reference_line(&mut self, y: f64, label: &str) -> &mut BarChart {
        self.references.push(ReferenceLine {
            value: y,
            label: label.to_string(),
            side: Side::Left,
            color: REFERENCE_COLOR,
        });
        self
    }

    /// Fixes the y range instead of fitting it to the data.
    pub fn y_range(&mut self, min: f64, max: f64) -> &mut BarChart {
        self.y_range = Some((min, max));
        self
    }

    fn color_of(&self, index: usize) -> Color {
        self.series[index].2.unwrap_or_else(|| series_color(index))
    }

    fn frame(&self, headroom: f64) -> FrameSpec {
        let y_left = match self.y_range.filter(|(lo, hi)| lo.is_finite() && hi.is_finite() && lo < hi) {
            Some((lo, hi)) => YSpec { lo, hi, exact: true },
            None => {
                let values = self
                    .series
                    .iter()
                    .flat_map(|s| s.1.iter().take(self.categories.len()).copied())
                    .chain(self.references.iter().map(|r| r.value));
                // Bars grow from zero, so zero is always in range.
                let (lo, hi) = finite_extent(values).unwrap_or((0.0, 1.0));
                YSpec { lo: lo.min(0.0), hi: hi.max(0.0), exact: false }
            }
        };
        let legend = (0..self.series.len())
            .map(|i| LegendEntry {
                name: self.series[i].0.clone(),
                color: self.color_of(i),
                marker: Marker::None,
                kind: SampleKind::Box,
            })
            .collect();
        FrameSpec {
            title: self.title.clone(),
            x_label: self.x_label.clone(),
            y_label: self.y_label.clone(),
            right_label: None,
            legend,
            x: XSpec::Categories(self.categories.clone()),
            y_left,
            y_right: None,
            inset: 0.0,
            inset_bottom: false,
            // Value labels sit above the bars and need room below the plot's top edge.
            headroom,
            x_grid: false,
        }
    }

    /// Pixel rectangles `(left, top, width, height)` of every bar, as `[series][category]`;
    /// `None` where the value is missing or not finite.
    fn bars(&self, layout: &Layout) -> Vec<Vec<Option<PlotRect>>> {
        let n = self.series.len().max(1) as f64;
        let p = layout.plot;
        let zero = layout.map_y(0.0, Side::Left).unwrap_or(p.bottom() as f64 + 0.5);
        let zero = zero.clamp(p.y as f64, (p.bottom() + 1) as f64);
        self.series
            .iter()
            .enumerate()
            .map(|(si, s)| {
                (0..self.categories.len())
                    .map(|ci| {
                        let v = *s.1.get(ci)?;
                        if !v.is_finite() {
                            return None;
                        }
                        let (slot_left, slot_w) = layout.category_slot(ci)?;
                        // The group takes 80% of the slot; bars in it are separated by 1 px
                        // when wide enough to spare it.
                        let group_w = slot_w * 0.8;
                        let bar_w = group_w / n;
                        let left = slot_left + (slot_w - group_w) / 2.0 + bar_w * si as f64;
                        let x0 = left.round() as i64;
                        let mut x1 = (left + bar_w).round() as i64;
                        if x1 - x0 >= 5 && n > 1.0 {
                            x1 -= 1;
                        }
                        let y = layout.map_y(v, Side::Left)?.clamp(p.y as f64 - 1.0, (p.bottom() + 2) as f64);
                        let (top, bottom) = if y <= zero { (y, zero) } else { (zero, y) };
                        let (y0, y1) = (top.round() as i64, bottom.round() as i64);
                        Some(PlotRect { x: x0, y: y0, width: (x1 - x0).max(1), height: (y1 - y0).max(1) })
                    })
                    .collect()
            })
            .collect()
    }

    /// The finite values that are drawn (one per category at most).
    fn drawn_values(&self) -> impl Iterator<Item = f64> + '_ {
        self.series.iter().flat_map(|s| s.1.iter().take(self.categories.len()).copied()).filter(|v| v.is_finite())
    }

    /// Decimals for printed values: the explicit setting, or one choice for the whole chart
    /// (so labels line up): the fewest decimals, up to 3, that print every value exactly,
    /// else a precision suited to the values' magnitude.
    fn value_decimals_used(&self) -> usize {
        if let Some(d) = self.decimals {
            return d;
        }
        let exact = |v: f64| {
            (0..=3usize).find(|&d| {
                let p = 10f64.powi(d as i32);
                ((v * p).round() / p - v).abs() <= 1e-9 * v.abs().max(1.0)
            })
        };
        let by_magnitude = |v: f64| {
            if v.abs() >= 100.0 {
                0
            } else if v.abs() >= 10.0 {
                1
            } else {
                2
            }
        };
        self.drawn_values().map(|v| exact(v).unwrap_or_else(|| by_magnitude(v))).max().unwrap_or(0)
    }

    /// The value labels to print, `(bar, value, text)`.
    fn value_labels(&self, bars: &[Vec<Option<PlotRect>>]) -> Vec<(PlotRect, f64, String)> {
        if !self.show_values {
            return Vec::new();
        }
        let d = self.value_decimals_used();
        bars.iter()
            .enumerate()
            .flat_map(|(si, row)| {
                row.iter().enumerate().filter_map(move |(ci, r)| r.map(|r| (r, self.series[si].1[ci])))
            })
            .map(|(r, v)| (r, v, format!("{v:.d$}")))
            .collect()
    }

    /// The frame and layout, with room above the bars for the value labels. Labels are
    /// rotated (all of them, for a uniform look) when any would overflow its bar; that needs
    /// more room, known only once the bar widths are, hence the second pass. Bar widths do
    /// not depend on the y range, so the orientation found in the first pass holds.
    fn frame_and_layout(&self, width: u32, height: u32) -> Result<(FrameSpec, Layout, bool)> {
        let room = if self.show_values { VALUE_ROOM as f64 } else { 0.0 };
        let frame = self.frame(room);
        let layout = frame.layout(width, height)?;
        let labels = self.value_labels(&self.bars(&layout));
        let vertical = labels.iter().any(|(r, _, text)| font::text_width(text, 1) as i64 > r.width + 4);
        if !vertical {
            return Ok((frame, layout, false));
        }
        let longest = labels.iter().map(|(_, _, text)| font::text_width(text, 1) as i64).max().unwrap_or(0);
        let frame = self.frame((longest + 6).max(VALUE_ROOM) as f64);
        let layout = frame.layout(width, height)?;
        Ok((frame, layout, true))
    }

    /// The layout `render` uses for this size: where the plot is and how data maps to pixels.
    pub fn layout(&self, width: u32, height: u32) -> Result<Layout> {
        Ok(self.frame_and_layout(width, height)?.1)
    }

    /// Draws the chart onto a new canvas.
    pub fn render(&self, width: u32, height: u32) -> Result<Canvas> {
        let (frame, layout, vertical) = self.frame_and_layout(width, height)?;
        let mut canvas = Canvas::new(width, height, BACKGROUND)?;
        frame.draw_grid(&mut canvas, &layout);
        let p = layout.plot;
        let bars = self.bars(&layout);
        canvas.set_clip(Some((p.x + 1, p.y + 1, p.width - 2, p.height - 1)));
        for (si, row) in bars.iter().enumerate() {
            let color = self.color_of(si);
            for r in row.iter().flatten() {
                canvas.fill_rect(r.x, r.y, r.width, r.height, color);
            }
        }
        canvas.set_clip(None);
        for r in &self.references {
            draw_reference(&mut canvas, &layout, r);
        }
        for (r, v, text) in &self.value_labels(&bars) {
            draw_value(&mut canvas, *r, *v, text, vertical);
        }
        for r in &self.references {
            draw_reference_label(&mut canvas, &layout, r);
        }
        frame.draw_frame(&mut canvas, &layout);
        Ok(canvas)
    }

    /// Renders the chart as PNG bytes.
    pub fn render_png(&self, width: u32, height: u32) -> Result<Vec<u8>> {
        self.render(width, height)?.encode_png()
    }

    /// Renders the chart and writes it as a PNG file.
    pub fn save(&self, path: impl AsRef<Path>, width: u32, height: u32) -> Result<()> {
        let bytes = self.render_png(width, height)?;
        write_file(path.as_ref(), &bytes)
    }
}

/// Prints a bar's value just beyond its end, horizontally or rotated a quarter turn.
fn draw_value(canvas: &mut Canvas, bar: PlotRect, v: f64, text: &str, vertical: bool) {
    let cx = bar.x + bar.width / 2;
    let negative = v < 0.0;
    if !vertical {
        let top = if negative { bar.y + bar.height + 3 } else { bar.y - 3 - CAP_HEIGHT as i64 };
        canvas.text(cx, top, text, 1, Align::Center, TEXT);
    } else {
        let x = cx - CAP_HEIGHT as i64 / 2;
        if negative {
            canvas.text_vertical(x, bar.y + bar.height + 3, text, 1, Align::Right, TEXT);
        } else {
            canvas.text_vertical(x, bar.y - 3, text, 1, Align::Left, TEXT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(values: &[f64]) -> BarChart {
        let mut c = BarChart::new("t", "x", "y");
        c.categories(&["a", "b", "c"]).series("s", values).show_values(true);
        c
    }

    #[test]
    fn value_decimals_are_shared_by_the_chart() {
        assert_eq!(chart(&[412.0, 401.0, 396.0]).value_decimals_used(), 0);
        assert_eq!(chart(&[412.0, 322.5, 396.0]).value_decimals_used(), 1);
        assert_eq!(chart(&[0.4, 0.25, 1.0]).value_decimals_used(), 2);
        assert_eq!(chart(&[1.0 / 3.0, 2.0, f64::NAN]).value_decimals_used(), 2);
        assert_eq!(chart(&[1000.0 / 3.0, 2.0, 3.0]).value_decimals_used(), 0);
        assert_eq!(chart(&[1.0, 2.0, 3.0]).value_decimals(3).value_decimals_used(), 3);
    }

    #[test]
    fn value_labels_sit_above_their_bars() {
        let c = chart(&[10.0, 20.0, 30.0]);
        let (_, layout, vertical) = c.frame_and_layout(600, 400).unwrap();
        assert!(!vertical);
        let canvas = c.render(600, 400).unwrap();
        for r in c.bars(&layout).into_iter().flatten().flatten() {
            let above = (r.y - 3 - CAP_HEIGHT as i64..r.y - 3)
                .flat_map(|y| (r.x..r.x + r.width).map(move |x| (x, y)))
                .filter(|&(x, y)| canvas.pixel(x, y) == Some(TEXT))
                .count();
            assert!(above > 10, "no label above bar {r:?}");
        }
        // The tallest label stays inside the plot.
        assert!(layout.y_ticks.max > 30.0);
    }

    #[test]
    fn narrow_bars_get_rotated_labels_and_more_headroom() {
        let mut c = BarChart::new("t", "x", "y");
        let names: Vec<String> = (0..10).map(|i| i.to_string()).collect();
        c.categories(&names).show_values(true);
        for s in 0..4 {
            c.series(&format!("s{s}"), &[123456.5; 10]);
        }
        let (_, rotated, vertical) = c.frame_and_layout(500, 300).unwrap();
        assert!(vertical);
        let mut flat = c.clone();
        flat.show_values(false);
        let plain = flat.layout(500, 300).unwrap();
        assert!(rotated.y_ticks.max > plain.y_ticks.max, "{:?} vs {:?}", rotated.y_ticks, plain.y_ticks);
        // Every bar's rotated label fits between the bar top and the plot top.
        let bars = c.bars(&rotated);
        let top = bars.iter().flatten().flatten().map(|r| r.y).min().unwrap();
        let label = font::text_width("123456.5", 1) as i64;
        assert!(top - 3 - label >= rotated.plot.y, "label would leave the plot");
    }
}
