//! Running a figure's runs: in parallel over a few worker threads (each run is a pure
//! function of its config, so the results do not depend on the scheduling), reusing
//! runs already done in this session, with a progress line on a terminal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::PaperError;
use crate::run::{run, RunConfig, RunError, RunResult};

/// Where a figure's runs say how far they are: the caller's progress line (the
/// simulator draws nothing itself), or nowhere.
pub struct Progress {
    report: Box<dyn Fn(&str) + Send + Sync>,
}

impl Progress {
    /// Progress said to `report` (called from the workers).
    pub fn new(report: impl Fn(&str) + Send + Sync + 'static) -> Progress {
        Progress { report: Box::new(report) }
    }

    pub fn quiet() -> Progress {
        Progress::new(|_| {})
    }

    pub fn line(&self, message: &str) {
        (self.report)(message);
    }
}

/// Runs done in this session, by name (names encode every parameter that matters).
#[derive(Default)]
pub struct RunCache {
    done: HashMap<String, RunResult>,
}

impl RunCache {
    pub fn get(&self, name: &str) -> Option<&RunResult> {
        self.done.get(name)
    }
}

/// Runs `configs` on `jobs` threads; results come back in the configs' order.
pub fn run_all(
    figure: &str,
    configs: &[RunConfig],
    jobs: usize,
    cache: &mut RunCache,
    progress: &Progress,
) -> Result<Vec<RunResult>, PaperError> {
    let todo: Vec<usize> = (0..configs.len()).filter(|&index| cache.get(&configs[index].name).is_none()).collect();
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Result<RunResult, RunError>)>> = Mutex::new(Vec::new());
    let total = todo.len();
    progress.line(&format!("fig {figure}: 0/{total} runs"));
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, total.max(1)) {
            scope.spawn(|| loop {
                let claimed = next.fetch_add(1, Ordering::Relaxed);
                let Some(&index) = todo.get(claimed) else { break };
                let result = run(&configs[index]);
                results.lock().expect("no worker panicked holding the lock").push((index, result));
                let count = finished.fetch_add(1, Ordering::Relaxed) + 1;
                progress.line(&format!("fig {figure}: {count}/{total} runs ({} done)", configs[index].name));
            });
        }
    });
    for (index, result) in results.into_inner().expect("workers done") {
        let result = result.map_err(|source| PaperError::Run { run: configs[index].name.clone(), source })?;
        cache.done.insert(configs[index].name.clone(), result);
    }
    Ok(configs.iter().map(|config| cache.done[&config.name].clone()).collect())
}
