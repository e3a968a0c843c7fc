//! The direction of the runtime's dependencies, checked on its sources: the command line
//! ([`crate::cli`]) uses the library, the library uses the executors, and nothing reaches
//! back up. Inside the Linux executor the modules form layers too (the prepared-root
//! holder over its warm spares over init over the building blocks).
//!
//! The sources are read by [`modgraph`] (shared with the other crates' architecture tests),
//! with comments left out (a doc link up the stack is fine:
//! it documents, it does not depend).

#[path = "../../bundle/src/modgraph.rs"]
mod modgraph;

use modgraph::first_segments;
use std::path::{Path, PathBuf};

fn all_sources() -> Vec<(PathBuf, String)> {
    modgraph::sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// The top-level modules of the crate `code` names as `crate::X` (or `capsule_runtime::X`).
fn crate_modules(code: &str) -> Vec<String> {
    first_segments(code, &["crate::", "capsule_runtime::"])
}

/// The sibling modules `code` names as `super::X` (in `use super::{a, b::C}` groups too).
fn super_modules(code: &str) -> Vec<String> {
    first_segments(code, &["super::"])
}

/// `file` is in folder `dir` (relative to `src/`), or is `dir.rs`.
fn under(file: &Path, dir: &str) -> bool {
    file.starts_with(dir) || file == Path::new(&format!("{dir}.rs"))
}

#[test]
fn only_the_command_line_uses_the_command_line() {
    let mut bad = Vec::new();
    for (file, code) in all_sources() {
        if under(&file, "cli") || file == Path::new("main.rs") {
            continue;
        }
        if crate_modules(&code).iter().any(|m| m == "cli") || code.contains("super::cli") {
            bad.push(file.display().to_string());
        }
    }
    assert!(
        bad.is_empty(),
        "outside runtime/src/cli, these files use the command line (move what they need into the library): {bad:?}"
    );
}

/// The executors use the building blocks every layer shares (exit statuses, limits, the
/// refusal model they report into, the kernel stack) and
/// nothing of the library above them: whatever they need is handed down in the plan and
/// the hooks.
#[test]
fn executors_never_reach_up() {
    const SHARED: &[&str] = &["exit", "limits", "refusals", "kernel"];
    let mut bad = Vec::new();
    for (file, code) in all_sources() {
        let own = if under(&file, "linux") {
            "linux"
        } else if file == Path::new("macos.rs") {
            "macos"
        } else {
            continue;
        };
        for m in crate_modules(&code) {
            if m != own && !SHARED.contains(&m.as_str()) {
                bad.push(format!("{} uses crate::{m}", file.display()));
            }
        }
    }
    assert!(bad.is_empty(), "executors reaching up: {bad:#?}");
}

/// The library's lower parts (network, home layer, record, agent backends, isolation
/// report, settings) do not use the exec pipeline that puts them together.
#[test]
fn the_pipeline_is_the_top_of_the_library() {
    let mut bad = Vec::new();
    for (file, code) in all_sources() {
        if under(&file, "cli")
            || under(&file, "exec")
            || file == Path::new("main.rs")
            || file == Path::new("lib.rs")
        {
            continue;
        }
        if crate_modules(&code).iter().any(|m| m == "exec") {
            bad.push(file.display().to_string());
        }
    }
    assert!(
        bad.is_empty(),
        "below the exec pipeline, these use it: {bad:?}"
    );
}

/// The front ends (the command line, the OCI runtime `capsule-runc`) are used by the
/// binary's entry alone, and the plans (`crate::plan`, the exec's and the container's)
/// use no front end and not the pipeline above them: they are pure functions of their
/// input that the front ends execute.
#[test]
fn front_ends_are_the_top_and_plans_use_none() {
    let mut bad = Vec::new();
    for (file, code) in all_sources() {
        let used = crate_modules(&code);
        if !under(&file, "ociruntime")
            && file != Path::new("main.rs")
            && file != Path::new("lib.rs")
        {
            if used.iter().any(|m| m == "ociruntime") {
                bad.push(format!("{} uses crate::ociruntime", file.display()));
            }
        }
        if under(&file, "plan") {
            for m in used {
                if matches!(m.as_str(), "ociruntime" | "cli" | "exec") {
                    bad.push(format!("{} uses crate::{m}", file.display()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "front ends used from below: {bad:#?}");
}

/// Inside the Linux executor each module uses only modules of a lower layer: `mod.rs`
/// (the executor's entry) over the prepared-root holder, over its warm spares and the
/// supervision of a running sandbox, over init, over the building blocks. A module missing
/// from the table fails the test: give it its layer.
#[test]
fn linux_layers_point_down() {
    let layer = |m: &str| -> Option<u32> {
        Some(match m {
            "prepared" => 6,
            "warm" | "supervise" => 5,
            "init" => 4,
            "oci" | "notify" | "outcome" => 3,
            "mounts" | "observe" | "fusemask" | "diskguard" | "redirect" => 2,
            "plan" | "pty" | "activity" | "spawn" => 1,
            "report" | "hooks" | "sockets" => 0,
            _ => return None,
        })
    };
    let mut bad = Vec::new();
    for (file, code) in all_sources() {
        let Ok(rel) = file.strip_prefix("linux") else {
            continue;
        };
        let Some(module) = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
        else {
            continue;
        };
        if module == "mod" {
            continue;
        }
        // a module's own tests (`linux/oci/tests.rs`) sit one level further down
        let nested = rel.components().count() > 1;
        let Some(own) = layer(&module) else {
            bad.push(format!("{}: linux::{module} has no layer", file.display()));
            continue;
        };
        let mut used = first_segments(&code, &["crate::linux::"]);
        if !nested {
            used.extend(super_modules(&code));
        }
        for m in used {
            if m == module {
                continue;
            }
            match layer(&m) {
                Some(l) if l >= own => bad.push(format!(
                    "{}: linux::{module} (layer {own}) uses linux::{m} (layer {l})",
                    file.display()
                )),
                _ => {}
            }
        }
    }
    assert!(
        bad.is_empty(),
        "Linux executor layers pointing up: {bad:#?}"
    );
}

/// The kernel stack ([`crate::kernel`]) is the bottom both front ends stand on: it uses
/// nothing of the crate but the shared building blocks (exit statuses, limits), never an
/// executor, a plan, a front end or the library above. Inside it each module uses only
/// modules of a lower layer. A module missing from the table fails the test.
#[test]
fn the_kernel_stack_is_the_bottom() {
    const ALLOWED: &[&str] = &["kernel", "exit", "limits"];
    let layer = |m: &str| -> Option<u32> {
        Some(match m {
            "setup" => 3,
            "process" | "mount" => 2,
            "landlock" | "seccomp" | "cgroup" | "caps" | "rlimit" | "ns" | "checked" => 1,
            "sys" => 0,
            _ => return None,
        })
    };
    let mut bad = Vec::new();
    for (file, code) in all_sources() {
        let Ok(rel) = file.strip_prefix("kernel") else {
            continue;
        };
        for m in crate_modules(&code) {
            if !ALLOWED.contains(&m.as_str()) {
                bad.push(format!("{} uses crate::{m}", file.display()));
            }
        }
        let Some(module) = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
        else {
            continue;
        };
        if module == "mod" {
            continue;
        }
        let nested = rel.components().count() > 1;
        let Some(own) = layer(&module) else {
            bad.push(format!("{}: kernel::{module} has no layer", file.display()));
            continue;
        };
        let mut used = first_segments(&code, &["crate::kernel::"]);
        if !nested {
            used.extend(super_modules(&code));
        }
        for m in used {
            if m == module {
                continue;
            }
            match layer(&m) {
                Some(l) if l >= own => bad.push(format!(
                    "{}: kernel::{module} (layer {own}) uses kernel::{m} (layer {l})",
                    file.display()
                )),
                _ => {}
            }
        }
    }
    assert!(bad.is_empty(), "the kernel stack reaching up: {bad:#?}");
}

/// capsule-runc's front end keeps only what is the OCI command line's own (parsing,
/// state, hooks as runc runs them, the console socket): the kernel-facing steps are the
/// kernel stack's, shared with `capsule exec` ([`crate::kernel`]), so a fix made there
/// reaches both.
#[test]
fn the_oci_front_end_keeps_no_kernel_steps() {
    const KERNEL_STEPS: &[&str] = &[
        "SECCOMP_SET_MODE_FILTER",
        "PR_SET_NO_NEW_PRIVS",
        "cgroup.procs",
        "SYS_clone",
        "libc::clone(",
        "capset",
    ];
    let mut bad = Vec::new();
    for (file, code) in all_sources() {
        if !under(&file, "ociruntime") {
            continue;
        }
        for k in KERNEL_STEPS {
            if code.contains(k) {
                bad.push(format!("{}: {k}", file.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "kernel steps in the OCI front end (move them into crate::kernel): {bad:#?}"
    );
}

/// No two modules use each other: where two parts need each other, what they share is a
/// module of its own below both ([`modgraph::circles`]).
#[test]
fn no_two_modules_use_each_other() {
    let bad = modgraph::circles(&all_sources());
    assert!(
        bad.is_empty(),
        "modules that use each other (move what they share below both): {bad:#?}"
    );
}
