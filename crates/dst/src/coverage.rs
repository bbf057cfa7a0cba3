//! Coverage of a multi-seed run: how many seeds reached each engine path and each stage
//! a fault was injected at, how many swap-ins each verified, and the floors a run must
//! meet (`coverage-floors.json` beside this crate's manifest, checked by CI). The pager
//! DST's run coverage is figures too (`pager::PagerCoverage::figures`), checked by the
//! same floors against `pager-coverage-floors.json`.
//!
//! A seed that passes proves little if it never reached the code in question: these
//! figures say whether the seeds did, and the floors turn a drop (a scenario change
//! that stops filling the device, a fault no longer reaching the GC) into a failure.

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::DstReport;

/// One figure of a run's coverage.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Stable name: the JSON key and the floors file's key.
    pub name: &'static str,
    /// What it counts, for the table (indented when it is a part of the row above).
    pub what: &'static str,
    pub value: Value,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// Share of the seeds (0..=1) where something happened at least once; `seeds` of
    /// `of`.
    SeedShare { seeds: u64, of: u64 },
    /// A count or a per-seed statistic.
    Count(u64),
}

impl Value {
    /// The number floors compare against.
    pub fn number(self) -> f64 {
        match self {
            Value::SeedShare { of: 0, .. } => 0.0,
            Value::SeedShare { seeds, of } => seeds as f64 / of as f64,
            Value::Count(count) => count as f64,
        }
    }
}

/// The coverage figures of a set of seed reports, in table order. Serializes as one
/// JSON object, figure name to value (shares as fractions).
#[derive(Clone, Debug, PartialEq)]
pub struct Coverage {
    pub figures: Vec<Figure>,
}

/// A (name, description, did it happen in this seed) test per share figure.
type SeedTest = (&'static str, &'static str, fn(&DstReport) -> bool);

const SEED_TESTS: &[SeedTest] = &[
    ("seeds_with_gc_share", "seeds whose GC collected a victim", |r| r.stats.gc_runs > 0),
    ("seeds_with_pages_moved_share", "seeds whose GC moved a page", |r| r.stats.pages_moved > 0),
    ("seeds_with_race_skipped_share", "seeds where a GC move lost a race (page swapped in, freed, dirtied)", |r| {
        r.stats.pages_skipped_race > 0
    }),
    ("seeds_with_swap_cache_dropped_share", "seeds whose GC dropped a swap-cached slot", |r| {
        r.stats.swap_cache_dropped > 0
    }),
    ("seeds_with_records_rejected_share", "seeds where a record (footer, metadata) was rejected", |r| {
        r.stats.records_rejected > 0
    }),
    ("seeds_with_zones_offline_share", "seeds with a zone offline or retired", |r| r.stats.zones_offline > 0),
    ("seeds_with_idle_zone_finished_share", "seeds that finished a swap-zone's idle open zone", |r| {
        r.stats.zones_retired_idle > 0
    }),
    (
        "seeds_with_tenant_zone_finished_share",
        "seeds that finished a tenant's zone for a new tenant at its index",
        |r| r.stats.zones_retired_tenant > 0,
    ),
    (
        "seeds_with_gc_stream_fallback_share",
        "seeds where a GC stream sent pages to a lower one for want of a zone",
        |r| r.stats.gc_stream_fallbacks > 0,
    ),
    ("seeds_with_pages_lost_share", "seeds that lost pages to an offline zone", |r| r.stats.pages_lost > 0),
    ("seeds_with_backpressure_share", "seeds where a swap-out met backpressure", |r| r.stats.backpressure > 0),
    ("seeds_with_gc_stall_share", "seeds whose GC progress guard stopped a run", |r| r.stats.gc_stalls > 0),
    ("seeds_with_gc_idle_while_full_share", "seeds whose swap stayed full, GC idle, under half valid", |r| {
        r.ops_gc_idle_while_full > 0
    }),
    ("seeds_with_no_empty_zone_share", "seeds that used up the GC's reserve (no empty zone)", |r| {
        r.ops_without_empty_zone > 0
    }),
    ("seeds_with_aborted_dirty_share", "seeds where a page dirtied during its append aborted it", |r| {
        r.stats.swap_outs_aborted_dirty > 0
    }),
    ("seeds_with_owner_reused_share", "seeds that released an owner and registered its id again", |r| {
        r.owners_reused > 0
    }),
    ("seeds_with_reordered_share", "seeds whose completions came out of order", |r| r.completions_reordered > 0),
    ("seeds_with_fault_swap_out_append_share", "seeds with a fault on a swap-out append", |r| {
        r.faults.swap_out_append > 0
    }),
    ("seeds_with_fault_swap_in_read_share", "seeds with a fault on a swap-in read", |r| r.faults.swap_in_read > 0),
    ("seeds_with_fault_gc_data_read_share", "seeds with a fault on a GC data read", |r| r.faults.gc_data_read > 0),
    ("seeds_with_fault_gc_footer_read_share", "seeds with a fault on a GC footer read", |r| {
        r.faults.gc_footer_read > 0
    }),
    ("seeds_with_fault_gc_append_share", "seeds with a fault on a GC append", |r| r.faults.gc_append > 0),
    ("seeds_with_fault_gc_victim_reset_share", "seeds with a fault on a GC victim's reset", |r| {
        r.faults.gc_victim_reset > 0
    }),
    ("seeds_with_fault_other_reset_share", "seeds with a fault on another reset", |r| r.faults.other_reset > 0),
    ("seeds_with_fault_finish_share", "seeds with a fault on a finish", |r| r.faults.finish > 0),
    ("seeds_with_fault_metadata_flip_share", "seeds with a bit flipped in metadata the GC read", |r| {
        r.faults.metadata_record_flipped > 0
    }),
    ("seeds_with_fault_footer_flip_share", "seeds with a bit flipped in a footer the GC read", |r| {
        r.faults.footer_record_flipped > 0
    }),
    ("seeds_with_fault_offline_under_gc_share", "seeds with a zone taken offline under GC I/O", |r| {
        r.faults.zone_offline_under_gc > 0
    }),
];

impl Coverage {
    pub fn of(reports: &[DstReport]) -> Coverage {
        let of = reports.len() as u64;
        let mut figures = vec![Figure { name: "seeds", what: "seeds run", value: Value::Count(of) }];
        for &(name, what, test) in SEED_TESTS {
            let seeds = reports.iter().filter(|report| test(report)).count() as u64;
            figures.push(Figure { name, what, value: Value::SeedShare { seeds, of } });
        }
        let verified: Vec<u64> = reports.iter().map(|report| report.pages_verified).collect();
        let gc_runs: Vec<u64> = reports.iter().map(|report| report.stats.gc_runs).collect();
        let pages_moved: Vec<u64> = reports.iter().map(|report| report.stats.pages_moved).collect();
        let per_seed = [
            ("pages_verified_min", "swap-ins verified, fewest of a seed", minimum(&verified)),
            ("pages_verified_median", "swap-ins verified, median seed", median(&verified)),
            ("gc_runs_median", "GC victims collected, median seed", median(&gc_runs)),
            ("pages_moved_median", "pages the GC moved, median seed", median(&pages_moved)),
        ];
        for (name, what, value) in per_seed {
            figures.push(Figure { name, what, value: Value::Count(value) });
        }
        Coverage { figures }
    }

    pub fn get(&self, name: &str) -> Option<&Figure> {
        self.figures.iter().find(|figure| figure.name == name)
    }

    /// The figures below their floor. Floors naming no figure are an error, so a
    /// misspelt floor cannot pass silently.
    pub fn shortfalls(&self, floors: &Floors) -> Result<Vec<Shortfall>, FloorsError> {
        let mut shortfalls = Vec::new();
        for (name, floor) in &floors.floors {
            let Some(figure) = self.get(name) else {
                let known: Vec<&str> = self.figures.iter().map(|figure| figure.name).collect();
                return Err(FloorsError::UnknownFigure { name: name.clone(), known: known.join(", ") });
            };
            if figure.value.number() < *floor {
                shortfalls.push(Shortfall { name: figure.name, what: figure.what, value: figure.value, floor: *floor });
            }
        }
        Ok(shortfalls)
    }
}

impl Serialize for Coverage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.figures.len()))?;
        for figure in &self.figures {
            match figure.value {
                Value::SeedShare { .. } => map.serialize_entry(figure.name, &figure.value.number())?,
                Value::Count(count) => map.serialize_entry(figure.name, &count)?,
            }
        }
        map.end()
    }
}

fn minimum(values: &[u64]) -> u64 {
    values.iter().copied().min().unwrap_or(0)
}

/// The lower median.
fn median(values: &[u64]) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

/// A figure below its floor.
#[derive(Clone, Debug, PartialEq)]
pub struct Shortfall {
    pub name: &'static str,
    pub what: &'static str,
    pub value: Value,
    pub floor: f64,
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.value {
            Value::SeedShare { seeds, of } => write!(
                formatter,
                "{} ({}) is {:.1} % ({seeds} of {of}), below its floor {:.1} %",
                self.name,
                self.what.trim(),
                100.0 * self.value.number(),
                100.0 * self.floor
            ),
            Value::Count(count) => {
                write!(formatter, "{} ({}) is {count}, below its floor {}", self.name, self.what.trim(), self.floor)
            }
        }
    }
}

/// Minimum values of coverage figures, from a floors file:
/// `{"floors": {"seeds_with_gc_share": {"floor": 0.9, ...}, ...}, ...}` (keys other than
/// `floor` in a figure's object, and other top-level keys, are notes for readers).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Floors {
    /// (figure name, floor).
    pub floors: Vec<(String, f64)>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FloorsError {
    #[error("the floors file is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the floors file needs {0}")]
    Shape(String),
    #[error("floor for unknown coverage figure `{name}`: fix the name in the floors file (known figures: {known})")]
    UnknownFigure { name: String, known: String },
}

impl Floors {
    pub fn parse(text: &str) -> Result<Floors, FloorsError> {
        let document: serde_json::Value = serde_json::from_str(text)?;
        let Some(entries) = document.get("floors").and_then(|floors| floors.as_object()) else {
            return Err(FloorsError::Shape("a top-level \"floors\" object".into()));
        };
        let mut floors = Vec::new();
        for (name, entry) in entries {
            let Some(floor) = entry.get("floor").and_then(|floor| floor.as_f64()) else {
                return Err(FloorsError::Shape(format!("a number `floor` in \"floors\".\"{name}\"")));
            };
            floors.push((name.clone(), floor));
        }
        Ok(Floors { floors })
    }
}
