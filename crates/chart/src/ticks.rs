//! "Nice" axis ticks: steps of 1, 2 or 5 times a power of ten that cover the data range.

/// Tick positions for one axis. `min` and `max` are the axis range (the first and last
/// tick), `step` the distance between ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct Ticks {
    pub min: f64,
    pub max: f64,
    pub step: f64,
    pub values: Vec<f64>,
}

/// Values beyond this magnitude are clamped so that spans and steps stay finite.
const LIMIT: f64 = 1e300;

/// A step of `mantissa * 10^exponent`, kept apart so tick values can be computed exactly.
#[derive(Debug, Clone, Copy)]
struct Step {
    mantissa: f64,
    exponent: i32,
}

impl Step {
    fn value(self) -> f64 {
        scale10(self.mantissa, self.exponent)
    }

    /// `k` steps, computed as `(k * mantissa) * 10^e` (or `/ 10^-e`), so that e.g. the third
    /// tick of step 0.1 is exactly 0.3 rather than 0.30000000000000004.
    fn times(self, k: f64) -> f64 {
        let v = scale10(k * self.mantissa, self.exponent);
        // Avoid "-0" labels.
        if v == 0.0 {
            0.0
        } else {
            v
        }
    }

    /// The next larger nice step in the family.
    fn next(self, family: &[f64]) -> Step {
        match family.iter().position(|&m| m == self.mantissa) {
            Some(i) if i + 1 < family.len() => Step { mantissa: family[i + 1], exponent: self.exponent },
            _ => Step { mantissa: family[0], exponent: self.exponent + 1 },
        }
    }
}

fn scale10(x: f64, exponent: i32) -> f64 {
    if exponent >= 0 {
        x * 10f64.powi(exponent)
    } else {
        x / 10f64.powi(-exponent)
    }
}

const FAMILY: [f64; 3] = [1.0, 2.0, 5.0];
/// Used where the interval count is fixed (the right axis aligned to the left one); 2.5
/// lets the range fit the data more tightly.
const ALIGNED_FAMILY: [f64; 4] = [1.0, 2.0, 2.5, 5.0];

/// The smallest step of `family` that is at least `raw`.
fn nice_step(raw: f64, family: &[f64]) -> Step {
    let exponent = raw.log10().floor() as i32;
    let mut step = Step { mantissa: family[0], exponent };
    // At most a handful of iterations: from 1*10^e up to 10*10^e.
    for _ in 0..10 {
        if step.value() >= raw * (1.0 - 1e-12) {
            break;
        }
        step = step.next(family);
    }
    step
}

/// Replaces non-finite bounds, orders them, clamps huge magnitudes and widens an empty or
/// vanishingly small range so that a step can be computed.
fn sanitize(lo: f64, hi: f64) -> (f64, f64) {
    let (mut lo, mut hi) = match (lo.is_finite(), hi.is_finite()) {
        (true, true) => (lo.min(hi), lo.max(hi)),
        (true, false) => (lo, lo),
        (false, true) => (hi, hi),
        (false, false) => (0.0, 1.0),
    };
    lo = lo.clamp(-LIMIT, LIMIT);
    hi = hi.clamp(-LIMIT, LIMIT);
    let magnitude = lo.abs().max(hi.abs());
    if hi - lo <= magnitude * 1e-12 || hi - lo < 1e-200 {
        // A single value: centre it in a range half its magnitude each way (or 0..1 for 0).
        let c = (lo + hi) / 2.0;
        if c.abs() < 1e-200 {
            return (0.0, 1.0);
        }
        let pad = c.abs() * 0.5;
        return (c - pad, c + pad);
    }
    (lo, hi)
}

fn build(lo: f64, hi: f64, step: Step, count_hint: Option<usize>) -> Ticks {
    let s = step.value();
    let first = (lo / s + 1e-9).floor();
    let last = match count_hint {
        Some(n) => first + n as f64,
        None => (hi / s - 1e-9).ceil().max(first + 1.0),
    };
    let n = ((last - first).round() as usize).min(10_000);
    let values: Vec<f64> = (0..=n).map(|i| step.times(first + i as f64)).collect();
    Ticks { min: values[0], max: values[n], step: s, values }
}

/// Nice ticks covering `[lo, hi]` with about `target` intervals (at least 1).
///
/// The step is 1, 2 or 5 times a power of ten; the first tick is at or below `lo` and the
/// last at or above `hi`. Non-finite input, reversed bounds, a single value and huge
/// magnitudes are all handled (see the tests); the result always has at least two ticks.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Ticks {
    let (lo, hi) = sanitize(lo, hi);
    let target = target.clamp(1, 100) as f64;
    let step = nice_step((hi - lo) / target, &FAMILY);
    build(lo, hi, step, None)
}

/// Ticks covering `[lo, hi]` with exactly `intervals` intervals, so that a second axis' ticks
/// line up with the first axis' grid. The range may be wider than the data needs.
pub(crate) fn aligned_ticks(lo: f64, hi: f64, intervals: usize) -> Ticks {
    let (lo, hi) = sanitize(lo, hi);
    let intervals = intervals.clamp(1, 100);
    let mut step = nice_step((hi - lo) / intervals as f64, &ALIGNED_FAMILY);
    for _ in 0..40 {
        let first = (lo / step.value() + 1e-9).floor();
        if step.times(first + intervals as f64) >= hi * (1.0 - 1e-12) - 1e-300 {
            break;
        }
        step = step.next(&ALIGNED_FAMILY);
    }
    build(lo, hi, step, Some(intervals))
}

/// Formats a tick value for a scale whose ticks are `step` apart: just enough decimals to
/// tell neighbouring ticks apart, and scientific notation for very large or small numbers.
pub fn format_tick(value: f64, step: f64) -> String {
    if !value.is_finite() {
        return String::new();
    }
    let step = if step.is_finite() && step > 0.0 { step } else { value.abs().max(1.0) };
    let value = if value.abs() < step * 1e-9 { 0.0 } else { value };
    let magnitude = value.abs().max(step);
    if magnitude >= 1e7 || step < 1e-4 {
        if value == 0.0 {
            return "0".to_string();
        }
        // Mantissa digits: enough to resolve one step at this value's exponent.
        let digits = (value.abs().log10().floor() - step.log10().floor()).clamp(0.0, 6.0) as usize;
        let s = format!("{value:.digits$e}");
        return trim_mantissa(&s);
    }
    let decimals = decimals_for(step);
    format!("{value:.decimals$}")
}

/// Decimals needed to print multiples of `step` exactly (steps like 0.25 need two).
fn decimals_for(step: f64) -> usize {
    let mut decimals = 0usize;
    let mut scaled = step;
    while decimals < 12 && (scaled - scaled.round()).abs() > 1e-9 * scaled.abs().max(1.0) {
        decimals += 1;
        scaled *= 10.0;
    }
    decimals
}

/// "2.50e9" -> "2.5e9": trailing zeros of a scientific mantissa carry no information here.
fn trim_mantissa(s: &str) -> String {
    match s.split_once('e') {
        Some((mantissa, exponent)) if mantissa.contains('.') => {
            let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
            format!("{mantissa}e{exponent}")
        }
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_nice(step: f64) -> bool {
        let exponent = step.log10().floor();
        let mantissa = step / 10f64.powf(exponent);
        [1.0, 2.0, 5.0, 10.0].iter().any(|m| (mantissa - m).abs() < 1e-9)
    }

    #[test]
    fn ticks_are_nice_and_cover_the_range() {
        let cases = [(0.0, 1.0), (10.0, 90.0), (0.0, 483.0), (-3.7, 12.2), (0.013, 0.021), (1.0, 1e6), (-5e9, -1e9)];
        for (lo, hi) in cases {
            let t = nice_ticks(lo, hi, 5);
            assert!(t.min <= lo && t.max >= hi, "{t:?} does not cover {lo}..{hi}");
            assert!(is_nice(t.step), "step {} is not 1-2-5", t.step);
            assert!(t.values.len() >= 2 && t.values.len() <= 12, "{t:?}");
            for w in t.values.windows(2) {
                assert!((w[1] - w[0] - t.step).abs() <= t.step * 1e-9, "{t:?}");
            }
            for v in &t.values {
                assert!((v / t.step - (v / t.step).round()).abs() < 1e-6, "{v} not a multiple of {}", t.step);
            }
        }
    }

    #[test]
    fn known_examples() {
        assert_eq!(nice_ticks(0.0, 483.0, 5).values, vec![0.0, 100.0, 200.0, 300.0, 400.0, 500.0]);
        assert_eq!(nice_ticks(10.0, 90.0, 8).values, vec![10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0]);
        assert_eq!(nice_ticks(0.0, 1.0, 5).values, vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        let t = nice_ticks(0.0, 0.3, 3);
        assert_eq!(t.values, vec![0.0, 0.1, 0.2, 0.3]);
    }

    #[test]
    fn degenerate_inputs_give_usable_ticks() {
        for (lo, hi) in [
            (5.0, 5.0),
            (0.0, 0.0),
            (f64::NAN, 3.0),
            (f64::NAN, f64::NAN),
            (f64::NEG_INFINITY, f64::INFINITY),
            (7.0, -2.0),
            (-1e308, 1e308),
            (1e-320, 1e-320),
        ] {
            let t = nice_ticks(lo, hi, 5);
            assert!(t.values.len() >= 2, "{lo}..{hi}: {t:?}");
            assert!(t.step.is_finite() && t.step > 0.0, "{lo}..{hi}: {t:?}");
            assert!(t.values.iter().all(|v| v.is_finite()));
            assert!(t.min < t.max);
        }
        let t = nice_ticks(5.0, 5.0, 5);
        assert!(t.min <= 5.0 && t.max >= 5.0 && t.min < 5.0);
        let t = nice_ticks(7.0, -2.0, 5);
        assert!(t.min <= -2.0 && t.max >= 7.0);
    }

    #[test]
    fn aligned_ticks_have_the_requested_interval_count() {
        for (lo, hi, n) in [(0.0, 4.2, 5), (1.0, 1.3, 4), (0.0, 0.0, 6), (0.0, 1000.0, 3), (-2.0, 9.0, 7)] {
            let t = aligned_ticks(lo, hi, n);
            assert_eq!(t.values.len(), n + 1, "{lo}..{hi}/{n}: {t:?}");
            assert!(t.min <= lo.min(hi) + 1e-12 && t.max >= hi.max(lo) - 1e-12, "{lo}..{hi}/{n}: {t:?}");
        }
        assert_eq!(aligned_ticks(0.0, 4.2, 5).values, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn formatting() {
        assert_eq!(format_tick(300.0, 100.0), "300");
        assert_eq!(format_tick(0.30000000000000004, 0.1), "0.3");
        assert_eq!(format_tick(0.25, 0.25), "0.25");
        assert_eq!(format_tick(-1e-17, 0.2), "0.0");
        assert_eq!(format_tick(2.5e9, 5e8), "2.5e9");
        assert_eq!(format_tick(3e9, 1e9), "3e9");
        assert_eq!(format_tick(0.00002, 0.00001), "2e-5");
        assert_eq!(format_tick(1_000_000.0, 200_000.0), "1000000");
        assert_eq!(format_tick(f64::NAN, 1.0), "");
    }
}
