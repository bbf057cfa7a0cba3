//! Small, self-contained PNG charts for the znswap simulator's reproduced figures.
//!
//! Everything needed to draw a chart lives in this crate: an RGB8 raster [`Canvas`] with
//! anti-aliased primitives, a built-in bitmap font ([`font`]) and two chart types,
//! [`LineChart`] and [`BarChart`]. The only dependency is the pure-Rust `png` encoder, so
//! charts render identically on a fresh machine with no fontconfig, freetype or system fonts.
//! Rendering is a pure function of the chart's contents: the same input gives the same bytes.
//!
//! ```
//! use znswap_chart::LineChart;
//!
//! let mut chart = LineChart::new("Fig. 1: swap-out bandwidth", "swap utilization (%)", "MiB/s");
//! chart.series("ZNSwap", &[(10.0, 950.0), (50.0, 940.0), (90.0, 930.0)]);
//! chart.series("Linux swap, block SSD", &[(10.0, 480.0), (50.0, 350.0), (90.0, 120.0)]);
//! chart.series_right("WAF, block SSD", &[(10.0, 1.1), (50.0, 1.9), (90.0, 4.2)]);
//! chart.right_axis_label("WAF");
//! chart.reference_line(300.0, "target 300 MiB/s");
//! let png: Vec<u8> = chart.render_png(800, 500).unwrap();
//! assert_eq!(&png[1..4], b"PNG");
//! ```

mod bar;
mod canvas;
mod error;
pub mod font;
mod frame;
mod line;
mod palette;
mod table;
mod ticks;

pub use bar::BarChart;
pub use canvas::{Align, Canvas, Color, Dash, Point};
pub use error::{ChartError, Result};
pub use frame::{Layout, PlotRect, Side};
pub use line::{LineChart, LineStyle, Series};
pub use palette::{series_color, series_marker, Marker, PALETTE};
pub use table::Table;
pub use ticks::{format_tick, nice_ticks, Ticks};

/// Largest width or height accepted by the renderers, in pixels.
///
/// Charts are meant for reports; the cap keeps a typo (`80000` for `800`) from allocating
/// gigabytes and stays far below the PNG format's own limit.
pub const MAX_DIMENSION: u32 = 16_384;
