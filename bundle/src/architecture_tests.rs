//! The shape of the bundle crate's dependencies, checked on its sources. The crate is
//! grouped by concern in layers (see the crate's doc): each group uses only the groups of
//! a lower layer and the building blocks, and no two modules use each other (what two
//! parts share is a module of its own below both, as [`crate::workspace::wspath`] under
//! the synthetic steps and the overlay copy, or [`crate::store::record`] under the store
//! and the staging reaper).

#[path = "modgraph.rs"]
mod modgraph;

use modgraph::first_segments;
use std::path::Path;

/// The layer of each top-level module: a group uses only groups of a lower layer. A
/// module missing from the table fails the test: give it its layer.
fn layer(m: &str) -> Option<u32> {
    Some(match m {
        "open" => 7,
        "store" => 6,
        "workspace" => 5,
        "objects" => 4,
        "git" => 3,
        "spec" => 2,
        "policy" => 1,
        // the building blocks every group shares
        "error" | "escape" | "fsat" | "rmtree" | "progress" | "layout" => 0,
        // the crate root's re-exports of `error`
        "Error" | "Result" => 0,
        _ => return None,
    })
}

#[test]
fn groups_point_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut bad = Vec::new();
    for (file, code) in modgraph::sources(&src) {
        let module = modgraph::module_of(&file);
        let Some(top) = module.first() else {
            continue; // lib.rs
        };
        let Some(own) = layer(top) else {
            bad.push(format!("{}: {top} has no layer", file.display()));
            continue;
        };
        for m in first_segments(&code, &["crate::", "capsule_bundle::"]) {
            if &m == top {
                continue;
            }
            match layer(&m) {
                Some(l) if l < own || (l == 0 && own == 0) => {}
                Some(l) => bad.push(format!(
                    "{}: {top} (layer {own}) uses {m} (layer {l})",
                    file.display()
                )),
                None => bad.push(format!("{}: uses {m}, which has no layer", file.display())),
            }
        }
    }
    assert!(bad.is_empty(), "bundle groups pointing up: {bad:#?}");
}

#[test]
fn no_two_modules_use_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = modgraph::circles(&modgraph::sources(&src));
    assert!(
        bad.is_empty(),
        "modules that use each other (move what they share below both): {bad:#?}"
    );
}
