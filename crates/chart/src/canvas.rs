//! An RGB8 raster with the few anti-aliased primitives the charts need.
//!
//! Coordinates of the float primitives (lines, markers) are in pixel units with the pixel
//! `(x, y)` covering the square `[x, x+1) x [y, y+1)`, so its centre is `(x + 0.5, y + 0.5)`.
//! Anti-aliasing uses the distance from each pixel centre to the shape: coverage falls from
//! 1 to 0 over one pixel at the edge. That is exact enough for charts and needs no
//! supersampling buffer. Everything is clipped to the canvas, so callers may draw anywhere.

use std::io::Write;
use std::path::Path;

use crate::error::{ChartError, Result};
use crate::font;
use crate::palette::Marker;
use crate::MAX_DIMENSION;

/// An sRGB colour, 8 bits per channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Color {
    pub r: u8,
    pub g: u8,
    pub b: u8,
}

impl Color {
    pub const WHITE: Color = Color::rgb(255, 255, 255);
    pub const BLACK: Color = Color::rgb(0, 0, 0);

    /// A colour from its three channels.
    pub const fn rgb(r: u8, g: u8, b: u8) -> Color {
        Color { r, g, b }
    }

    /// A colour from `0xRRGGBB`.
    pub const fn hex(rgb: u32) -> Color {
        Color::rgb((rgb >> 16) as u8, (rgb >> 8) as u8, rgb as u8)
    }

    /// `self` painted over `below` with opacity `alpha` (0 = `below`, 1 = `self`).
    ///
    /// Blending is done on the stored sRGB values. Gamma-correct blending would make thin
    /// anti-aliased lines a little heavier, but charts look fine either way and this keeps
    /// the arithmetic (and so the output bytes) simple and exactly reproducible.
    pub fn over(self, below: Color, alpha: f32) -> Color {
        let a = alpha.clamp(0.0, 1.0);
        let mix = |top: u8, bottom: u8| -> u8 { (bottom as f32 + (top as f32 - bottom as f32) * a).round() as u8 };
        Color::rgb(mix(self.r, below.r), mix(self.g, below.g), mix(self.b, below.b))
    }

    /// This colour moved towards white by `amount` (0..1); used for light fills and grid lines.
    pub fn lighten(self, amount: f32) -> Color {
        Color::WHITE.over(self, amount)
    }
}

/// A point in pixel coordinates, `(x, y)`, y growing downwards.
pub type Point = (f64, f64);

/// A dash pattern: `on` pixels drawn, then `off` pixels skipped, along the line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dash {
    pub on: f64,
    pub off: f64,
}

impl Dash {
    pub const fn new(on: f64, off: f64) -> Dash {
        Dash { on, off }
    }
}

/// Horizontal alignment of text relative to its anchor point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// The anchor is the text's left edge.
    Left,
    /// The anchor is the text's centre.
    Center,
    /// The anchor is the text's right edge.
    Right,
}

/// An RGB8 image in row-major order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canvas {
    width: u32,
    height: u32,
    pixels: Vec<u8>,
    /// Drawing is limited to `[x0, x1) x [y0, y1)` when set.
    clip: Option<(i64, i64, i64, i64)>,
}

impl Canvas {
    /// A canvas filled with `background`.
    ///
    /// Fails for a zero dimension or one above [`MAX_DIMENSION`].
    pub fn new(width: u32, height: u32, background: Color) -> Result<Canvas> {
        if width == 0 || height == 0 {
            return Err(ChartError::bad_size(width, height, "width and height must be at least 1 pixel"));
        }
        if width > MAX_DIMENSION || height > MAX_DIMENSION {
            return Err(ChartError::bad_size(
                width,
                height,
                format!("width and height must be at most {MAX_DIMENSION}"),
            ));
        }
        let count = width as usize * height as usize;
        let mut pixels = Vec::with_capacity(count * 3);
        for _ in 0..count {
            pixels.extend_from_slice(&[background.r, background.g, background.b]);
        }
        Ok(Canvas { width, height, pixels, clip: None })
    }

    pub fn width(&self) -> u32 {
        self.width
    }

    pub fn height(&self) -> u32 {
        self.height
    }

    /// The raw RGB8 bytes, row-major, 3 bytes per pixel.
    pub fn as_bytes(&self) -> &[u8] {
        &self.pixels
    }

    fn index(&self, x: i64, y: i64) -> Option<usize> {
        if x < 0 || y < 0 || x >= self.width as i64 || y >= self.height as i64 {
            return None;
        }
        Some((y as usize * self.width as usize + x as usize) * 3)
    }

    /// The colour at `(x, y)`, or `None` outside the canvas.
    pub fn pixel(&self, x: i64, y: i64) -> Option<Color> {
        self.index(x, y).map(|i| Color::rgb(self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]))
    }

    /// Limits all drawing to the rectangle with top-left `(x, y)` and the given size, or
    /// lifts the limit with `None`. Reading pixels is not affected.
    pub fn set_clip(&mut self, rect: Option<(i64, i64, i64, i64)>) {
        self.clip = rect.map(|(x, y, w, h)| (x, y, x.saturating_add(w.max(0)), y.saturating_add(h.max(0))));
    }

    fn clipped_out(&self, x: i64, y: i64) -> bool {
        matches!(self.clip, Some((x0, y0, x1, y1)) if x < x0 || y < y0 || x >= x1 || y >= y1)
    }

    /// Sets one pixel; outside the canvas (or the clip rectangle) this does nothing.
    pub fn set_pixel(&mut self, x: i64, y: i64, color: Color) {
        if self.clipped_out(x, y) {
            return;
        }
        if let Some(i) = self.index(x, y) {
            self.pixels[i..i + 3].copy_from_slice(&[color.r, color.g, color.b]);
        }
    }

    /// Paints `color` over one pixel with opacity `alpha`.
    pub fn blend_pixel(&mut self, x: i64, y: i64, color: Color, alpha: f32) {
        if alpha <= 0.0 {
            return;
        }
        if let Some(below) = self.pixel(x, y) {
            self.set_pixel(x, y, color.over(below, alpha));
        }
    }

    /// Fills the integer rectangle with top-left `(x, y)` and the given size (clipped).
    pub fn fill_rect(&mut self, x: i64, y: i64, width: i64, height: i64, color: Color) {
        let (mut x0, mut y0) = (x.max(0), y.max(0));
        let mut x1 = x.saturating_add(width).min(self.width as i64);
        let mut y1 = y.saturating_add(height).min(self.height as i64);
        if let Some((cx0, cy0, cx1, cy1)) = self.clip {
            (x0, y0, x1, y1) = (x0.max(cx0), y0.max(cy0), x1.min(cx1), y1.min(cy1));
        }
        for py in y0..y1 {
            for px in x0..x1 {
                let i = (py as usize * self.width as usize + px as usize) * 3;
                self.pixels[i..i + 3].copy_from_slice(&[color.r, color.g, color.b]);
            }
        }
    }

    /// Draws the 1-pixel outline of the integer rectangle with top-left `(x, y)`.
    pub fn stroke_rect(&mut self, x: i64, y: i64, width: i64, height: i64, color: Color) {
        if width <= 0 || height <= 0 {
            return;
        }
        self.fill_rect(x, y, width, 1, color);
        self.fill_rect(x, y + height - 1, width, 1, color);
        self.fill_rect(x, y, 1, height, color);
        self.fill_rect(x + width - 1, y, 1, height, color);
    }

    /// An anti-aliased straight line of the given width with round ends.
    pub fn line(&mut self, from: Point, to: Point, width: f64, color: Color) {
        self.polyline(&[from, to], width, color);
    }

    /// An anti-aliased connected line through `points`, with round joins and ends.
    ///
    /// Coverage is accumulated as the maximum over all segments before blending once, so
    /// joins are not darker than the segments (which blending each segment would cause).
    /// Points that are not finite are skipped, and the line is broken there.
    pub fn polyline(&mut self, points: &[Point], width: f64, color: Color) {
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for &(x, y) in points {
            if x.is_finite() && y.is_finite() {
                runs.last_mut().expect("runs is never empty").push((x, y));
            } else if !runs.last().expect("runs is never empty").is_empty() {
                runs.push(Vec::new());
            }
        }
        for run in runs.iter().filter(|run| !run.is_empty()) {
            let segments: Vec<(Point, Point)> =
                if run.len() == 1 { vec![(run[0], run[0])] } else { run.windows(2).map(|w| (w[0], w[1])).collect() };
            self.draw_segments(&segments, width, color);
        }
    }

    /// A dashed line through `points`; the dash pattern continues across vertices so a
    /// polyline dashes evenly.
    pub fn dashed_polyline(&mut self, points: &[Point], width: f64, dash: Dash, color: Color) {
        let Dash { on: dash, off: gap } = dash;
        let dash = if dash.is_finite() && dash > 0.0 { dash } else { 6.0 };
        let gap = if gap.is_finite() && gap > 0.0 { gap } else { 4.0 };
        let period = dash + gap;
        let mut segments = Vec::new();
        // Distance along the pattern at the start of the current segment.
        let mut phase = 0.0f64;
        let finite: Vec<(f64, f64)> = points.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite()).collect();
        for w in finite.windows(2) {
            let ((ax, ay), (bx, by)) = (w[0], w[1]);
            let len = (bx - ax).hypot(by - ay);
            if len <= 0.0 || !len.is_finite() {
                continue;
            }
            // Only the part on (or near) the canvas is dashed, so far-off points cost
            // nothing; the pattern's phase still advances by the part skipped before it.
            let margin = width.abs().min(100.0) + period;
            let bounds = (-margin, -margin, self.width as f64 + margin, self.height as f64 + margin);
            if let Some(((cx, cy), (dx, dy))) = clip_segment((ax, ay), (bx, by), bounds) {
                let skipped = (cx - ax).hypot(cy - ay);
                let visible = (dx - cx).hypot(dy - cy);
                let (ux, uy) = ((bx - ax) / len, (by - ay) / len);
                let start_phase = (phase + skipped) % period;
                let mut t = 0.0f64;
                while t < visible {
                    let in_period = (start_phase + t) % period;
                    if in_period < dash {
                        let end = (t + dash - in_period).min(visible);
                        segments.push(((cx + ux * t, cy + uy * t), (cx + ux * end, cy + uy * end)));
                        t = end;
                    } else {
                        t += period - in_period;
                    }
                }
            }
            phase = (phase + len) % period;
        }
        self.draw_segments(&segments, width, color);
    }

    /// A dashed straight line.
    pub fn dashed_line(&mut self, from: Point, to: Point, width: f64, dash: Dash, color: Color) {
        self.dashed_polyline(&[from, to], width, dash, color);
    }

    /// Blends the union of capsule-shaped segments of the given width.
    fn draw_segments(&mut self, segments: &[(Point, Point)], width: f64, color: Color) {
        if segments.is_empty() {
            return;
        }
        let half = if width.is_finite() && width > 0.0 { width / 2.0 } else { 0.5 };
        let reach = half + 1.0;
        let (mut min_x, mut min_y, mut max_x, mut max_y) = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
        for &((ax, ay), (bx, by)) in segments {
            min_x = min_x.min(ax.min(bx) - reach);
            min_y = min_y.min(ay.min(by) - reach);
            max_x = max_x.max(ax.max(bx) + reach);
            max_y = max_y.max(ay.max(by) + reach);
        }
        let Some((bx0, by0, bx1, by1)) = self.clip_box(min_x, min_y, max_x, max_y) else {
            return;
        };
        let box_w = (bx1 - bx0) as usize;
        let mut mask = vec![0f32; box_w * (by1 - by0) as usize];
        // Segments reaching far off the canvas are cut to it first: distances computed from
        // endpoints at 1e300 would lose all precision (or overflow).
        let bounds = (-reach, -reach, self.width as f64 + reach, self.height as f64 + reach);
        for &(a, b) in segments {
            let Some(((ax, ay), (bx, by))) = clip_segment(a, b, bounds) else { continue };
            let Some((sx0, sy0, sx1, sy1)) =
                self.clip_box(ax.min(bx) - reach, ay.min(by) - reach, ax.max(bx) + reach, ay.max(by) + reach)
            else {
                continue;
            };
            for py in sy0..sy1 {
                for px in sx0..sx1 {
                    let d = segment_distance(px as f64 + 0.5, py as f64 + 0.5, ax, ay, bx, by);
                    let coverage = (half + 0.5 - d).clamp(0.0, 1.0) as f32;
                    let slot = &mut mask[(py - by0) as usize * box_w + (px - bx0) as usize];
                    *slot = slot.max(coverage);
                }
            }
        }
        self.blend_mask(bx0, by0, box_w, &mask, color);
    }

    /// Blends a coverage mask whose top-left pixel is `(x0, y0)`.
    fn blend_mask(&mut self, x0: i64, y0: i64, mask_width: usize, mask: &[f32], color: Color) {
        for (i, &coverage) in mask.iter().enumerate() {
            if coverage > 0.0 {
                let px = x0 + (i % mask_width) as i64;
                let py = y0 + (i / mask_width) as i64;
                self.blend_pixel(px, py, color, coverage);
            }
        }
    }

    /// The integer pixel box `[x0, x1) x [y0, y1)` covering the float box, clipped to the
    /// canvas; `None` when nothing is visible (or the box is not finite).
    fn clip_box(&self, min_x: f64, min_y: f64, max_x: f64, max_y: f64) -> Option<(i64, i64, i64, i64)> {
        if !(min_x.is_finite() && min_y.is_finite() && max_x.is_finite() && max_y.is_finite()) {
            return None;
        }
        let x0 = min_x.floor().max(0.0).min(self.width as f64) as i64;
        let y0 = min_y.floor().max(0.0).min(self.height as f64) as i64;
        let x1 = max_x.ceil().max(0.0).min(self.width as f64) as i64;
        let y1 = max_y.ceil().max(0.0).min(self.height as f64) as i64;
        (x1 > x0 && y1 > y0).then_some((x0, y0, x1, y1))
    }

    /// A filled, anti-aliased marker centred on `(x, y)`; `size` is the marker's nominal
    /// radius in pixels (shapes are scaled so they look about equally heavy).
    pub fn marker(&mut self, x: f64, y: f64, marker: Marker, size: f64, color: Color) {
        if !(x.is_finite() && y.is_finite() && size.is_finite()) || size <= 0.0 || marker == Marker::None {
            return;
        }
        let r = size;
        // Vertices of the convex shapes, clockwise in screen space (y down).
        let polygon: Vec<(f64, f64)> = match marker {
            Marker::None | Marker::Circle => Vec::new(),
            Marker::Square => {
                let h = r * 0.88;
                vec![(x - h, y - h), (x + h, y - h), (x + h, y + h), (x - h, y + h)]
            }
            Marker::Diamond => {
                let h = r * 1.25;
                vec![(x, y - h), (x + h, y), (x, y + h), (x - h, y)]
            }
            Marker::Triangle => {
                let h = r * 1.3;
                vec![(x, y - h), (x + h * 0.866, y + h * 0.5), (x - h * 0.866, y + h * 0.5)]
            }
            Marker::TriangleDown => {
                let h = r * 1.3;
                vec![(x, y + h), (x - h * 0.866, y - h * 0.5), (x + h * 0.866, y - h * 0.5)]
            }
        };
        let reach = r * 1.4 + 1.0;
        let Some((x0, y0, x1, y1)) = self.clip_box(x - reach, y - reach, x + reach, y + reach) else {
            return;
        };
        let box_w = (x1 - x0) as usize;
        let mut mask = vec![0f32; box_w * (y1 - y0) as usize];
        for py in y0..y1 {
            for px in x0..x1 {
                let (cx, cy) = (px as f64 + 0.5, py as f64 + 0.5);
                let d = if polygon.is_empty() {
                    ((cx - x).powi(2) + (cy - y).powi(2)).sqrt() - r
                } else {
                    convex_distance(cx, cy, &polygon)
                };
                mask[(py - y0) as usize * box_w + (px - x0) as usize] = (0.5 - d).clamp(0.0, 1.0) as f32;
            }
        }
        self.blend_mask(x0, y0, box_w, &mask, color);
    }

    /// Draws `text` with the built-in font; `(x, y)` is the anchor selected by `align` on the
    /// text's top edge. Returns the drawn box `(left, top, width, height)`.
    pub fn text(&mut self, x: i64, y: i64, text: &str, scale: u32, align: Align, color: Color) -> (i64, i64, i64, i64) {
        let scale = scale.max(1) as i64;
        let width = font::text_width(text, scale as u32) as i64;
        let left = match align {
            Align::Left => x,
            Align::Center => x - width / 2,
            Align::Right => x - width,
        };
        let mut pen = left;
        for ch in text.chars() {
            let glyph = font::glyph(ch);
            for (row, bits) in glyph.rows.iter().enumerate() {
                for col in 0..glyph.width as i64 {
                    if bits & (0x80 >> (col + glyph.left as i64)) != 0 {
                        self.fill_rect(pen + col * scale, y + row as i64 * scale, scale, scale, color);
                    }
                }
            }
            pen += glyph.advance() as i64 * scale;
        }
        (left, y, width, font::CELL_HEIGHT as i64 * scale)
    }

    /// Draws `text` rotated a quarter turn counter-clockwise (reading bottom to top), as
    /// y-axis labels are. `x` is the left edge of the rotated text (the glyphs' top side);
    /// `y` is the anchor along the text: its bottom end for [`Align::Left`], its middle for
    /// [`Align::Center`], its top end for [`Align::Right`]. Returns the drawn box.
    pub fn text_vertical(
        &mut self,
        x: i64,
        y: i64,
        text: &str,
        scale: u32,
        align: Align,
        color: Color,
    ) -> (i64, i64, i64, i64) {
        let scale = scale.max(1) as i64;
        let length = font::text_width(text, scale as u32) as i64;
        let bottom = match align {
            Align::Left => y,
            Align::Center => y + length / 2,
            Align::Right => y + length,
        };
        // Unrotated glyph pixel (u along the text, v down the glyph) lands at
        // (x + v, bottom - 1 - u): a counter-clockwise quarter turn.
        let mut pen = 0i64;
        for ch in text.chars() {
            let glyph = font::glyph(ch);
            for (row, bits) in glyph.rows.iter().enumerate() {
                for col in 0..glyph.width as i64 {
                    if bits & (0x80 >> (col + glyph.left as i64)) != 0 {
                        let u = pen + col * scale;
                        let v = row as i64 * scale;
                        self.fill_rect(x + v, bottom - u - scale, scale, scale, color);
                    }
                }
            }
            pen += glyph.advance() as i64 * scale;
        }
        (x, bottom - length, font::CELL_HEIGHT as i64 * scale, length)
    }

    /// Encodes the canvas as an 8-bit RGB PNG.
    pub fn encode_png(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        {
            let mut encoder = png::Encoder::new(&mut out, self.width, self.height);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            // Charts are mostly flat colour; the stronger setting is cheap at these sizes and
            // keeps the report's images small.
            encoder.set_compression(png::Compression::High);
            let mut writer = encoder.write_header().map_err(|e| ChartError::Encode(e.to_string()))?;
            writer.write_image_data(&self.pixels).map_err(|e| ChartError::Encode(e.to_string()))?;
            writer.finish().map_err(|e| ChartError::Encode(e.to_string()))?;
        }
        Ok(out)
    }

    /// Encodes the canvas as PNG and writes it to `path`.
    pub fn save_png(&self, path: impl AsRef<Path>) -> Result<()> {
        let bytes = self.encode_png()?;
        write_file(path.as_ref(), &bytes)
    }
}

/// Writes `bytes` to `path`, mapping failures to [`ChartError::Io`] with the path.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| ChartError::Io { path: path.display().to_string(), source };
    let mut file = std::fs::File::create(path).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.flush().map_err(io)
}

/// The part of segment `a`-`b` inside the box `(x0, y0, x1, y1)` (Liang-Barsky), if any.
fn clip_segment(a: Point, b: Point, (x0, y0, x1, y1): (f64, f64, f64, f64)) -> Option<(Point, Point)> {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    if !(dx.is_finite() && dy.is_finite()) {
        return None;
    }
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    for (p, q) in [(-dx, a.0 - x0), (dx, x1 - a.0), (-dy, a.1 - y0), (dy, y1 - a.1)] {
        if p == 0.0 {
            if q < 0.0 {
                return None;
            }
        } else {
            let r = q / p;
            if p < 0.0 {
                t0 = t0.max(r);
            } else {
                t1 = t1.min(r);
            }
        }
    }
    (t0 <= t1).then_some(((a.0 + t0 * dx, a.1 + t0 * dy), (a.0 + t1 * dx, a.1 + t1 * dy)))
}

/// Distance from `(px, py)` to the segment `a`-`b` (a point when `a == b`).
fn segment_distance(px: f64, py: f64, ax: f64, ay: f64, bx: f64, by: f64) -> f64 {
    let (dx, dy) = (bx - ax, by - ay);
    let len2 = dx * dx + dy * dy;
    let t = if len2 > 0.0 { (((px - ax) * dx + (py - ay) * dy) / len2).clamp(0.0, 1.0) } else { 0.0 };
    let (cx, cy) = (ax + t * dx, ay + t * dy);
    ((px - cx).powi(2) + (py - cy).powi(2)).sqrt()
}

/// Signed distance-like value for a convex polygon given clockwise (screen space): the
/// largest signed distance to any edge line, negative inside. Near outer corners it slightly
/// underestimates the true distance, which only rounds corners' anti-aliasing a little.
fn convex_distance(px: f64, py: f64, polygon: &[(f64, f64)]) -> f64 {
    let mut worst = f64::MIN;
    for i in 0..polygon.len() {
        let (ax, ay) = polygon[i];
        let (bx, by) = polygon[(i + 1) % polygon.len()];
        let (ex, ey) = (bx - ax, by - ay);
        let len = (ex * ex + ey * ey).sqrt();
        if len == 0.0 {
            continue;
        }
        // Outward normal of a clockwise (screen-space) polygon edge.
        let (nx, ny) = (ey / len, -ex / len);
        worst = worst.max((px - ax) * nx + (py - ay) * ny);
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    const RED: Color = Color::rgb(200, 0, 0);

    fn inked(c: &Canvas) -> usize {
        c.as_bytes().chunks(3).filter(|p| p != &[255, 255, 255]).count()
    }

    #[test]
    fn lines_are_solid_at_the_centre_and_soft_at_the_edge() {
        let mut c = Canvas::new(50, 20, Color::WHITE).unwrap();
        c.line((5.0, 10.5), (45.0, 10.5), 1.0, RED);
        assert_eq!(c.pixel(20, 10), Some(RED));
        assert_eq!(c.pixel(20, 12), Some(Color::WHITE));
        // A diagonal line leaves partly covered (blended) pixels next to full ones.
        let mut d = Canvas::new(50, 50, Color::WHITE).unwrap();
        d.line((5.0, 5.0), (45.0, 30.0), 2.0, RED);
        let partial = d.as_bytes().chunks(3).filter(|p| p[0] != 255 && p != &[200, 0, 0]).count();
        assert!(partial > 20, "{partial} anti-aliased pixels");
    }

    #[test]
    fn polyline_joins_are_not_darker_than_segments() {
        let grey = Color::rgb(100, 100, 100);
        let mut c = Canvas::new(40, 40, Color::WHITE).unwrap();
        c.polyline(&[(5.0, 5.0), (20.0, 20.0), (35.0, 5.0)], 3.0, grey);
        // Blending only ever moves from white towards grey, never past it.
        assert!(c.as_bytes().iter().all(|&v| v >= 100));
    }

    #[test]
    fn dashed_lines_have_gaps() {
        let mut c = Canvas::new(100, 10, Color::WHITE).unwrap();
        c.dashed_line((0.0, 5.5), (100.0, 5.5), 1.0, Dash::new(6.0, 4.0), RED);
        let row: Vec<bool> = (0..100).map(|x| c.pixel(x, 5) == Some(RED)).collect();
        let on = row.iter().filter(|&&b| b).count();
        assert!(on > 40 && on < 75, "{on} of 100 pixels inked");
        // The pattern repeats with period 10.
        assert_eq!(row[12..20], row[22..30]);
        // Far-off end points still dash across the canvas.
        c.dashed_line((0.0, 8.5), (1e300, 8.5), 1.0, Dash::new(6.0, 4.0), RED);
        let far = (0..100).filter(|&x| c.pixel(x, 8) == Some(RED)).count();
        assert!(far > 40 && far < 75, "{far} of 100 pixels inked");
        // Nonsense patterns fall back to a default rather than looping forever.
        c.dashed_line((0.0, 2.5), (100.0, 2.5), 1.0, Dash::new(0.0, f64::NAN), RED);
        assert!((0..100).any(|x| c.pixel(x, 2) == Some(RED)));
    }

    #[test]
    fn markers_have_distinct_shapes() {
        let mut seen = Vec::new();
        for m in [Marker::Circle, Marker::Square, Marker::Triangle, Marker::Diamond, Marker::TriangleDown] {
            let mut c = Canvas::new(21, 21, Color::WHITE).unwrap();
            c.marker(10.5, 10.5, m, 5.0, RED);
            assert_eq!(c.pixel(10, 10), Some(RED), "{m:?} centre");
            assert_eq!(c.pixel(0, 0), Some(Color::WHITE), "{m:?} corner");
            assert!(inked(&c) > 30, "{m:?} too small");
            assert!(!seen.contains(&c), "{m:?} looks like another marker");
            seen.push(c);
        }
        let mut c = Canvas::new(21, 21, Color::WHITE).unwrap();
        c.marker(10.5, 10.5, Marker::None, 5.0, RED);
        c.marker(f64::NAN, 10.5, Marker::Circle, 5.0, RED);
        assert_eq!(inked(&c), 0);
    }

    #[test]
    fn drawing_is_clipped() {
        let mut c = Canvas::new(30, 30, Color::WHITE).unwrap();
        c.set_clip(Some((10, 10, 10, 10)));
        c.fill_rect(0, 0, 30, 30, RED);
        c.line((0.0, 0.0), (1e300, 1e300), 3.0, RED);
        // The far-reaching diagonal still crosses the clip box.
        assert_eq!(c.pixel(15, 15), Some(RED));
        c.fill_rect(0, 0, 30, 30, RED);
        assert_eq!(inked(&c), 100);
        assert_eq!(c.pixel(10, 10), Some(RED));
        assert_eq!(c.pixel(20, 20), Some(Color::WHITE));
        c.set_clip(None);
        c.fill_rect(-5, -5, 1000, 1000, RED);
        assert_eq!(inked(&c), 900);
    }

    #[test]
    fn png_round_trip() {
        let mut c = Canvas::new(7, 3, Color::hex(0x123456)).unwrap();
        c.set_pixel(6, 2, RED);
        let bytes = c.encode_png().unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (7, 3));
        assert_eq!(&buf[..info.buffer_size()], c.as_bytes());
    }

    #[test]
    fn colour_helpers() {
        assert_eq!(Color::hex(0x0072B2), Color::rgb(0, 0x72, 0xB2));
        assert_eq!(RED.over(Color::WHITE, 1.0), RED);
        assert_eq!(RED.over(Color::WHITE, 0.0), Color::WHITE);
        assert_eq!(Color::BLACK.over(Color::WHITE, 0.5), Color::rgb(128, 128, 128));
        assert_eq!(Color::BLACK.lighten(1.0), Color::WHITE);
    }
}
