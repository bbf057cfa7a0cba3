//! The parts every chart shares: title, legend, axes, ticks, grid and the data-to-pixel
//! mapping. Layout works from the outside in: the title and legend take the top, axis
//! labels and tick labels take the sides and bottom, and the plot gets what is left. Tick
//! counts follow from the plot's size so labels do not collide.

use crate::canvas::{Align, Canvas, Color, Dash};
use crate::error::{ChartError, Result};
use crate::font::{self, CAP_HEIGHT, CELL_HEIGHT};
use crate::line::LineStyle;
use crate::palette::Marker;
use crate::ticks::{aligned_ticks, format_tick, nice_ticks, Ticks};

pub(crate) const BACKGROUND: Color = Color::WHITE;
pub(crate) const TEXT: Color = Color::hex(0x222222);
const AXIS: Color = Color::hex(0x555555);
const GRID: Color = Color::hex(0xE4E4E4);
const GRID_MINOR: Color = Color::hex(0xF0F0F0);

/// Space between the image edge and anything drawn.
const PAD: i64 = 12;
/// Length of tick marks outside the plot.
const TICK: i64 = 5;
/// Gap between a tick mark's end and its label.
const TICK_GAP: i64 = 3;
/// Gap between tick labels and the axis label.
const LABEL_GAP: i64 = 8;
/// Height of one legend row.
const LEGEND_ROW: i64 = 18;
/// Length of the line sample in a legend entry.
const LEGEND_SAMPLE: i64 = 26;
/// Smallest plot area accepted; below this a chart is unreadable.
const MIN_PLOT: i64 = 40;

/// Which y-axis a series or reference line belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Left,
    Right,
}

/// An integer pixel rectangle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlotRect {
    pub x: i64,
    pub y: i64,
    pub width: i64,
    pub height: i64,
}

impl PlotRect {
    pub fn right(&self) -> i64 {
        self.x + self.width - 1
    }

    pub fn bottom(&self) -> i64 {
        self.y + self.height - 1
    }

    /// Whether the pixel `(x, y)` lies inside.
    pub fn contains(&self, x: i64, y: i64) -> bool {
        x >= self.x && x <= self.right() && y >= self.y && y <= self.bottom()
    }
}

/// How a legend entry's sample is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SampleKind {
    Line(LineStyle),
    Box,
}

#[derive(Debug, Clone)]
pub(crate) struct LegendEntry {
    pub name: String,
    pub color: Color,
    pub marker: Marker,
    pub kind: SampleKind,
}

/// What the x-axis shows.
#[derive(Debug, Clone)]
pub(crate) enum XSpec {
    /// A numeric axis over the data range `(lo, hi)`; `exact` keeps the range as given
    /// instead of widening it to nice ticks.
    Numeric {
        lo: f64,
        hi: f64,
        exact: bool,
    },
    Categories(Vec<String>),
}

/// A y-axis data range; `exact` keeps it as given.
#[derive(Debug, Clone, Copy)]
pub(crate) struct YSpec {
    pub lo: f64,
    pub hi: f64,
    pub exact: bool,
}

/// Everything the frame needs to know about a chart.
#[derive(Debug, Clone)]
pub(crate) struct FrameSpec {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub right_label: Option<String>,
    pub legend: Vec<LegendEntry>,
    pub x: XSpec,
    pub y_left: YSpec,
    pub y_right: Option<YSpec>,
    /// Pixels kept free inside the plot around the data (so markers clear the axes).
    pub inset: f64,
    /// Whether to keep the bottom inset (bar charts set it to false so bars stand on the axis).
    pub inset_bottom: bool,
    /// Pixels kept free above the highest value (bar value labels).
    pub headroom: f64,
    /// Vertical grid lines at the x ticks.
    pub x_grid: bool,
}

/// Where a chart's parts went, and the mapping from data to pixel coordinates.
///
/// Obtain one with `LineChart::layout` or `BarChart::layout`; it is exactly the layout
/// the chart's `render` uses for the same size, so tests and callers can find where a data
/// point was drawn.
#[derive(Debug, Clone)]
pub struct Layout {
    pub width: u32,
    pub height: u32,
    /// The plot area; axes are drawn on its edges.
    pub plot: PlotRect,
    /// X-axis ticks (empty for a category axis).
    pub x_ticks: Ticks,
    pub y_ticks: Ticks,
    pub y_right_ticks: Option<Ticks>,
    pub(crate) categories: Vec<String>,
    /// Category labels that had to be shortened, by index.
    pub(crate) category_labels: Vec<String>,
    /// Rows of category labels (2 when staggered because they would collide).
    pub(crate) category_rows: i64,
    pub(crate) inset: f64,
    pub(crate) inset_bottom: f64,
    pub(crate) title_scale: u32,
    pub(crate) title_y: i64,
    /// Legend entries' top-left corners, in entry order.
    pub(crate) legend_pos: Vec<(i64, i64)>,
    pub(crate) x_label_y: i64,
}

impl Layout {
    /// Horizontal pixel coordinate (pixel centres at `.5`) of the x value; for a category
    /// axis `x` is the category index (its slot centre).
    pub fn map_x(&self, x: f64) -> f64 {
        let p = &self.plot;
        if !self.categories.is_empty() {
            let slot = p.width as f64 / self.categories.len() as f64;
            return p.x as f64 + slot * (x + 0.5);
        }
        let span = (p.width - 1) as f64 - 2.0 * self.inset;
        let t = (x - self.x_ticks.min) / (self.x_ticks.max - self.x_ticks.min);
        p.x as f64 + 0.5 + self.inset + t * span
    }

    /// Vertical pixel coordinate of `y` on the given axis; `None` for the right axis when
    /// the chart has none.
    pub fn map_y(&self, y: f64, side: Side) -> Option<f64> {
        let ticks = match side {
            Side::Left => &self.y_ticks,
            Side::Right => self.y_right_ticks.as_ref()?,
        };
        let p = &self.plot;
        let span = (p.height - 1) as f64 - self.inset - self.inset_bottom;
        let t = (y - ticks.min) / (ticks.max - ticks.min);
        Some(p.y as f64 + 0.5 + self.inset + (1.0 - t) * span)
    }

    /// Pixel coordinates of the data point `(x, y)`.
    pub fn map(&self, x: f64, y: f64, side: Side) -> Option<(f64, f64)> {
        Some((self.map_x(x), self.map_y(y, side)?))
    }

    /// The horizontal extent `(left, width)` of category `index`'s slot, in pixels.
    pub fn category_slot(&self, index: usize) -> Option<(f64, f64)> {
        if index >= self.categories.len() {
            return None;
        }
        let slot = self.plot.width as f64 / self.categories.len() as f64;
        Some((self.plot.x as f64 + slot * index as f64, slot))
    }
}

fn legend_entry_width(entry: &LegendEntry) -> i64 {
    LEGEND_SAMPLE + 6 + font::text_width(&entry.name, 1) as i64
}

/// Lays the legend out in centred rows within `width`; returns positions and row count.
fn legend_rows(entries: &[LegendEntry], width: i64, top: i64) -> (Vec<(i64, i64)>, i64) {
    const GAP: i64 = 20;
    let avail = (width - 2 * PAD).max(1);
    let mut rows: Vec<Vec<(usize, i64)>> = Vec::new();
    let mut used = 0i64;
    for (i, e) in entries.iter().enumerate() {
        let w = legend_entry_width(e);
        match rows.last_mut() {
            Some(row) if used + GAP + w <= avail => {
                row.push((i, w));
                used += GAP + w;
            }
            _ => {
                rows.push(vec![(i, w)]);
                used = w;
            }
        }
    }
    let mut pos = vec![(0, 0); entries.len()];
    for (r, row) in rows.iter().enumerate() {
        let total: i64 = row.iter().map(|(_, w)| w).sum::<i64>() + GAP * (row.len() as i64 - 1);
        let mut x = ((width - total) / 2).max(PAD);
        for &(i, w) in row {
            pos[i] = (x, top + r as i64 * LEGEND_ROW);
            x += w + GAP;
        }
    }
    (pos, rows.len() as i64)
}

fn target_count(pixels: i64, per_tick: i64) -> usize {
    (pixels / per_tick).clamp(2, 10) as usize
}

/// Ticks for a range, honouring an exact range if asked for.
fn axis_ticks(spec: XSpecRange, target: usize) -> Ticks {
    let t = nice_ticks(spec.lo, spec.hi, target);
    if spec.exact && spec.lo.is_finite() && spec.hi.is_finite() && spec.lo < spec.hi {
        // Keep the given range; show the nice ticks that fall inside it.
        let values: Vec<f64> = t
            .values
            .iter()
            .copied()
            .filter(|v| *v >= spec.lo - t.step * 1e-9 && *v <= spec.hi + t.step * 1e-9)
            .collect();
        return Ticks { min: spec.lo, max: spec.hi, step: t.step, values };
    }
    t
}

#[derive(Clone, Copy)]
struct XSpecRange {
    lo: f64,
    hi: f64,
    exact: bool,
}

/// Widest formatted label of a tick set.
fn widest_label(ticks: &Ticks) -> i64 {
    ticks.values.iter().map(|v| font::text_width(&format_tick(*v, ticks.step), 1) as i64).max().unwrap_or(0)
}

/// Widens `lo..hi` upwards so that `headroom` pixels of a `plot_px` tall plot stay free.
fn with_headroom(y: YSpec, headroom: f64, plot_px: f64) -> YSpec {
    if headroom <= 0.0 || y.exact || !(y.lo.is_finite() && y.hi.is_finite()) || plot_px <= headroom * 2.0 {
        return y;
    }
    let span = y.hi - y.lo;
    if span <= 0.0 {
        return y;
    }
    let frac = headroom / plot_px;
    let hi = if y.hi > 0.0 { y.hi + span * frac / (1.0 - frac) } else { y.hi };
    let lo = if y.lo < 0.0 { y.lo - span * frac / (1.0 - frac) } else { y.lo };
    YSpec { lo, hi, exact: false }
}

/// The title and legend, which take the top of the image.
struct TopBand {
    /// 0 without a title.
    title_scale: u32,
    title_y: i64,
    legend_pos: Vec<(i64, i64)>,
    /// The first pixel row below them: the plot's top.
    bottom: i64,
}

fn check_size(width: u32, height: u32) -> Result<()> {
    if width == 0 || height == 0 {
        return Err(ChartError::bad_size(width, height, "width and height must be at least 1 pixel"));
    }
    if width > crate::MAX_DIMENSION || height > crate::MAX_DIMENSION {
        return Err(ChartError::bad_size(
            width,
            height,
            format!("width and height must be at most {}", crate::MAX_DIMENSION),
        ));
    }
    Ok(())
}

/// Rows the category labels may need in an image `w` wide: a second, staggered row is
/// decided once the plot's width is known, so its space is reserved by checking against
/// a generous estimate first.
fn category_rows_guess(categories: &[String], w: i64) -> i64 {
    if categories.is_empty() {
        return 1;
    }
    let slot = (w - 2 * PAD - 60) / categories.len() as i64;
    let widest = categories.iter().map(|c| font::text_width(c, 1) as i64).max().unwrap_or(0);
    if widest + 6 > slot {
        2
    } else {
        1
    }
}

/// Category labels: one row if they fit their slots in a plot `plot_w` wide, else
/// staggered (if `rows_guess` reserved the room), else shortened. Returns the labels and
/// the row count.
fn fit_category_labels(categories: &[String], plot_w: i64, rows_guess: i64) -> (Vec<String>, i64) {
    if categories.is_empty() {
        return (Vec::new(), 1);
    }
    let slot = plot_w / categories.len() as i64;
    let widest = categories.iter().map(|c| font::text_width(c, 1) as i64).max().unwrap_or(0);
    let rows = if widest + 6 > slot && categories.len() > 1 { 2 } else { 1 };
    let rows = rows.min(rows_guess.max(1));
    let room = if rows == 2 { 2 * slot - 8 } else { slot - 4 };
    (categories.iter().map(|c| shorten(c, room)).collect(), rows)
}

impl FrameSpec {
    /// Computes the layout for a `width` x `height` image.
    pub fn layout(&self, width: u32, height: u32) -> Result<Layout> {
        check_size(width, height)?;
        let (w, h) = (width as i64, height as i64);
        let top = self.top_band(w);

        // Bottom: tick marks, tick labels, the x-axis label.
        let categories = match &self.x {
            XSpec::Categories(c) => c.clone(),
            XSpec::Numeric { .. } => Vec::new(),
        };
        let cat_rows_guess = category_rows_guess(&categories, w);
        let bottom_h = self.bottom_height(cat_rows_guess);
        let plot_y = top.bottom;
        let plot_h = h - top.bottom - bottom_h;
        if plot_h < MIN_PLOT {
            return Err(ChartError::bad_size(
                width,
                height,
                format!(
                    "too short for the title, legend and axes: need at least {} pixels of height",
                    top.bottom + bottom_h + MIN_PLOT
                ),
            ));
        }

        // Y ticks from the plot height, then the side margins from the widest tick labels.
        let inset_bottom = if self.inset_bottom { self.inset } else { 0.0 };
        let (y_ticks, y_right_ticks) = self.y_ticks(plot_h as f64 - self.inset - inset_bottom, plot_h);
        let left = self.left_margin(&y_ticks);
        let right_margin = self.right_margin(y_right_ticks.as_ref());
        let (x_ticks, right_margin) = self.x_ticks(w, left, right_margin, y_right_ticks.is_some());
        let plot_w = w - left - right_margin;
        if plot_w < MIN_PLOT {
            return Err(ChartError::bad_size(
                width,
                height,
                format!(
                    "too narrow for the axes and labels: need at least {} pixels of width",
                    left + right_margin + MIN_PLOT
                ),
            ));
        }
        let (category_labels, category_rows) = fit_category_labels(&categories, plot_w, cat_rows_guess);

        let plot = PlotRect { x: left, y: plot_y, width: plot_w, height: plot_h };
        let x_label_y = h - PAD - CELL_HEIGHT as i64;
        Ok(Layout {
            width,
            height,
            plot,
            x_ticks,
            y_ticks,
            y_right_ticks,
            categories,
            category_labels,
            category_rows,
            inset: self.inset,
            inset_bottom,
            title_scale: top.title_scale,
            title_y: top.title_y,
            legend_pos: top.legend_pos,
            x_label_y,
        })
    }

    /// The title, then the legend, from the top of an image `w` wide.
    fn top_band(&self, w: i64) -> TopBand {
        let mut top = PAD;
        let mut title_scale = 0;
        let title_y = top;
        if !self.title.is_empty() {
            title_scale = if font::text_width(&self.title, 2) as i64 <= w - 2 * PAD { 2 } else { 1 };
            top += CAP_HEIGHT as i64 * title_scale as i64 + 3 * title_scale as i64 + 10;
        }
        let (legend_pos, legend_rows_n) = legend_rows(&self.legend, w, top);
        if legend_rows_n > 0 {
            top += legend_rows_n * LEGEND_ROW + 6;
        } else {
            top += 4;
        }
        TopBand { title_scale, title_y, legend_pos, bottom: top }
    }

    /// Height below the plot: tick marks, tick labels (in `category_rows` rows), the
    /// x-axis label.
    fn bottom_height(&self, category_rows: i64) -> i64 {
        let line_h = CELL_HEIGHT as i64;
        let x_label_h = if self.x_label.is_empty() { 0 } else { line_h + LABEL_GAP };
        let bottom_fixed = PAD + x_label_h + TICK + TICK_GAP + line_h;
        bottom_fixed + (category_rows - 1) * (line_h + 2)
    }

    /// The left and right axes' ticks for a plot `plot_h` tall, `data_px` of which the data
    /// may use (the rest is inset).
    fn y_ticks(&self, data_px: f64, plot_h: i64) -> (Ticks, Option<Ticks>) {
        let y_target = target_count(plot_h, 48);
        let y_left = with_headroom(self.y_left, self.headroom, data_px);
        let y_ticks = axis_ticks(XSpecRange { lo: y_left.lo, hi: y_left.hi, exact: y_left.exact }, y_target);
        let y_right_ticks = self.y_right.map(|r| {
            let r = with_headroom(r, self.headroom, data_px);
            if r.exact {
                axis_ticks(XSpecRange { lo: r.lo, hi: r.hi, exact: true }, y_target)
            } else {
                // Same number of intervals as the left axis, so both share the grid lines.
                aligned_ticks(r.lo, r.hi, y_ticks.values.len().saturating_sub(1).max(1))
            }
        });
        (y_ticks, y_right_ticks)
    }

    /// The y-axis label, the tick labels and the tick marks.
    fn left_margin(&self, y_ticks: &Ticks) -> i64 {
        let y_label_w = if self.y_label.is_empty() { 0 } else { CELL_HEIGHT as i64 + LABEL_GAP };
        PAD + y_label_w + widest_label(y_ticks) + TICK_GAP + TICK
    }

    /// The same for the right axis, if there is one.
    fn right_margin(&self, y_right_ticks: Option<&Ticks>) -> i64 {
        match y_right_ticks {
            Some(t) => {
                let label_w = if self.right_label.as_deref().unwrap_or("").is_empty() {
                    0
                } else {
                    CELL_HEIGHT as i64 + LABEL_GAP
                };
                PAD + label_w + widest_label(t) + TICK_GAP + TICK
            }
            None => PAD,
        }
    }

    /// X ticks: few enough that their labels keep apart. Returns them with the right
    /// margin, which without a right axis widens to hold half of the last tick label.
    fn x_ticks(&self, w: i64, left: i64, right_margin: i64, right_axis: bool) -> (Ticks, i64) {
        let XSpec::Numeric { lo, hi, exact } = &self.x else {
            return (Ticks { min: 0.0, max: 1.0, step: 1.0, values: Vec::new() }, right_margin);
        };
        let range = XSpecRange { lo: *lo, hi: *hi, exact: *exact };
        let mut plot_w = w - left - right_margin;
        let mut target = target_count(plot_w, 70);
        let mut ticks = axis_ticks(range, target);
        let mut right_margin = right_margin;
        for _ in 0..12 {
            // Room for half of the last tick label beyond the plot's right edge.
            if !right_axis {
                let last = ticks.values.last().map(|v| format_tick(*v, ticks.step)).unwrap_or_default();
                right_margin = right_margin.max(font::text_width(&last, 1) as i64 / 2 + 4);
                plot_w = w - left - right_margin;
            }
            let n = ticks.values.len().max(2) as i64;
            let spacing = (plot_w - 2 * self.inset as i64) / (n - 1);
            if widest_label(&ticks) + 10 <= spacing || target <= 1 {
                break;
            }
            target -= 1;
            ticks = axis_ticks(range, target);
        }
        (ticks, right_margin)
    }

    /// The background layer: plot grid lines.
    pub fn draw_grid(&self, canvas: &mut Canvas, layout: &Layout) {
        let p = layout.plot;
        if self.x_grid {
            for &v in &layout.x_ticks.values {
                let x = layout.map_x(v).floor() as i64;
                if x > p.x && x < p.right() {
                    canvas.fill_rect(x, p.y, 1, p.height, GRID_MINOR);
                }
            }
        }
        for &v in &layout.y_ticks.values {
            if let Some(y) = layout.map_y(v, Side::Left) {
                let y = y.floor() as i64;
                if y > p.y && y < p.bottom() {
                    canvas.fill_rect(p.x, y, p.width, 1, GRID);
                }
            }
        }
    }

    /// The foreground layer: axes, ticks, labels, legend and title.
    pub fn draw_frame(&self, canvas: &mut Canvas, layout: &Layout) {
        let p = layout.plot;
        canvas.stroke_rect(p.x, p.y, p.width, p.height, AXIS);

        // Left y-axis.
        let cap = CAP_HEIGHT as i64;
        for &v in &layout.y_ticks.values {
            let Some(y) = layout.map_y(v, Side::Left) else { continue };
            let y = y.floor() as i64;
            canvas.fill_rect(p.x - TICK, y, TICK, 1, AXIS);
            let label = format_tick(v, layout.y_ticks.step);
            canvas.text(p.x - TICK - TICK_GAP, y - cap / 2, &label, 1, Align::Right, TEXT);
        }
        if !self.y_label.is_empty() {
            let label = shorten(&self.y_label, p.height);
            canvas.text_vertical(PAD, p.y + p.height / 2, &label, 1, Align::Center, TEXT);
        }

        // Right y-axis.
        if let Some(ticks) = &layout.y_right_ticks {
            for &v in &ticks.values {
                let Some(y) = layout.map_y(v, Side::Right) else { continue };
                let y = y.floor() as i64;
                canvas.fill_rect(p.right() + 1, y, TICK, 1, AXIS);
                let label = format_tick(v, ticks.step);
                canvas.text(p.right() + 1 + TICK + TICK_GAP, y - cap / 2, &label, 1, Align::Left, TEXT);
            }
            if let Some(label) = self.right_label.as_deref().filter(|l| !l.is_empty()) {
                let x = layout.width as i64 - PAD - CELL_HEIGHT as i64;
                let label = shorten(label, p.height);
                canvas.text_vertical(x, p.y + p.height / 2, &label, 1, Align::Center, TEXT);
            }
        }

        // X-axis: numeric ticks or category labels.
        let label_top = p.bottom() + 1 + TICK + TICK_GAP;
        for &v in &layout.x_ticks.values {
            let x = layout.map_x(v).floor() as i64;
            canvas.fill_rect(x, p.bottom() + 1, 1, TICK, AXIS);
            canvas.text(x, label_top, &format_tick(v, layout.x_ticks.step), 1, Align::Center, TEXT);
        }
        for (i, label) in layout.category_labels.iter().enumerate() {
            let x = layout.map_x(i as f64).floor() as i64;
            canvas.fill_rect(x, p.bottom() + 1, 1, TICK, AXIS);
            let row = if layout.category_rows > 1 { (i % 2) as i64 } else { 0 };
            // Keep the outermost labels inside the image.
            let half = font::text_width(label, 1) as i64 / 2;
            let x = x.clamp(PAD / 2 + half, (layout.width as i64 - PAD / 2 - half).max(PAD / 2 + half));
            canvas.text(x, label_top + row * (CELL_HEIGHT as i64 + 2), label, 1, Align::Center, TEXT);
        }
        if !self.x_label.is_empty() {
            let label = shorten(&self.x_label, layout.width as i64 - 2 * PAD);
            let half = font::text_width(&label, 1) as i64 / 2;
            // Centred under the plot, but never cut off by the image edge.
            let x = (p.x + p.width / 2).clamp(PAD + half, (layout.width as i64 - PAD - half).max(PAD + half));
            canvas.text(x, layout.x_label_y, &label, 1, Align::Center, TEXT);
        }

        // Legend.
        for (entry, &(x, y)) in self.legend.iter().zip(&layout.legend_pos) {
            draw_legend_sample(canvas, entry, x, y);
            let room = layout.width as i64 - PAD - (x + LEGEND_SAMPLE + 6);
            canvas.text(x + LEGEND_SAMPLE + 6, y, &shorten(&entry.name, room), 1, Align::Left, TEXT);
        }

        // Title.
        if layout.title_scale > 0 {
            let title = if layout.title_scale == 1 {
                shorten(&self.title, layout.width as i64 - 2 * PAD)
            } else {
                self.title.clone()
            };
            canvas.text(layout.width as i64 / 2, layout.title_y, &title, layout.title_scale, Align::Center, TEXT);
        }
    }
}

fn draw_legend_sample(canvas: &mut Canvas, entry: &LegendEntry, x: i64, y: i64) {
    let mid = y as f64 + CAP_HEIGHT as f64 / 2.0;
    let (x0, x1) = (x as f64 + 1.0, (x + LEGEND_SAMPLE) as f64 - 1.0);
    match entry.kind {
        SampleKind::Box => {
            canvas.fill_rect(x + LEGEND_SAMPLE / 2 - 7, y - 1, 14, CAP_HEIGHT as i64 + 2, entry.color);
        }
        SampleKind::Line(style) => {
            match style {
                LineStyle::Solid => canvas.line((x0, mid), (x1, mid), 2.0, entry.color),
                LineStyle::Dashed => canvas.dashed_line((x0, mid), (x1, mid), 2.0, Dash::new(6.0, 4.0), entry.color),
                LineStyle::MarkersOnly => {}
            }
            let cx = x as f64 + LEGEND_SAMPLE as f64 / 2.0;
            draw_marker(canvas, cx, mid, entry.marker, entry.color);
        }
    }
}

/// A series marker with a thin white halo, so markers stay visible where lines cross.
pub(crate) fn draw_marker(canvas: &mut Canvas, x: f64, y: f64, marker: Marker, color: Color) {
    const RADIUS: f64 = 3.5;
    if marker == Marker::None {
        return;
    }
    canvas.marker(x, y, marker, RADIUS + 1.2, BACKGROUND);
    canvas.marker(x, y, marker, RADIUS, color);
}

/// `text` shortened with a trailing ellipsis so it fits `room` pixels at scale 1.
pub(crate) fn shorten(text: &str, room: i64) -> String {
    if font::text_width(text, 1) as i64 <= room {
        return text.to_string();
    }
    let mut chars: Vec<char> = text.chars().collect();
    while !chars.is_empty() {
        chars.pop();
        let candidate: String = chars.iter().collect::<String>() + "\u{2026}";
        if font::text_width(&candidate, 1) as i64 <= room {
            return candidate;
        }
    }
    String::new()
}
