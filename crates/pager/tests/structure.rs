//! The crate's structure, checked against its sources: the lock table of the README
//! lists every `Mutex` and `RwLock` declared (and nothing else), no module imports
//! everything of another (`use …::*`), and no module imports a module that imports it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `src`, by its path relative to `src`, with its text up to its
/// unit tests (a `#[cfg(test)] mod tests` block ends a file's checked part).
fn sources() -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("reading src") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).expect("reading a source file");
                let checked = match text.find("#[cfg(test)]\nmod tests") {
                    Some(at) => text[..at].to_string(),
                    None => text,
                };
                let relative = path.strip_prefix(root).expect("under src").to_string_lossy().into_owned();
                out.insert(relative, checked);
            }
        }
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    walk(&root, &root, &mut out);
    out
}

/// `(file, Struct::field)` or `(file, STATIC)` for every lock declared.
fn declared_locks() -> BTreeSet<(String, String)> {
    let mut locks = BTreeSet::new();
    for (file, text) in sources() {
        let mut item = String::new();
        for line in text.lines() {
            let line = line.trim_start();
            let words: Vec<&str> = line.split_whitespace().collect();
            if let Some(at) = words.iter().position(|word| *word == "struct") {
                if let Some(name) = words.get(at + 1) {
                    item = name.trim_end_matches(['{', ';', '<']).split('<').next().unwrap_or("").to_string();
                }
            }
            let is_lock = |ty: &str| {
                let ty = ty.trim_start_matches("std::sync::");
                ty.starts_with("Mutex<") || ty.starts_with("RwLock<")
            };
            if let Some(rest) = line.strip_prefix("static ") {
                if let Some((name, ty)) = rest.split_once(':') {
                    if is_lock(ty.trim()) {
                        locks.insert((file.clone(), name.trim().to_string()));
                    }
                }
                continue;
            }
            // A field: `name: Type,` possibly after `pub`/`pub(crate)`/`pub(super)`.
            let field = line.trim_start_matches("pub(crate) ").trim_start_matches("pub(super) ");
            let field = field.trim_start_matches("pub ");
            if let Some((name, ty)) = field.split_once(':') {
                let name_ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if name_ok && is_lock(ty.trim()) && ty.trim_end().ends_with(',') {
                    locks.insert((file.clone(), format!("{item}::{name}")));
                }
            }
        }
    }
    locks
}

/// `(file, lock)` for every row of the README's lock table.
fn listed_locks() -> BTreeSet<(String, String)> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).expect("README");
    let table = readme.split("## Locks").nth(1).expect("a Locks section in the README");
    let mut locks = BTreeSet::new();
    for line in table.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let unquote = |cell: &str| cell.trim_matches('`').to_string();
        locks.insert((unquote(cells[1]), unquote(cells[2])));
    }
    locks
}

#[test]
fn the_lock_table_lists_every_lock() {
    let declared = declared_locks();
    let listed = listed_locks();
    assert!(declared.len() > 10, "the scan found too few locks to be right: {declared:?}");
    let unlisted: Vec<_> = declared.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&declared).collect();
    assert!(
        unlisted.is_empty() && stale.is_empty(),
        "crates/pager/README.md's lock table is out of date: declared but not listed {unlisted:?}; listed but not \
         declared {stale:?}"
    );
}

#[test]
fn no_glob_imports() {
    for (file, text) in sources() {
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            assert!(
                !(line.starts_with("use ") && line.ends_with("::*;")),
                "src/{file}:{}: `{line}`: import what is used by name",
                number + 1
            );
        }
    }
}

/// The module a source file is (`pager/fault.rs` → `pager::fault`; `lib.rs` → ``).
fn module_of(file: &str) -> String {
    let path = file.trim_end_matches(".rs");
    let path = path.trim_end_matches("/mod").trim_end_matches("lib");
    path.trim_end_matches('/').replace('/', "::")
}

/// The crate's modules that `text` (of module `module`) names in a path (`crate::x`,
/// `super::x`, or a child `x::` of its own), the longest module a path starts with.
fn imported(module: &str, text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let starts = (at == 0
            || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_' || bytes[at - 1] == b':'))
            && (bytes[at].is_ascii_lowercase() || bytes[at] == b'_');
        if !starts {
            at += 1;
            continue;
        }
        let end = text[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(text.len(), |len| at + len);
        let path: Vec<&str> = text[at..end].split("::").filter(|segment| !segment.is_empty()).collect();
        at = end.max(at + 1);
        if path.len() < 2 {
            continue;
        }
        let mut base: Vec<String> =
            if module.is_empty() { Vec::new() } else { module.split("::").map(String::from).collect() };
        let rest: Vec<&str> = match path[0] {
            "crate" => {
                base.clear();
                path[1..].to_vec()
            }
            "super" => {
                let ups = path.iter().take_while(|segment| **segment == "super").count();
                base.truncate(base.len().saturating_sub(ups));
                path[ups..].to_vec()
            }
            "self" => path[1..].to_vec(),
            _ => path.clone(),
        };
        for len in (1..=rest.len()).rev() {
            let mut candidate = base.clone();
            candidate.extend(rest[..len].iter().map(|segment| segment.to_string()));
            let candidate = candidate.join("::");
            if modules.contains(&candidate) {
                if candidate != module {
                    found.insert(candidate);
                }
                break;
            }
        }
    }
    found
}

/// Inline modules (`mod x { … }`) would resolve `super::` from themselves: the crate
/// keeps none outside its unit tests, so none is looked for.
#[test]
fn no_module_imports_one_that_imports_it() {
    let sources = sources();
    let modules: BTreeSet<String> = sources.keys().map(|file| module_of(file)).collect();
    let edges: BTreeMap<String, BTreeSet<String>> =
        sources.iter().map(|(file, text)| (module_of(file), imported(&module_of(file), text, &modules))).collect();
    // The crate root re-exports: it is where others are named from, never an importer
    // of its own.
    for (module, targets) in &edges {
        assert!(
            !targets.contains(""),
            "module `{module}` imports from the crate root: name the module that defines the item"
        );
    }
    for (from, targets) in &edges {
        if from.is_empty() {
            continue;
        }
        // Depth-first: a path back to `from` is a circle.
        let mut stack: Vec<(String, Vec<String>)> = targets.iter().map(|t| (t.clone(), vec![t.clone()])).collect();
        let mut seen = BTreeSet::new();
        while let Some((module, path)) = stack.pop() {
            if module == *from {
                panic!("an import circle: {from} -> {}", path.join(" -> "));
            }
            if !seen.insert(module.clone()) {
                continue;
            }
            for next in edges.get(&module).into_iter().flatten() {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
}

/// Records of configuration, figures and reports, which may be as wide as what they
/// record.
const RECORDS: &[&str] = &["PagerConfig", "RunConfig", "RunReport", "FaultTimes", "PagerStats"];
/// A struct that holds state holds at most this many fields: more is several parts.
const FIELDS_MAX: usize = 15;

#[test]
fn no_state_holding_struct_has_more_than_fifteen_fields() {
    let mut widest = (String::new(), 0);
    for (file, text) in sources() {
        let lines: Vec<&str> = text.lines().collect();
        for (index, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let words: Vec<&str> = trimmed.split_whitespace().collect();
            let Some(at) = words.iter().position(|word| *word == "struct") else { continue };
            if !trimmed.ends_with('{') || trimmed.starts_with("//") {
                continue;
            }
            let name = words[at + 1].split(['<', '{']).next().unwrap_or("").to_string();
            let indent = line.len() - trimmed.len();
            let mut fields = 0;
            for field in &lines[index + 1..] {
                let field_trimmed = field.trim_start();
                if field_trimmed.starts_with('}') && field.len() - field_trimmed.len() == indent {
                    break;
                }
                let depth_ok = field.len() - field_trimmed.len() == indent + 4;
                let is_field = !field_trimmed.starts_with("//")
                    && !field_trimmed.starts_with('#')
                    && field_trimmed.contains(':')
                    && field_trimmed.ends_with(',');
                if depth_ok && is_field {
                    fields += 1;
                }
            }
            if RECORDS.contains(&name.as_str()) {
                continue;
            }
            assert!(
                fields <= FIELDS_MAX,
                "src/{file}: struct {name} has {fields} fields (at most {FIELDS_MAX}): split it into parts that own \
                 their state"
            );
            if fields > widest.1 {
                widest = (name, fields);
            }
        }
    }
    assert!(
        widest.1 >= 8,
        "the scan found no struct wider than {} fields ({}): it is not reading them",
        widest.1,
        widest.0
    );
}
