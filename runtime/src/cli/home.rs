//! `capsule home diff|apply|discard` (review of a capsule's home layer) and
//! `capsule reveal list|add|rm` (projects next to the source folder that its capsules may
//! read). The work is done in [`crate::home`]; this module parses arguments and prints.
//!
//! Everything printed from the home layer (names, symlink targets, content lines) was
//! written by a task: it goes through [`capsule_bundle::escape`] first.

use crate::exit::{CliError, CliResult};
use crate::home::{layer, reveal};
use crate::settings::Settings;
use capsule_bundle::layout::{capsule_root, Layout};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum HomeCommand {
    /// What the task added, changed or removed in the home directory (content diffs for
    /// text). Package caches are not part of the review. What it shows becomes the
    /// review that `home apply` applies, and nothing else.
    Diff(HomeDiffArgs),
    /// Copy the task's home changes (all, or the named paths) to the real home directory,
    /// exactly as the last `home diff` showed them. Refuses a change not in that review
    /// or changed since, refuses while an exec of the capsule runs, and refuses a change
    /// whose real file moved on since the task started, unless --force.
    Apply(HomeApplyArgs),
    /// Throw away the task's home changes (all, or the named paths).
    Discard(HomeDiscardArgs),
}

#[derive(Debug, Args)]
pub struct HomeDiffArgs {
    /// The capsule.
    pub capsule: String,
    /// Only these paths (`~/.zshrc`, `.config/git`, or absolute under home).
    pub paths: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HomeApplyArgs {
    /// The capsule.
    pub capsule: String,
    /// Only these paths (`~/.zshrc`, `.config/git`, or absolute under home); all if none.
    pub paths: Vec<String>,
    /// Apply even where the real file changed since the task started.
    #[arg(long)]
    pub force: bool,
    /// Apply only if the last `home diff` printed this review token (or a prefix of at
    /// least 12 of its hex digits).
    #[arg(long, value_name = "TOKEN")]
    pub review: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HomeDiscardArgs {
    /// The capsule.
    pub capsule: String,
    /// Only these paths; all if none.
    pub paths: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum RevealCommand {
    /// The folders outside the source folder that its manifests (Cargo.toml, package.json,
    /// .csproj/.fsproj/.vbproj, go.mod, go.work) name, each marked opened or not. Only
    /// suggestions: nothing opens by itself.
    List(RevealListArgs),
    /// Open a folder (read-only) for every capsule of a source folder.
    Add(RevealChangeArgs),
    /// Close a folder opened with `reveal add`.
    Rm(RevealChangeArgs),
}

#[derive(Debug, Args)]
pub struct RevealListArgs {
    /// Source folder (default: the git work tree holding the current directory, or the
    /// current directory).
    pub source: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RevealChangeArgs {
    /// The folder to open or close (e.g. `../shared`).
    pub dir: PathBuf,
    /// Source folder whose capsules see it (default: the git work tree holding the current
    /// directory, or the current directory).
    #[arg(long)]
    pub source: Option<PathBuf>,
}

pub fn home(cmd: HomeCommand) -> CliResult {
    let layout = layout()?;
    let fail = |e: &dyn std::fmt::Display| CliError::failure(e.to_string());
    let reference = match &cmd {
        HomeCommand::Diff(a) => &a.capsule,
        HomeCommand::Apply(a) => &a.capsule,
        HomeCommand::Discard(a) => &a.capsule,
    };
    let cap = capsule_bundle::store::resolve(&layout, reference).map_err(|e| fail(&e))?;
    let root = std::fs::canonicalize(&layout.root).ok();
    let layer =
        crate::home::layer_for(&cap.bundle_dir, &cap.policy, root.as_deref()).ok_or_else(|| {
            CliError::failure(format!(
                "capsule {}: its policy names no home directory, so it has no home layer",
                cap.name
            ))
        })?;
    let rel_paths = |paths: &[String]| -> Result<Vec<PathBuf>, CliError> {
        paths
            .iter()
            .map(|p| layer::home_relative(&layer.home, p).map_err(|e| fail(&e)))
            .collect()
    };
    match cmd {
        HomeCommand::Diff(a) => {
            let filter = rel_paths(&a.paths)?;
            let running = crate::home::lock::exec_running(&cap.bundle_dir);
            let changes = layer.changes(&filter, true).map_err(|e| fail(&e))?;
            // what was shown is what `apply` may apply
            let review = crate::home::review::Review::of(&changes);
            review.save(&cap.bundle_dir).map_err(|e| {
                fail(&format!(
                    "saving the review in {}: {e}",
                    capsule_bundle::escape::path(&cap.bundle_dir)
                ))
            })?;
            if a.json {
                let v = serde_json::json!({
                    "capsule": cap.name,
                    "home": layer.home,
                    "changes": changes,
                    "review": review.token,
                    "exec_running": running,
                });
                super::print_json(&v);
            } else {
                print_changes(&cap.name, &changes, &review, running);
            }
            Ok(ExitCode::SUCCESS)
        }
        HomeCommand::Apply(a) => {
            let filter = rel_paths(&a.paths)?;
            // no exec may run (and write to the layer) while it is applied
            let _lock = crate::home::lock::exclusive(&cap.bundle_dir).map_err(|e| fail(&e))?;
            // no prepared root may keep the layer mounted while it changes under it
            #[cfg(target_os = "linux")]
            crate::linux::prepared::stop_all(&crate::linux::prepared::dir(&cap.bundle_dir));
            let done = layer
                .apply(&cap.bundle_dir, &filter, a.force, a.review.as_deref())
                .map_err(|e| fail(&e))?;
            if a.json {
                let v = serde_json::to_value(&done).map_err(|e| fail(&e))?;
                super::print_json(&v);
            } else if done.applied.is_empty() {
                println!(
                    "nothing to apply: the home layer of {} holds no changes",
                    cap.name
                );
            } else {
                for p in &done.applied {
                    let forced = if done.forced.contains(p) {
                        " (forced over a newer real file)"
                    } else {
                        ""
                    };
                    println!("applied ~/{}{forced}", capsule_bundle::escape::path(p));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        HomeCommand::Discard(a) => {
            let filter = rel_paths(&a.paths)?;
            let _lock = crate::home::lock::exclusive(&cap.bundle_dir).map_err(|e| fail(&e))?;
            #[cfg(target_os = "linux")]
            crate::linux::prepared::stop_all(&crate::linux::prepared::dir(&cap.bundle_dir));
            let removed = layer.discard(&filter).map_err(|e| fail(&e))?;
            // the layer changed: what was reviewed is no longer what it holds
            crate::home::review::Review::clear(&cap.bundle_dir);
            if removed.is_empty() {
                println!(
                    "nothing to discard: the home layer of {} is empty",
                    cap.name
                );
            }
            for p in removed {
                println!("discarded ~/{}", capsule_bundle::escape::path(&p));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_changes(
    name: &str,
    changes: &[layer::Change],
    review: &crate::home::review::Review,
    running: bool,
) {
    use capsule_bundle::escape;
    let name = escape::name(name.as_bytes());
    if running {
        eprintln!(
            "capsule: an exec of {name} is still running: the layer may still change (apply refuses until it ends)"
        );
    }
    if changes.is_empty() {
        println!("no home changes in capsule {name}");
        return;
    }
    for c in changes {
        let mark = match c.kind {
            layer::ChangeKind::Added => "added  ",
            layer::ChangeKind::Changed => "changed",
            layer::ChangeKind::Removed => "removed",
        };
        let suffix = match c.entry {
            layer::EntryType::Dir => "/",
            _ => "",
        };
        let target = c
            .target
            .as_ref()
            .map(|t| format!(" -> {}", escape::path(t)))
            .unwrap_or_default();
        println!("{mark} ~/{}{suffix}{target}", escape::path(&c.path));
        if let Some(r) = &c.refused {
            println!("        refused: {}", escape::text_line(r));
        }
        if let Some(why) = c.runs_as_you {
            println!("        RUNS AS YOU once applied ({why}): read it before you apply");
        }
        if c.binary {
            println!("        (binary or large file: no content diff)");
        }
        if let Some(sum) = &c.sha256 {
            if c.diff.is_none() {
                println!("        sha256 {sum}");
            }
        }
        if let Some(d) = &c.diff {
            // split on \n only: a \r shows, it never returns to the start of the line
            for line in d.strip_suffix('\n').unwrap_or(d).split('\n') {
                println!("        {}", escape::text_line(line));
            }
        }
    }
    println!(
        "review {} ({} change(s)): apply exactly this with `capsule home apply {name} [PATH…]`, or drop with `capsule home discard {name} [PATH…]`",
        review.short_token(),
        changes.len()
    );
}

fn layout() -> Result<Layout, CliError> {
    capsule_root()
        .map(Layout::new)
        .ok_or_else(|| CliError::failure("cannot find the capsule root: set CAPSULE_ROOT or HOME"))
}

fn cwd() -> Result<PathBuf, CliError> {
    std::env::current_dir().map_err(|e| CliError::failure(format!("current directory: {e}")))
}

/// The canonical source folder from `--source`/argument, else the default.
fn source_dir(arg: Option<&Path>) -> Result<PathBuf, CliError> {
    let base = match arg {
        Some(p) => p.to_path_buf(),
        None => reveal::default_source(&cwd()?),
    };
    std::fs::canonicalize(&base)
        .map_err(|e| CliError::failure(format!("source folder {}: {e}", base.display())))
}

fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .and_then(|h| std::fs::canonicalize(h).ok())
}

pub fn reveal(cmd: RevealCommand) -> CliResult {
    let layout = layout()?;
    let settings_path = layout.settings_file();
    let fail = |e: &dyn std::fmt::Display| CliError::failure(e.to_string());
    match cmd {
        RevealCommand::List(a) => {
            let source = source_dir(a.source.as_deref())?;
            let settings = Settings::load(&settings_path).map_err(|e| fail(&e))?;
            let opened = reveal::opened_for(&settings, &source);
            let scan = reveal::scan(&source, &opened).map_err(|e| fail(&e))?;
            if a.json {
                let v = serde_json::to_value(&scan).map_err(|e| fail(&e))?;
                super::print_json(&v);
            } else {
                print_scan(&scan);
            }
            Ok(ExitCode::SUCCESS)
        }
        RevealCommand::Add(a) => {
            let source = source_dir(a.source.as_deref())?;
            let dir = reveal::canonical_dir(&a.dir).map_err(|e| fail(&e))?;
            if dir.starts_with(&source) {
                return Err(CliError::failure(format!(
                    "{}: inside the source folder {}; capsules already get a copy of it",
                    dir.display(),
                    source.display()
                )));
            }
            if source.starts_with(&dir) {
                return Err(CliError::failure(format!(
                    "{}: holds the source folder {}; reveal the project folder itself",
                    dir.display(),
                    source.display()
                )));
            }
            let root = std::fs::canonicalize(&layout.root).ok();
            reveal::check_revealable(&dir, home_dir().as_deref(), root.as_deref())
                .map_err(|e| fail(&e))?;
            let mut settings = Settings::load(&settings_path).map_err(|e| fail(&e))?;
            if reveal::add(&mut settings, &source, &dir) {
                settings.save(&settings_path).map_err(|e| fail(&e))?;
                println!(
                    "opened {} (read-only) for capsules of {}; close it with `capsule reveal rm {}`",
                    dir.display(),
                    source.display(),
                    reveal::relative_to(&dir, &source)
                );
            } else {
                println!(
                    "{} was already open for capsules of {}",
                    dir.display(),
                    source.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        RevealCommand::Rm(a) => {
            let source = source_dir(a.source.as_deref())?;
            // the folder may be gone by now: fall back to a normalized absolute path
            let dir = std::fs::canonicalize(&a.dir).unwrap_or_else(|_| {
                let abs = if a.dir.is_absolute() {
                    a.dir.clone()
                } else {
                    cwd()
                        .map(|c| c.join(&a.dir))
                        .unwrap_or_else(|_| a.dir.clone())
                };
                reveal::normalize(&abs)
            });
            let mut settings = Settings::load(&settings_path).map_err(|e| fail(&e))?;
            reveal::remove(&mut settings, &source, &dir).map_err(|e| fail(&e))?;
            settings.save(&settings_path).map_err(|e| fail(&e))?;
            println!(
                "closed {} for capsules of {}",
                dir.display(),
                source.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_scan(scan: &reveal::Scan) {
    use capsule_bundle::escape;
    if scan.suggestions.is_empty() {
        println!(
            "no folders outside {} are named by its manifests",
            escape::path(&scan.source)
        );
    }
    for s in &scan.suggestions {
        let mark = if s.opened { "opened" } else { "closed" };
        let missing = if s.exists { "" } else { " (missing)" };
        println!(
            "{mark:<7} {}{missing}  [{}]",
            escape::name(s.relative.as_bytes()),
            escape::path(&s.path)
        );
        if s.named_by.is_empty() {
            println!("        opened by hand; no manifest names it");
        }
        for m in &s.named_by {
            println!(
                "        {}: {} = \"{}\"",
                escape::path(&m.manifest),
                escape::name(m.field.as_bytes()),
                escape::name(m.written.as_bytes())
            );
        }
    }
    for u in &scan.unreadable {
        println!(
            "could not read {}: {}",
            escape::path(&u.manifest),
            escape::text_line(&u.error.replace('\n', " "))
        );
    }
    if scan.suggestions.iter().any(|s| !s.opened && s.exists) {
        println!("open one for this source's capsules with `capsule reveal add <folder>`");
    }
}
