//! The built-in bitmap font: a proportional sans with 9-pixel capitals, designed for this
//! crate so that charts need no system fonts.
//!
//! Each glyph is drawn as ASCII art below (`#` = ink) in a cell 7 pixels wide (8 at most)
//! and [`CELL_HEIGHT`] rows high: rows 0..=8 hold capitals and digits (row 8 sits on the
//! baseline), lowercase letters use rows 3..=8, and descenders reach rows 9..=11. The art is
//! turned into packed `const` byte arrays at compile time, so a malformed glyph fails the
//! build rather than a render. Glyphs are trimmed to their ink and followed by one blank
//! column, which makes text proportional (an `i` is narrower than an `m`); digits keep one
//! common width so that tick labels line up.
//!
//! Printable ASCII (32..=126) is complete; a few symbols common in storage charts (`µ`, `×`,
//! `°`, `±`, `≈`, arrows, dashes) are included, and any other character draws as a hollow
//! box so missing glyphs are visible rather than silently dropped.

/// Height of a glyph cell in pixels at scale 1 (capitals plus descenders).
pub const CELL_HEIGHT: u32 = 12;
/// Height of capitals and digits in pixels at scale 1; their top is row 0 of the cell.
pub const CAP_HEIGHT: u32 = 9;
/// Advance of the space character at scale 1.
const SPACE_ADVANCE: u8 = 4;
/// Width of every digit at scale 1, so numbers are tabular.
const DIGIT_WIDTH: u8 = 6;

/// One glyph: packed rows (bit 7 = leftmost column of the art) and the ink's extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Glyph {
    /// Row bitmaps, top to bottom; bit `0x80 >> column` is set where there is ink.
    pub rows: [u8; CELL_HEIGHT as usize],
    /// First column with ink (the glyph is drawn shifted left by this much).
    pub left: u8,
    /// Number of columns from the first to the last inked column; 0 for blank glyphs.
    pub width: u8,
}

impl Glyph {
    /// Horizontal distance to the next glyph at scale 1: the ink plus one blank column.
    pub const fn advance(&self) -> u8 {
        if self.width == 0 {
            SPACE_ADVANCE
        } else {
            self.width + 1
        }
    }

    /// Whether the pixel at `(column, row)` of the trimmed glyph has ink.
    pub fn ink(&self, column: u32, row: u32) -> bool {
        if column >= self.width as u32 || row >= CELL_HEIGHT {
            return false;
        }
        self.rows[row as usize] & (0x80 >> (column + self.left as u32)) != 0
    }
}

/// Packs one glyph's art, panicking (at compile time, since every caller is `const`) on a
/// character other than `.` and `#`, a row wider than 8 or more than [`CELL_HEIGHT`] rows.
const fn pack(art: &[&str], tabular: bool) -> Glyph {
    if art.len() > CELL_HEIGHT as usize {
        panic!("glyph art has too many rows");
    }
    let mut rows = [0u8; CELL_HEIGHT as usize];
    let mut used: u8 = 0;
    let mut r = 0;
    while r < art.len() {
        let bytes = art[r].as_bytes();
        if bytes.len() > 8 {
            panic!("glyph art row wider than 8 columns");
        }
        let mut c = 0;
        while c < bytes.len() {
            match bytes[c] {
                b'#' => rows[r] |= 0x80 >> c,
                b'.' => {}
                _ => panic!("glyph art may only contain '.' and '#'"),
            }
            c += 1;
        }
        used |= rows[r];
        r += 1;
    }
    if used == 0 {
        return Glyph { rows, left: 0, width: 0 };
    }
    if tabular {
        if used & (0xFF >> DIGIT_WIDTH) != 0 {
            panic!("digit art wider than DIGIT_WIDTH");
        }
        return Glyph { rows, left: 0, width: DIGIT_WIDTH };
    }
    let left = used.leading_zeros() as u8;
    let right = 7 - used.trailing_zeros() as u8;
    Glyph { rows, left, width: right - left + 1 }
}

const fn build_ascii() -> [Glyph; 95] {
    let mut table = [Glyph { rows: [0; CELL_HEIGHT as usize], left: 0, width: 0 }; 95];
    let mut i = 0;
    while i < 95 {
        let ch = i as u8 + 32;
        table[i] = pack(ASCII_ART[i], ch.is_ascii_digit());
        i += 1;
    }
    table
}

const fn build_extra() -> [(char, Glyph); EXTRA_ART.len()] {
    let mut table = [(' ', Glyph { rows: [0; CELL_HEIGHT as usize], left: 0, width: 0 }); EXTRA_ART.len()];
    let mut i = 0;
    while i < EXTRA_ART.len() {
        table[i] = (EXTRA_ART[i].0, pack(EXTRA_ART[i].1, false));
        i += 1;
    }
    table
}

/// Glyphs for ASCII 32..=126, indexed by `code - 32`.
pub static ASCII: [Glyph; 95] = build_ascii();
static EXTRA: [(char, Glyph); EXTRA_ART.len()] = build_extra();
static MISSING: Glyph = pack(&["#####", "#...#", "#...#", "#...#", "#...#", "#...#", "#...#", "#...#", "#####"], false);

/// The glyph for `ch`; characters the font lacks get a hollow box.
pub fn glyph(ch: char) -> &'static Glyph {
    let code = ch as u32;
    if (32..=126).contains(&code) {
        return &ASCII[(code - 32) as usize];
    }
    // Non-breaking space and tab read as spaces.
    if ch == '\u{a0}' || ch == '\t' {
        return &ASCII[0];
    }
    EXTRA.iter().find(|(c, _)| *c == ch).map(|(_, g)| g).unwrap_or(&MISSING)
}

/// Whether the font has a real glyph for `ch` (rather than the missing-glyph box).
pub fn has_glyph(ch: char) -> bool {
    !std::ptr::eq(glyph(ch), &MISSING)
}

/// Width in pixels of `text` drawn at `scale` (no trailing blank column).
pub fn text_width(text: &str, scale: u32) -> u32 {
    let scale = scale.max(1);
    let total: u32 = text.chars().map(|ch| glyph(ch).advance() as u32).sum();
    // The last glyph's trailing blank column is not part of the text's extent; a trailing
    // space still counts in full.
    let trailing = match text.chars().last() {
        Some(ch) if glyph(ch).width > 0 => 1,
        _ => 0,
    };
    (total - trailing) * scale
}

/// `(width, height)` in pixels of `text` drawn at `scale`.
pub fn text_size(text: &str, scale: u32) -> (u32, u32) {
    (text_width(text, scale), CELL_HEIGHT * scale.max(1))
}

/// Art for ASCII 32..=126 in code order. Rows not given are blank.
#[rustfmt::skip]
const ASCII_ART: [&[&str]; 95] = [
    // ' '
    &[],
    // '!'
    &["#", "#", "#", "#", "#", "#", "#", ".", "#"],
    // '"'
    &["#.#", "#.#", "#.#"],
    // '#'
    &[
        ".......",
        ".#..#..",
        ".#..#..",
        "######.",
        ".#..#..",
        ".#..#..",
        "######.",
        ".#..#..",
        ".#..#..",
    ],
    // '$'
    &[
        "..#..",
        ".####",
        "#.#..",
        "#.#..",
        ".###.",
        "..#.#",
        "..#.#",
        "####.",
        "..#..",
    ],
    // '%'
    &[
        ".#....#",
        "#.#..#.",
        ".#...#.",
        "....#..",
        "...#...",
        "..#....",
        ".#...#.",
        ".#..#.#",
        "#....#.",
    ],
    // '&'
    &[
        ".##....",
        "#..#...",
        "#..#...",
        ".##....",
        ".##...#",
        "#..#..#",
        "#...##.",
        "#...##.",
        ".###..#",
    ],
    // '\''
    &["#", "#", "#"],
    // '('
    &["..#", ".#.", "#..", "#..", "#..", "#..", "#..", "#..", "#..", ".#.", "..#"],
    // ')'
    &["#..", ".#.", "..#", "..#", "..#", "..#", "..#", "..#", "..#", ".#.", "#.."],
    // '*'
    &[".....", ".....", "..#..", "#.#.#", ".###.", "#.#.#", "..#.."],
    // '+'
    &[".....", ".....", "..#..", "..#..", "#####", "..#..", "..#.."],
    // ','
    &["..", "..", "..", "..", "..", "..", "..", "##", "##", ".#", "#."],
    // '-'
    &["....", "....", "....", "....", "####"],
    // '.'
    &["..", "..", "..", "..", "..", "..", "..", "##", "##"],
    // '/'
    &["....#", "....#", "...#.", "...#.", "..#..", ".#...", ".#...", "#....", "#...."],
    // '0'
    &[
        ".####.",
        "#....#",
        "#....#",
        "#...##",
        "#..#.#",
        "##...#",
        "#....#",
        "#....#",
        ".####.",
    ],
    // '1'
    &[
        "..#...",
        ".##...",
        "#.#...",
        "..#...",
        "..#...",
        "..#...",
        "..#...",
        "..#...",
        "#####.",
    ],
    // '2'
    &[
        ".####.",
        "#....#",
        ".....#",
        ".....#",
        "....#.",
        "...#..",
        "..#...",
        ".#....",
        "######",
    ],
    // '3'
    &[
        ".####.",
        "#....#",
        ".....#",
        ".....#",
        "..###.",
        ".....#",
        ".....#",
        "#....#",
        ".####.",
    ],
    // '4'
    &[
        "....#.",
        "...##.",
        "..#.#.",
        ".#..#.",
        "#...#.",
        "######",
        "....#.",
        "....#.",
        "....#.",
    ],
    // '5'
    &[
        "######",
        "#.....",
        "#.....",
        "#####.",
        ".....#",
        ".....#",
        ".....#",
        "#....#",
        ".####.",
    ],
    // '6'
    &[
        "..###.",
        ".#....",
        "#.....",
        "#.....",
        "#####.",
        "#....#",
        "#....#",
        "#....#",
        ".####.",
    ],
    // '7'
    &[
        "######",
        ".....#",
        ".....#",
        "....#.",
        "....#.",
        "...#..",
        "...#..",
        "..#...",
        "..#...",
    ],
    // '8'
    &[
        ".####.",
        "#....#",
        "#....#",
        "#....#",
        ".####.",
        "#....#",
        "#....#",
        "#....#",
        ".####.",
    ],
    // '9'
    &[
        ".####.",
        "#....#",
        "#....#",
        "#....#",
        ".#####",
        ".....#",
        ".....#",
        "....#.",
        ".###..",
    ],
    // ':'
    &["..", "..", "..", "##", "##", "..", "..", "##", "##"],
    // ';'
    &["..", "..", "..", "##", "##", "..", "..", "##", "##", ".#", "#."],
    // '<'
    &["....", "...#", "..#.", ".#..", "#...", ".#..", "..#.", "...#"],
    // '='
    &[".....", ".....", ".....", "#####", ".....", "#####"],
    // '>'
    &["....", "#...", ".#..", "..#.", "...#", "..#.", ".#..", "#..."],
    // '?'
    &[
        ".####.",
        "#....#",
        ".....#",
        "....#.",
        "...#..",
        "..#...",
        "..#...",
        "......",
        "..#...",
    ],
    // '@'
    &[
        "..####.",
        ".#....#",
        "#..##.#",
        "#.#.#.#",
        "#.#.#.#",
        "#.#.#.#",
        "#..####",
        ".#.....",
        "..####.",
    ],
    // 'A'
    &[
        "..##..",
        ".#..#.",
        "#....#",
        "#....#",
        "#....#",
        "######",
        "#....#",
        "#....#",
        "#....#",
    ],
    // 'B'
    &[
        "#####.",
        "#....#",
        "#....#",
        "#....#",
        "#####.",
        "#....#",
        "#....#",
        "#....#",
        "#####.",
    ],
    // 'C'
    &[
        ".####.",
        "#....#",
        "#.....",
        "#.....",
        "#.....",
        "#.....",
        "#.....",
        "#....#",
        ".####.",
    ],
    // 'D'
    &[
        "####..",
        "#...#.",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#...#.",
        "####..",
    ],
    // 'E'
    &[
        "######",
        "#.....",
        "#.....",
        "#.....",
        "#####.",
        "#.....",
        "#.....",
        "#.....",
        "######",
    ],
    // 'F'
    &[
        "######",
        "#.....",
        "#.....",
        "#.....",
        "#####.",
        "#.....",
        "#.....",
        "#.....",
        "#.....",
    ],
    // 'G'
    &[
        ".####.",
        "#....#",
        "#.....",
        "#.....",
        "#..###",
        "#....#",
        "#....#",
        "#....#",
        ".####.",
    ],
    // 'H'
    &[
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "######",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
    ],
    // 'I'
    &["###", ".#.", ".#.", ".#.", ".#.", ".#.", ".#.", ".#.", "###"],
    // 'J'
    &[
        "...###",
        "....#.",
        "....#.",
        "....#.",
        "....#.",
        "....#.",
        "#...#.",
        "#...#.",
        ".###..",
    ],
    // 'K'
    &[
        "#....#",
        "#...#.",
        "#..#..",
        "#.#...",
        "##....",
        "#.#...",
        "#..#..",
        "#...#.",
        "#....#",
    ],
    // 'L'
    &[
        "#.....",
        "#.....",
        "#.....",
        "#.....",
        "#.....",
        "#.....",
        "#.....",
        "#.....",
        "######",
    ],
    // 'M'
    &[
        "#.....#",
        "##...##",
        "#.#.#.#",
        "#..#..#",
        "#.....#",
        "#.....#",
        "#.....#",
        "#.....#",
        "#.....#",
    ],
    // 'N'
    &[
        "#....#",
        "##...#",
        "##...#",
        "#.#..#",
        "#.#..#",
        "#..#.#",
        "#...##",
        "#...##",
        "#....#",
    ],
    // 'O'
    &[
        "..###..",
        ".#...#.",
        "#.....#",
        "#.....#",
        "#.....#",
        "#.....#",
        "#.....#",
        ".#...#.",
        "..###..",
    ],
    // 'P'
    &[
        "#####.",
        "#....#",
        "#....#",
        "#....#",
        "#####.",
        "#.....",
        "#.....",
        "#.....",
        "#.....",
    ],
    // 'Q'
    &[
        "..###..",
        ".#...#.",
        "#.....#",
        "#.....#",
        "#.....#",
        "#.....#",
        "#...#.#",
        ".#...#.",
        "..###.#",
    ],
    // 'R'
    &[
        "#####.",
        "#....#",
        "#....#",
        "#....#",
        "#####.",
        "#..#..",
        "#...#.",
        "#....#",
        "#....#",
    ],
    // 'S'
    &[
        ".####.",
        "#....#",
        "#.....",
        "#.....",
        ".####.",
        ".....#",
        ".....#",
        "#....#",
        ".####.",
    ],
    // 'T'
    &[
        "#######",
        "...#...",
        "...#...",
        "...#...",
        "...#...",
        "...#...",
        "...#...",
        "...#...",
        "...#...",
    ],
    // 'U'
    &[
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        ".####.",
    ],
    // 'V'
    &[
        "#.....#",
        "#.....#",
        "#.....#",
        ".#...#.",
        ".#...#.",
        ".#...#.",
        "..#.#..",
        "..#.#..",
        "...#...",
    ],
    // 'W'
    &[
        "#.....#",
        "#.....#",
        "#.....#",
        "#.....#",
        "#..#..#",
        "#..#..#",
        "#.#.#.#",
        "##...##",
        "#.....#",
    ],
    // 'X'
    &[
        "#....#",
        "#....#",
        ".#..#.",
        ".#..#.",
        "..##..",
        ".#..#.",
        ".#..#.",
        "#....#",
        "#....#",
    ],
    // 'Y'
    &[
        "#.....#",
        "#.....#",
        ".#...#.",
        "..#.#..",
        "...#...",
        "...#...",
        "...#...",
        "...#...",
        "...#...",
    ],
    // 'Z'
    &[
        "######",
        ".....#",
        "....#.",
        "....#.",
        "...#..",
        "..#...",
        "..#...",
        ".#....",
        "######",
    ],
    // '['
    &["###", "#..", "#..", "#..", "#..", "#..", "#..", "#..", "#..", "#..", "###"],
    // '\\'
    &["#....", "#....", ".#...", ".#...", "..#..", "...#.", "...#.", "....#", "....#"],
    // ']'
    &["###", "..#", "..#", "..#", "..#", "..#", "..#", "..#", "..#", "..#", "###"],
    // '^'
    &["..#..", ".#.#.", "#...#"],
    // '_'
    &["", "", "", "", "", "", "", "", "", "", "######"],
    // '`'
    &["#.", ".#"],
    // 'a'
    &[
        "",
        "",
        "",
        ".####.",
        ".....#",
        ".#####",
        "#....#",
        "#....#",
        ".#####",
    ],
    // 'b'
    &[
        "#.....",
        "#.....",
        "#.....",
        "#####.",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#####.",
    ],
    // 'c'
    &[
        "",
        "",
        "",
        ".####.",
        "#....#",
        "#.....",
        "#.....",
        "#....#",
        ".####.",
    ],
    // 'd'
    &[
        ".....#",
        ".....#",
        ".....#",
        ".#####",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        ".#####",
    ],
    // 'e'
    &[
        "",
        "",
        "",
        ".####.",
        "#....#",
        "######",
        "#.....",
        "#....#",
        ".####.",
    ],
    // 'f'
    &["..###", ".#...", ".#...", "####.", ".#...", ".#...", ".#...", ".#...", ".#..."],
    // 'g'
    &[
        "",
        "",
        "",
        ".#####",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        ".#####",
        ".....#",
        "#....#",
        ".####.",
    ],
    // 'h'
    &[
        "#.....",
        "#.....",
        "#.....",
        "#####.",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
    ],
    // 'i'
    &["", ".#.", "", "##.", ".#.", ".#.", ".#.", ".#.", "###"],
    // 'j'
    &["", "...#", "", "..##", "...#", "...#", "...#", "...#", "...#", "...#", "#..#", ".##."],
    // 'k'
    &[
        "#....",
        "#....",
        "#....",
        "#...#",
        "#..#.",
        "###..",
        "#.#..",
        "#..#.",
        "#...#",
    ],
    // 'l'
    &["##.", ".#.", ".#.", ".#.", ".#.", ".#.", ".#.", ".#.", "###"],
    // 'm'
    &[
        "",
        "",
        "",
        "###.##.",
        "#..#..#",
        "#..#..#",
        "#..#..#",
        "#..#..#",
        "#..#..#",
    ],
    // 'n'
    &[
        "",
        "",
        "",
        "#####.",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
    ],
    // 'o'
    &[
        "",
        "",
        "",
        ".####.",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        ".####.",
    ],
    // 'p'
    &[
        "",
        "",
        "",
        "#####.",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#####.",
        "#.....",
        "#.....",
        "#.....",
    ],
    // 'q'
    &[
        "",
        "",
        "",
        ".#####",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        ".#####",
        ".....#",
        ".....#",
        ".....#",
    ],
    // 'r'
    &["", "", "", "#.###", "##...", "#....", "#....", "#....", "#...."],
    // 's'
    &[
        "",
        "",
        "",
        ".#####",
        "#.....",
        ".####.",
        ".....#",
        ".....#",
        "#####.",
    ],
    // 't'
    &["", ".#..", ".#..", "####", ".#..", ".#..", ".#..", ".#..", "..##"],
    // 'u'
    &[
        "",
        "",
        "",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        ".#####",
    ],
    // 'v'
    &[
        "",
        "",
        "",
        "#.....#",
        "#.....#",
        ".#...#.",
        ".#...#.",
        "..#.#..",
        "...#...",
    ],
    // 'w'
    &[
        "",
        "",
        "",
        "#.....#",
        "#.....#",
        "#..#..#",
        "#..#..#",
        "#.#.#.#",
        ".#...#.",
    ],
    // 'x'
    &[
        "",
        "",
        "",
        "#....#",
        ".#..#.",
        "..##..",
        "..##..",
        ".#..#.",
        "#....#",
    ],
    // 'y'
    &[
        "",
        "",
        "",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        "#....#",
        ".#####",
        ".....#",
        "#....#",
        ".####.",
    ],
    // 'z'
    &[
        "",
        "",
        "",
        "######",
        "....#.",
        "...#..",
        "..#...",
        ".#....",
        "######",
    ],
    // '{'
    &["..##", ".#..", ".#..", ".#..", ".#..", "#...", ".#..", ".#..", ".#..", ".#..", "..##"],
    // '|'
    &["#", "#", "#", "#", "#", "#", "#", "#", "#", "#", "#"],
    // '}'
    &["##..", "..#.", "..#.", "..#.", "..#.", "...#", "..#.", "..#.", "..#.", "..#.", "##.."],
    // '~'
    &["", "", "", ".##..#", "#..##."],
];

const MICRO: &[&str] =
    &["", "", "", "#....#", "#....#", "#....#", "#....#", "##..##", "#.##.#", "#.....", "#.....", "#....."];

/// Non-ASCII symbols that storage and performance charts commonly use.
#[rustfmt::skip]
const EXTRA_ART: [(char, &[&str]); 13] = [
    // Micro sign and Greek mu look the same: "µs".
    ('\u{b5}', MICRO),
    ('\u{3bc}', MICRO),
    // Multiplication sign.
    ('\u{d7}', &["", "", "", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"]),
    // Degree sign.
    ('\u{b0}', &[".##.", "#..#", "#..#", ".##."]),
    // Plus-minus sign.
    ('\u{b1}', &["", "", "..#..", "..#..", "#####", "..#..", "..#..", ".....", "#####"]),
    // Almost equal to.
    ('\u{2248}', &["", "", ".##..#", "#..##.", "", ".##..#", "#..##."]),
    // En dash and em dash.
    ('\u{2013}', &["", "", "", "", "######"]),
    ('\u{2014}', &["", "", "", "", "########"]),
    // Rightwards and leftwards arrows.
    ('\u{2192}', &["", "", "....#..", ".....#.", "#######", ".....#.", "....#.."]),
    ('\u{2190}', &["", "", "..#....", ".#.....", "#######", ".#.....", "..#...."]),
    // Horizontal ellipsis.
    ('\u{2026}', &["", "", "", "", "", "", "", "", "#.#.#"]),
    // Less-than-or-equal and greater-than-or-equal.
    ('\u{2264}', &["", "...#", "..#.", ".#..", "#...", ".#..", "..#.", "...#", "", "####"]),
    ('\u{2265}', &["", "#...", ".#..", "..#.", "...#", "..#.", ".#..", "#...", "", "####"]),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_printable_ascii_character_has_a_glyph() {
        for code in 32u8..=126 {
            let ch = code as char;
            assert!(has_glyph(ch), "no glyph for {ch:?}");
            if ch != ' ' {
                assert!(glyph(ch).width > 0, "glyph for {ch:?} is blank");
                assert!(glyph(ch).rows.iter().any(|&r| r != 0), "glyph for {ch:?} has no ink");
            }
        }
        assert!(!has_glyph('\u{4e2d}'));
        assert!(has_glyph('µ'));
    }

    #[test]
    fn digits_are_tabular_and_letters_proportional() {
        let w = text_width("0", 1);
        for d in '0'..='9' {
            assert_eq!(text_width(&d.to_string(), 1), w, "digit {d} width");
        }
        assert!(text_width("i", 1) < text_width("m", 1));
        assert_eq!(text_width("", 1), 0);
        assert_eq!(text_width("00", 2), 2 * text_width("00", 1));
    }

    #[test]
    fn uppercase_letters_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for ch in ('A'..='Z').chain('a'..='z').chain('0'..='9') {
            assert!(seen.insert(glyph(ch).rows), "{ch:?} duplicates another glyph");
        }
    }
}
