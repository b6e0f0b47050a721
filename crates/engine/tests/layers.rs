//! The engine's modules form layers (docs/architecture.md, "Inside crates/engine"): each
//! module may use modules of its own layer or below, never above. This test reads every
//! `crate::<module>` path in src/*.rs (use lines and paths in code; comments are skipped) and
//! fails on an edge that points up. `LAYERS` is the one place the table lives.

use std::collections::BTreeMap;
use std::path::Path;

/// Bottom-up: (layer, its modules).
const LAYERS: &[(&str, &[&str])] = &[
    (
        "page format",
        &["error", "node_page", "view", "options", "fs", "unpinned"],
    ),
    ("tree algorithms", &["node", "cursor", "walk"]),
    (
        "transactions and commit",
        &[
            "file",
            "process",
            "compaction_state",
            "alloc",
            "mutate",
            "append",
            "write",
            "write_tree",
            "remove_range",
            "redistribute",
            "read",
            "freemap",
            "durability",
            "readers",
            "scratch",
        ],
    ),
    ("typed tables", &["typed"]),
    ("database handle", &["db"]),
    (
        "maintenance",
        &["compact", "relocate", "autocompact", "check", "stats"],
    ),
];

/// Upward edges allowed, each with why.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "write",
        "autocompact",
        "WriteTx::commit starts a background compaction when the threshold says so \
         (autocompact::maybe_start); the state it decides on is in compaction_state.rs",
    ),
    (
        "db",
        "autocompact",
        "Db::sync, the handle's timer and open look at the threshold too (autocompact::check_quiet, \
         start_timer, at_open), so a file that goes quiet with dead space, or that earlier \
         processes left with it, is compacted",
    ),
];

fn layer_of() -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for (i, (_, mods)) in LAYERS.iter().enumerate() {
        for module in *mods {
            assert!(m.insert(*module, i).is_none(), "{module} is in two layers");
        }
    }
    m
}

/// The modules `src` names as `crate::<module>` (also inside one-line `use crate::{...}`).
fn uses(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in src.lines() {
        let code = line.split("//").next().unwrap();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap();
                for item in inner.split(',') {
                    let first = item.trim().split("::").next().unwrap().trim();
                    if first.starts_with(|c: char| c.is_ascii_lowercase()) {
                        out.push(first.to_string());
                    }
                }
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.starts_with(|c: char| c.is_ascii_lowercase()) {
                out.push(name);
            }
        }
    }
    out
}

#[test]
fn engine_modules_import_only_their_own_layer_or_below() {
    let layer = layer_of();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut seen = Vec::new();
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let module = path.file_stem().unwrap().to_str().unwrap().to_string();
        if module == "lib" {
            continue; // the crate root declares and re-exports every module
        }
        let Some(&from) = layer.get(module.as_str()) else {
            panic!("src/{module}.rs is in no layer: add it to LAYERS and docs/architecture.md");
        };
        seen.push(module.clone());
        let text = std::fs::read_to_string(&path).unwrap();
        for used in uses(&text) {
            // Names that are not modules of the table (`crate::raw`, ...) are not edges.
            let Some(&to) = layer.get(used.as_str()) else {
                continue;
            };
            let allowed = ALLOWED.iter().any(|(f, t, _)| *f == module && *t == used);
            if to > from && !allowed {
                wrong.push(format!(
                    "{module} ({}) uses {used} ({})",
                    LAYERS[from].0, LAYERS[to].0
                ));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "upward imports in crates/engine/src:\n{}",
        wrong.join("\n")
    );
    for module in layer.keys() {
        assert!(
            seen.iter().any(|s| s == module),
            "LAYERS names {module}, which has no src/{module}.rs"
        );
    }
}

#[test]
fn the_scanner_sees_plain_grouped_and_inline_paths_but_not_comments() {
    let src = "use crate::db::Db;\nuse crate::{error::Error, view, PageId};\n\
               let t = crate::autocompact::Trigger::default(); // crate::stats::x\n\
               /// [`crate::check::Problem`]\n";
    assert_eq!(uses(src), ["db", "error", "view", "autocompact"]);
}
