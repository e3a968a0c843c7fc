//! The shape of the bundle crate's dependencies, checked on its sources: no two modules
//! use each other (what two parts share is a module of its own below both, as
//! [`crate::wspath`] under the synthetic steps and the overlay copy, or [`crate::record`]
//! under the store and the staging reaper).

#[path = "modgraph.rs"]
mod modgraph;

#[test]
fn no_two_modules_use_each_other() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = modgraph::circles(&modgraph::sources(&src));
    assert!(
        bad.is_empty(),
        "modules that use each other (move what they share below both): {bad:#?}"
    );
}
