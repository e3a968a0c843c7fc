//! `capsule agent profile list|show|add|rm`: the agent profiles `agent launch --backend`
//! takes ([`crate::agent`]): the built-in ones and the operator's own, kept in
//! the tool's settings (`agent_profiles` in `$CAPSULE_ROOT/settings.json`), which no
//! sandbox can see.

use crate::agent::{self as agent_profiles, Profile};
use crate::cli::print_json;
use crate::exit::{self, CliError, CliResult};
use crate::settings::Settings;
use capsule_bundle::escape;
use capsule_bundle::layout::{capsule_root, Layout};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// List the profiles (built-in and the operator's own).
    List(ListArgs),
    /// Show one profile.
    Show(ShowArgs),
    /// Add (or replace) a profile of your own from a JSON file (`-`: stdin), e.g.
    /// `{"name": "aider", "binary": "aider", "login_paths": [".aider"], "hosts":
    /// ["api.openai.com:443"], "env": ["OPENAI_API_KEY"], "batch": ["--message"]}`.
    Add(AddArgs),
    /// Remove a profile of your own.
    Rm(RmArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    pub name: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// The profile as JSON (a file, or `-` for stdin).
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    pub name: String,
}

fn settings_path() -> Result<PathBuf, CliError> {
    capsule_root()
        .map(|r| Layout::new(r).settings_file())
        .ok_or_else(|| CliError::failure("no capsule root: set CAPSULE_ROOT or HOME"))
}

fn load() -> Result<(PathBuf, Settings), CliError> {
    let path = settings_path()?;
    let s = Settings::load(&path).map_err(|e| CliError::failure(e.to_string()))?;
    Ok((path, s))
}

fn is_builtin(name: &str) -> bool {
    agent_profiles::builtin().iter().any(|p| p.name == name)
}

pub fn run(cmd: ProfileCommand) -> CliResult {
    match cmd {
        ProfileCommand::List(a) => {
            let (_, s) = load()?;
            let all = agent_profiles::all(&s.agent_profiles);
            if a.json {
                let v: Vec<serde_json::Value> = all
                    .iter()
                    .map(|p| {
                        serde_json::json!({
                            "name": p.name,
                            "builtin": is_builtin(&p.name),
                            "binary": p.binary,
                            "package": p.package,
                        })
                    })
                    .collect();
                print_json(&serde_json::json!({ "profiles": v }));
            } else {
                for p in &all {
                    println!(
                        "{:<12} {:<10} {}{}",
                        escape::name(p.name.as_bytes()),
                        if is_builtin(&p.name) {
                            "built-in"
                        } else {
                            "yours"
                        },
                        escape::name(p.binary.as_bytes()),
                        p.package
                            .as_deref()
                            .map(|k| format!(" ({})", escape::name(k.as_bytes())))
                            .unwrap_or_default()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ProfileCommand::Show(a) => {
            let (_, s) = load()?;
            let p = agent_profiles::find(&a.name, &s.agent_profiles)
                .ok_or_else(|| CliError::failure(format!("no agent profile {:?}", a.name)))?;
            if a.json {
                print_json(&serde_json::to_value(&p).unwrap_or_default());
            } else {
                let text = serde_json::to_string_pretty(&p).unwrap_or_default();
                for l in text.lines() {
                    println!("{}", escape::text_line(l));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ProfileCommand::Add(a) => {
            let text = if a.file.as_os_str() == "-" {
                use std::io::Read;
                let mut t = String::new();
                std::io::stdin()
                    .take(1 << 20)
                    .read_to_string(&mut t)
                    .map_err(|e| {
                        CliError::failure(format!("reading the profile from stdin: {e}"))
                    })?;
                t
            } else {
                std::fs::read_to_string(&a.file)
                    .map_err(|e| CliError::failure(format!("{}: {e}", a.file.display())))?
            };
            let shown = if a.file.as_os_str() == "-" {
                "stdin".to_string()
            } else {
                a.file.display().to_string()
            };
            let p: Profile = serde_json::from_str(&text).map_err(|e| {
                CliError::failure(format!("{shown}:{}:{}: {e}", e.line(), e.column()))
            })?;
            p.validate()
                .map_err(|e| CliError::failure(format!("{shown}: {e}")))?;
            if is_builtin(&p.name) {
                return Err(CliError::failure(format!(
                    "{shown}: {:?} is a built-in profile; give yours another name",
                    p.name
                )));
            }
            let (path, mut s) = load()?;
            s.agent_profiles.retain(|x| x.name != p.name);
            let name = p.name.clone();
            s.agent_profiles.push(p);
            s.save(&path)
                .map_err(|e| CliError::failure(format!("saving settings: {e}")))?;
            println!("added agent profile {}", escape::name(name.as_bytes()));
            Ok(ExitCode::SUCCESS)
        }
        ProfileCommand::Rm(a) => {
            if is_builtin(&a.name) {
                return Err(CliError::failure(format!(
                    "{:?} is a built-in profile; it cannot be removed",
                    a.name
                )));
            }
            let (path, mut s) = load()?;
            let before = s.agent_profiles.len();
            s.agent_profiles.retain(|x| x.name != a.name);
            if s.agent_profiles.len() == before {
                return Err(CliError::new(
                    exit::FAILURE,
                    format!("no agent profile of yours named {:?}", a.name),
                ));
            }
            s.save(&path)
                .map_err(|e| CliError::failure(format!("saving settings: {e}")))?;
            println!("removed agent profile {}", escape::name(a.name.as_bytes()));
            Ok(ExitCode::SUCCESS)
        }
    }
}
