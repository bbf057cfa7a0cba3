//! Series colours and marker shapes.
//!
//! Colours are the Okabe-Ito palette, chosen to stay distinguishable under the common forms
//! of colour blindness; each series also gets its own marker shape so that charts still read
//! in greyscale print. The order puts the strongest contrasts first and the pale yellow,
//! hard to see on white, last.

use crate::canvas::Color;

/// Marker shapes drawn at a line series' data points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Marker {
    /// No marker.
    None,
    Circle,
    Square,
    Triangle,
    Diamond,
    TriangleDown,
}

/// The series palette (Okabe-Ito), in the order series receive it.
pub const PALETTE: [Color; 8] = [
    Color::hex(0x0072B2), // blue
    Color::hex(0xD55E00), // vermillion
    Color::hex(0x009E73), // bluish green
    Color::hex(0xE69F00), // orange
    Color::hex(0xCC79A7), // reddish purple
    Color::hex(0x56B4E9), // sky blue
    Color::hex(0x000000), // black
    Color::hex(0xC9B800), // yellow, darkened from F0E442 so it shows on white
];

const MARKERS: [Marker; 5] = [Marker::Circle, Marker::Square, Marker::Triangle, Marker::Diamond, Marker::TriangleDown];

/// The colour of the `index`-th series (cycling through [`PALETTE`]).
pub fn series_color(index: usize) -> Color {
    PALETTE[index % PALETTE.len()]
}

/// The marker of the `index`-th series (cycling through the five shapes).
pub fn series_marker(index: usize) -> Marker {
    MARKERS[index % MARKERS.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn palette_colours_are_distinct_and_not_white() {
        for (i, a) in PALETTE.iter().enumerate() {
            assert_ne!(*a, Color::WHITE);
            for b in &PALETTE[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(series_color(0), series_color(PALETTE.len()));
        assert_ne!(series_marker(0), series_marker(1));
        assert_ne!(series_marker(3), Marker::None);
    }
}
