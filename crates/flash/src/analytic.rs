//! Closed-form write amplification of cleaning under uniform random overwrites
//! (P. Desnoyers, "Analytic Models of SSD Write Performance", ACM TOS 10(2), 2014).
//!
//! Notation: `T` physical pages in play, `U` live (user) pages, `α = T / U`, `Np` pages
//! per erase block (superblock). Write amplification `A` = pages programmed per host page.
//!
//! **FIFO cleaning** (Desnoyers §4; also the limit of greedy as `Np → ∞`). While the log
//! goes once round the device, `T` pages are written, of which the fraction `1 - x` are
//! host pages (the victim's remaining valid fraction `x` is copied). Each host write kills
//! a given page with probability `1/U`, so a page survives a round with probability
//! `x = e^(-α(1-x))`. Writing `x = -W/α` turns this into `W e^W = -α e^(-α)`; the root
//! other than `W = -α` is the principal branch, and `A = 1/(1-x) = α / (α + W₀(-α e^(-α)))`.
//!
//! **Greedy cleaning with finite `Np`** (Desnoyers §5). Under uniform traffic each valid
//! page of a block dies at rate `1/U` per host write, so a block holding `k` valid pages
//! stays in that state for `U/k` host writes on average. In steady state greedy cleans a
//! block when it reaches the lowest occupied state `X`; each cleaning frees `Np - X`
//! pages, so blocks are cleaned at `1/(Np - X)` per host write and `A = Np / (Np - X)`.
//! Little's law over the `T / Np` blocks then gives
//!
//! ```text
//!     T/Np = (1/(Np - X)) · Σ_{k=X+1..Np} U/k     ⇔     α = A · (H(Np) - H(X))
//! ```
//!
//! with `H` the harmonic numbers, continued to real `X` by `H(x) = ψ(x + 1) + γ`. As
//! `Np → ∞`, `H(Np) - H(X) → -ln(X/Np)` and the equation becomes the FIFO one above:
//! greedy only gains over FIFO through the spread of valid counts that small blocks have.
//! When `α >= H(Np)` greedy always finds an empty block and `A = 1`.

/// Principal branch `W₀` of the Lambert W function: the `w >= -1` with `w e^w = x`,
/// for `x >= -1/e`. Halley's iteration from a branch-point series (near `-1/e`) or a
/// logarithmic guess; converges to a few ulps.
pub fn lambert_w0(x: f64) -> f64 {
    let branch_point = -(-1.0f64).exp();
    assert!(x >= branch_point - 1e-15, "lambert_w0({x}): defined only for x >= -1/e");
    if x == 0.0 {
        return 0.0;
    }
    if x <= branch_point {
        return -1.0;
    }
    let mut w = if x < -0.25 {
        // Series in p = sqrt(2(e x + 1)) around the branch point.
        let p = (2.0 * (std::f64::consts::E * x + 1.0)).sqrt();
        -1.0 + p - p * p / 3.0 + 11.0 / 72.0 * p * p * p
    } else if x < 3.0 {
        x.ln_1p() * 0.75
    } else {
        let l = x.ln();
        l - l.ln()
    };
    for _ in 0..64 {
        let e = w.exp();
        let f = w * e - x;
        let derivative = e * (w + 1.0);
        if derivative == 0.0 {
            break;
        }
        let step = f / (derivative - (w + 2.0) * f / (2.0 * w + 2.0));
        w -= step;
        if step.abs() <= 4.0 * f64::EPSILON * (1.0 + w.abs()) {
            break;
        }
    }
    w
}

/// FIFO cleaning (and greedy as `Np → ∞`): `A = α / (α + W₀(-α e^(-α)))`.
pub fn fifo_waf(alpha: f64) -> f64 {
    assert!(alpha > 1.0, "fifo_waf: α = physical / live = {alpha} must exceed 1");
    alpha / (alpha + lambert_w0(-alpha * (-alpha).exp()))
}

/// Valid fraction of the block FIFO cleans: `x = e^(-α(1-x))`, so `A = 1/(1-x)`.
pub fn fifo_victim_valid_fraction(alpha: f64) -> f64 {
    1.0 - 1.0 / fifo_waf(alpha)
}

/// Digamma function ψ(x) for x > 0: recurrence up to x >= 8, then the asymptotic series.
pub fn digamma(mut x: f64) -> f64 {
    assert!(x > 0.0, "digamma({x}): only positive arguments are needed here");
    let mut result = 0.0;
    while x < 8.0 {
        result -= 1.0 / x;
        x += 1.0;
    }
    let inv = 1.0 / x;
    let inv2 = inv * inv;
    let series =
        inv2 * (1.0 / 12.0 - inv2 * (1.0 / 120.0 - inv2 * (1.0 / 252.0 - inv2 * (1.0 / 240.0 - inv2 / 132.0))));
    result + x.ln() - 0.5 * inv - series
}

/// Harmonic number `H(x) = Σ_{k=1..x} 1/k`, continued to real `x >= 0` by `ψ(x+1) + γ`.
pub fn harmonic(x: f64) -> f64 {
    const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;
    digamma(x + 1.0) + EULER_GAMMA
}

/// Greedy cleaning, `Np` pages per block: the valid pages `X` of the victim, solving
/// `α = Np/(Np - X) · (H(Np) - H(X))` (0 when even `X = 0` leaves spare over).
pub fn greedy_victim_valid_pages(alpha: f64, pages_per_block: u32) -> f64 {
    assert!(alpha > 1.0, "greedy: α = physical / live = {alpha} must exceed 1");
    assert!(pages_per_block >= 1, "greedy: a block holds at least one page");
    let np = pages_per_block as f64;
    let h_np = harmonic(np);
    let alpha_of = |x: f64| np / (np - x) * (h_np - harmonic(x));
    if alpha >= alpha_of(0.0) {
        return 0.0;
    }
    // alpha_of falls from H(Np) at X = 0 towards 1 as X → Np: bisect.
    let (mut low, mut high) = (0.0, np);
    for _ in 0..200 {
        let mid = 0.5 * (low + high);
        if alpha_of(mid) > alpha {
            low = mid;
        } else {
            high = mid;
        }
    }
    0.5 * (low + high)
}

/// Greedy cleaning write amplification with `Np` pages per block: `Np / (Np - X)`.
pub fn greedy_waf(alpha: f64, pages_per_block: u32) -> f64 {
    let np = pages_per_block as f64;
    np / (np - greedy_victim_valid_pages(alpha, pages_per_block))
}

/// `α = physical / live` from utilization `u = live / physical`.
pub fn alpha_from_utilization(utilization: f64) -> f64 {
    assert!(utilization > 0.0 && utilization < 1.0, "utilization {utilization} must be in (0, 1)");
    1.0 / utilization
}
