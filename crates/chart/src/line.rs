//! Line charts: named series of `(x, y)` points on a numeric x-axis, with an optional
//! right-hand y-axis and horizontal reference lines.

use std::path::Path;

use crate::canvas::{write_file, Align, Canvas, Color, Dash};
use crate::error::Result;
use crate::font::CAP_HEIGHT;
use crate::frame::{draw_marker, FrameSpec, Layout, LegendEntry, SampleKind, Side, XSpec, YSpec, BACKGROUND};
use crate::palette::{series_color, series_marker, Marker};

/// How a series' points are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineStyle {
    Solid,
    Dashed,
    /// Points only, no connecting line.
    MarkersOnly,
}

/// One series of a [`LineChart`]; returned by [`LineChart::series`] to adjust its look.
#[derive(Debug, Clone)]
pub struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    side: Side,
    color: Option<Color>,
    marker: Option<Marker>,
    style: LineStyle,
    width: f64,
}

impl Series {
    /// Overrides the palette colour.
    pub fn color(&mut self, color: Color) -> &mut Series {
        self.color = Some(color);
        self
    }

    /// Overrides the marker shape ([`Marker::None`] for none). By default each series gets
    /// its own shape, unless it has more than 40 points or markers are off for the chart.
    pub fn marker(&mut self, marker: Marker) -> &mut Series {
        self.marker = Some(marker);
        self
    }

    /// Sets how points are joined.
    pub fn style(&mut self, style: LineStyle) -> &mut Series {
        self.style = style;
        self
    }

    /// Sets the line width in pixels (default 2).
    pub fn width(&mut self, width: f64) -> &mut Series {
        if width.is_finite() && width > 0.0 {
            self.width = width.min(20.0);
        }
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn side(&self) -> Side {
        self.side
    }
}

/// A horizontal dashed line at a fixed value, labelled at the plot's right end.
#[derive(Debug, Clone)]
pub(crate) struct ReferenceLine {
    pub value: f64,
    pub label: String,
    pub side: Side,
    pub color: Color,
}

/// Series with more points than this get no markers unless one is set explicitly.
const AUTO_MARKER_LIMIT: usize = 40;

pub(crate) const REFERENCE_COLOR: Color = Color::hex(0x666666);

/// A line chart. Build it with the setters, then [`render_png`](LineChart::render_png) or
/// [`save`](LineChart::save). Non-finite points are skipped (the line breaks there).
#[derive(Debug, Clone)]
pub struct LineChart {
    title: String,
    x_label: String,
    y_label: String,
    right_label: Option<String>,
    series: Vec<Series>,
    references: Vec<ReferenceLine>,
    markers: bool,
    from_zero: bool,
    x_range: Option<(f64, f64)>,
    y_range: Option<(f64, f64)>,
    right_range: Option<(f64, f64)>,
    legend: bool,
}

impl LineChart {
    /// A chart with a title and axis labels (any may be empty).
    pub fn new(title: &str, x_label: &str, y_label: &str) -> LineChart {
        LineChart {
            title: title.to_string(),
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            right_label: None,
            series: Vec::new(),
            references: Vec::new(),
            markers: true,
            from_zero: true,
            x_range: None,
            y_range: None,
            right_range: None,
            legend: true,
        }
    }

    fn push(&mut self, name: &str, points: &[(f64, f64)], side: Side, style: LineStyle) -> &mut Series {
        self.series.push(Series {
            name: name.to_string(),
            points: points.to_vec(),
            side,
            color: None,
            marker: None,
            style,
            width: 2.0,
        });
        self.series.last_mut().expect("just pushed")
    }

    /// Adds a series on the left y-axis, solid, with the next palette colour and marker.
    pub fn series(&mut self, name: &str, points: &[(f64, f64)]) -> &mut Series {
        self.push(name, points, Side::Left, LineStyle::Solid)
    }

    /// Adds a series on the right y-axis (created on first use). It is dashed by default and
    /// its legend entry says "(right)", so the two axes' series are told apart.
    pub fn series_right(&mut self, name: &str, points: &[(f64, f64)]) -> &mut Series {
        self.push(name, points, Side::Right, LineStyle::Dashed)
    }

    /// Labels the right y-axis.
    pub fn right_axis_label(&mut self, label: &str) -> &mut LineChart {
        self.right_label = Some(label.to_string());
        self
    }

    /// A dashed horizontal line at `y` on the left axis, labelled at its right end.
    pub fn reference_line(&mut self, y: f64, label: &str) -> &mut LineChart {
        self.references.push(ReferenceLine {
            value: y,
            label: label.to_string(),
            side: Side::Left,
            color: REFERENCE_COLOR,
        });
        self
    }

    /// A dashed horizontal line at `y` on the right axis.
    pub fn reference_line_right(&mut self, y: f64, label: &str) -> &mut LineChart {
        self.references.push(ReferenceLine {
            value: y,
            label: label.to_string(),
            side: Side::Right,
            color: REFERENCE_COLOR,
        });
        self
    }

    /// Whether to draw markers at the points (default true).
    pub fn markers(&mut self, on: bool) -> &mut LineChart {
        self.markers = on;
        self
    }

    /// Whether the automatic y ranges include zero (default true: bandwidths and counts
    /// read wrongly from a truncated axis).
    pub fn y_from_zero(&mut self, on: bool) -> &mut LineChart {
        self.from_zero = on;
        self
    }

    /// Fixes the x range instead of fitting it to the data.
    pub fn x_range(&mut self, min: f64, max: f64) -> &mut LineChart {
        self.x_range = Some((min, max));
        self
    }

    /// Fixes the left y range instead of fitting it to the data.
    pub fn y_range(&mut self, min: f64, max: f64) -> &mut LineChart {
        self.y_range = Some((min, max));
        self
    }

    /// Fixes the right y range instead of fitting it to the data.
    pub fn right_range(&mut self, min: f64, max: f64) -> &mut LineChart {
        self.right_range = Some((min, max));
        self
    }

    /// Whether to draw the legend (default true).
    pub fn legend(&mut self, on: bool) -> &mut LineChart {
        self.legend = on;
        self
    }

    /// The series added so far.
    pub fn series_list(&self) -> &[Series] {
        &self.series
    }

    fn color_of(&self, index: usize) -> Color {
        self.series[index].color.unwrap_or_else(|| series_color(index))
    }

    fn marker_of(&self, index: usize) -> Marker {
        let s = &self.series[index];
        if let Some(m) = s.marker {
            return m;
        }
        // Markers on a dense series (a time series, say) would merge into a smear.
        let finite = s.points.iter().filter(|p| p.0.is_finite() && p.1.is_finite()).count();
        if !self.markers || finite > AUTO_MARKER_LIMIT {
            return Marker::None;
        }
        series_marker(index)
    }

    fn has_right(&self) -> bool {
        self.series.iter().any(|s| s.side == Side::Right)
            || self.references.iter().any(|r| r.side == Side::Right)
            || self.right_range.is_some()
    }

    fn y_spec(&self, side: Side, fixed: Option<(f64, f64)>) -> YSpec {
        if let Some((lo, hi)) = fixed.filter(|(lo, hi)| lo.is_finite() && hi.is_finite() && lo < hi) {
            return YSpec { lo, hi, exact: true };
        }
        let values = self
            .series
            .iter()
            .filter(|s| s.side == side)
            .flat_map(|s| s.points.iter().filter(|p| p.0.is_finite()).map(|p| p.1))
            .chain(self.references.iter().filter(|r| r.side == side).map(|r| r.value));
        let (lo, hi) = finite_extent(values).unwrap_or((0.0, 1.0));
        let (lo, hi) = if self.from_zero { (lo.min(0.0), hi.max(0.0)) } else { (lo, hi) };
        YSpec { lo, hi, exact: false }
    }

    fn frame(&self) -> FrameSpec {
        let x = match self.x_range.filter(|(lo, hi)| lo.is_finite() && hi.is_finite() && lo < hi) {
            Some((lo, hi)) => XSpec::Numeric { lo, hi, exact: true },
            None => {
                let xs = self.series.iter().flat_map(|s| s.points.iter().filter(|p| p.1.is_finite()).map(|p| p.0));
                let (lo, hi) = finite_extent(xs).unwrap_or((0.0, 1.0));
                XSpec::Numeric { lo, hi, exact: false }
            }
        };
        let legend = if self.legend {
            (0..self.series.len())
                .map(|i| {
                    let s = &self.series[i];
                    let name = if s.side == Side::Right { format!("{} (right)", s.name) } else { s.name.clone() };
                    LegendEntry {
                        name,
                        color: self.color_of(i),
                        marker: self.marker_of(i),
                        kind: SampleKind::Line(s.style),
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        FrameSpec {
            title: self.title.clone(),
            x_label: self.x_label.clone(),
            y_label: self.y_label.clone(),
            right_label: self.right_label.clone(),
            legend,
            x,
            y_left: self.y_spec(Side::Left, self.y_range),
            y_right: self.has_right().then(|| self.y_spec(Side::Right, self.right_range)),
            inset: 8.0,
            inset_bottom: true,
            headroom: 0.0,
            x_grid: true,
        }
    }

    /// The layout `render` uses for this size: where the plot is and how data maps to pixels.
    pub fn layout(&self, width: u32, height: u32) -> Result<Layout> {
        self.frame().layout(width, height)
    }

    /// Draws the chart onto a new canvas.
    pub fn render(&self, width: u32, height: u32) -> Result<Canvas> {
        let frame = self.frame();
        let layout = frame.layout(width, height)?;
        let mut canvas = Canvas::new(width, height, BACKGROUND)?;
        frame.draw_grid(&mut canvas, &layout);
        let p = layout.plot;
        // Data stays inside the plot box (matters for fixed ranges and extreme values).
        canvas.set_clip(Some((p.x + 1, p.y + 1, p.width - 2, p.height - 2)));
        for r in &self.references {
            draw_reference(&mut canvas, &layout, r);
        }
        for (i, s) in self.series.iter().enumerate() {
            let color = self.color_of(i);
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|&(x, y)| {
                    if x.is_finite() && y.is_finite() {
                        layout.map(x, y, s.side).unwrap_or((f64::NAN, f64::NAN))
                    } else {
                        (f64::NAN, f64::NAN)
                    }
                })
                .collect();
            match s.style {
                LineStyle::Solid => canvas.polyline(&pts, s.width, color),
                LineStyle::Dashed => {
                    // Dash each unbroken run separately so gaps at skipped points stay gaps.
                    for run in pts.split(|p| !(p.0.is_finite() && p.1.is_finite())) {
                        canvas.dashed_polyline(run, s.width, Dash::new(7.0, 4.0), color);
                    }
                }
                LineStyle::MarkersOnly => {}
            }
            let marker = match (self.marker_of(i), s.style) {
                // Points would be invisible without a line or marker.
                (Marker::None, LineStyle::MarkersOnly) => Marker::Circle,
                (m, _) => m,
            };
            for &(x, y) in pts.iter().filter(|p| p.0.is_finite() && p.1.is_finite()) {
                draw_marker(&mut canvas, x, y, marker, color);
            }
            // A lone point with no marker would not show at all: give it a dot.
            if marker == Marker::None && pts.iter().filter(|p| p.0.is_finite() && p.1.is_finite()).count() == 1 {
                for &(x, y) in pts.iter().filter(|p| p.0.is_finite() && p.1.is_finite()) {
                    canvas.marker(x, y, Marker::Circle, s.width.max(2.0), color);
                }
            }
        }
        // Reference labels go on top of the data so they stay readable.
        for r in &self.references {
            draw_reference_label(&mut canvas, &layout, r);
        }
        canvas.set_clip(None);
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

/// The smallest and largest finite values, if any.
pub(crate) fn finite_extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.filter(|v| v.is_finite()).fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

pub(crate) fn draw_reference(canvas: &mut Canvas, layout: &Layout, r: &ReferenceLine) {
    let Some(y) = layout.map_y(r.value, r.side).filter(|y| y.is_finite()) else { return };
    let p = layout.plot;
    // Centred on a pixel row so the line is crisp rather than smeared over two rows.
    let y = y.floor() + 0.5;
    canvas.dashed_line((p.x as f64, y), ((p.right() + 1) as f64, y), 1.5, Dash::new(8.0, 5.0), r.color);
}

pub(crate) fn draw_reference_label(canvas: &mut Canvas, layout: &Layout, r: &ReferenceLine) {
    let Some(y) = layout.map_y(r.value, r.side).filter(|y| y.is_finite()) else { return };
    if r.label.is_empty() {
        return;
    }
    let p = layout.plot;
    let y = y.floor() as i64;
    // Above the line, unless that would leave the plot; then below it.
    let above = y - 4 - CAP_HEIGHT as i64;
    let top = if above > p.y + 2 { above } else { y + 5 };
    let right = p.right() - 6;
    // A background-coloured halo keeps the label legible where it crosses data lines
    // without hiding more of the data than the glyphs themselves.
    for (dx, dy) in [(-1, -1), (0, -1), (1, -1), (-1, 0), (1, 0), (-1, 1), (0, 1), (1, 1)] {
        canvas.text(right + dx, top + dy, &r.label, 1, Align::Right, BACKGROUND);
    }
    canvas.text(right, top, &r.label, 1, Align::Right, r.color);
}
