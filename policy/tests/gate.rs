//! Table-driven tests of the launch-policy gate on a real scratch tree (tmpfs): git
//! repositories made with the `git` CLI under a hermetic environment, capsules made of a
//! sentinel and a manifest, and `.kitsoki.yaml` files written per case.

use capsule_policy::{Check, Gate, GateState, HeadState};
use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch() -> tempfile::TempDir {
    let base = Path::new("/dev/shm");
    tempfile::Builder::new()
        .prefix("capsule-policy-")
        .tempdir_in(if base.is_dir() {
            base
        } else {
            Path::new("/tmp")
        })
        .expect("scratch dir")
}

/// Run git with no system/global config and a fixed identity (tests only: the gate itself
/// never runs git).
fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn mkdir(p: &Path) -> PathBuf {
    std::fs::create_dir_all(p).expect("mkdir");
    std::fs::canonicalize(p).expect("canonicalize")
}

fn write(p: &Path, text: &str) {
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).expect("mkdir parent");
    }
    std::fs::write(p, text).expect("write");
}

fn new_repo(dir: &Path, branch: &str) {
    mkdir(dir);
    git(dir, &["init", "-q", "-b", branch]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "first"]);
}

fn make_capsule(dir: &Path, name: &str) {
    mkdir(dir);
    write(&dir.join(".kitsoki-capsule"), &format!("{name}\n"));
    write(
        &dir.join("capsule-manifest.json"),
        &format!(
            r#"{{"capsule_name":"{name}","spec_path":"/specs/{name}/capsule.yaml","workspace":"{}","opened_at":"2026-01-01T00:00:00Z","future_field":[1,2]}}"#,
            dir.display()
        ),
    );
}

/// The world every case runs in.
struct World {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
}

impl World {
    fn new() -> World {
        let tmp = scratch();
        let root = std::fs::canonicalize(tmp.path()).expect("canon");
        let home = mkdir(&root.join("home"));
        let p = root.join("proj");
        new_repo(&p, "main");
        mkdir(&p.join("src"));
        mkdir(&p.join(".worktrees/capsules/plain"));
        // a capsule that is a clone (on main) inside the carve-out
        git(
            &root,
            &["clone", "-q", "proj", "proj/.worktrees/capsules/cap"],
        );
        make_capsule(&p.join(".worktrees/capsules/cap"), "cap");
        // a linked worktree inside the carve-out
        git(
            &p,
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                "feature",
                ".worktrees/capsules/wt",
            ],
        );
        // a linked worktree of proj placed outside it
        mkdir(&root.join("outside"));
        git(
            &p,
            &["worktree", "add", "-q", "-b", "side", "../outside/wt-side"],
        );
        mkdir(&root.join("proj2"));
        mkdir(&root.join("outside/nocap"));
        // capsules outside the project
        let cap2 = root.join("outside/cap2");
        new_repo(&cap2, "main");
        make_capsule(&cap2, "cap2");
        let marker = mkdir(&root.join("outside/marker-only"));
        write(&marker.join(".kitsoki-capsule"), "marker-only\n");
        let bad = mkdir(&root.join("outside/bad-manifest"));
        write(&bad.join(".kitsoki-capsule"), "bad\n");
        write(&bad.join("capsule-manifest.json"), "{not json");
        let noname = mkdir(&root.join("outside/no-name"));
        write(&noname.join(".kitsoki-capsule"), "x\n");
        write(
            &noname.join("capsule-manifest.json"),
            r#"{"workspace":"/x"}"#,
        );
        make_capsule(&root.join("outside/nest"), "outer");
        make_capsule(&root.join("outside/nest/inner"), "inner");
        mkdir(&root.join("outside/nest/inner/deep"));
        let mo = mkdir(&root.join("outside/nest/markeronly"));
        write(&mo.join(".kitsoki-capsule"), "x\n");
        // repositories in various HEAD states
        new_repo(&root.join("repos/feature"), "feature");
        mkdir(&root.join("repos/feature/sub"));
        new_repo(&root.join("repos/integ"), "integration/x/y");
        new_repo(&root.join("repos/integ1"), "integration/x");
        new_repo(&root.join("repos/integration-x"), "integration-x");
        new_repo(&root.join("repos/trunky"), "trunk2");
        let det = root.join("repos/detached");
        new_repo(&det, "main");
        git(&det, &["checkout", "-q", "--detach"]);
        let unborn = mkdir(&root.join("repos/unborn"));
        git(&unborn, &["init", "-q", "-b", "main"]);
        let unborn2 = mkdir(&root.join("repos/unborn-feature"));
        git(&unborn2, &["init", "-q", "-b", "wip"]);
        let bare = mkdir(&root.join("repos/bare.git"));
        git(&bare, &["init", "-q", "--bare", "-b", "main"]);
        let bare2 = mkdir(&root.join("repos/bare-feature.git"));
        git(&bare2, &["init", "-q", "--bare", "-b", "topic"]);
        git(
            &root.join("repos/feature"),
            &["worktree", "add", "-q", "-b", "master", "../wt-master"],
        );
        git(
            &root.join("repos/feature"),
            &["worktree", "add", "-q", "-b", "topic", "../wt-topic"],
        );
        // a symlink into the protected project, and a plain file
        std::os::unix::fs::symlink(root.join("proj/src"), root.join("outside/link-to-proj"))
            .expect("symlink");
        write(&root.join("outside/afile"), "x");
        World {
            _tmp: tmp,
            root,
            home,
        }
    }

    fn gate(&self, shared: &str, local: Option<&str>) -> Gate {
        let cfg_dir = self.root.join("proj");
        let shared_path = cfg_dir.join(".kitsoki.yaml");
        let local_path = cfg_dir.join(".kitsoki.local.yaml");
        write(
            &shared_path,
            &shared.replace("{root}", &self.root.display().to_string()),
        );
        match local {
            Some(l) => write(
                &local_path,
                &l.replace("{root}", &self.root.display().to_string()),
            ),
            None => {
                let _ = std::fs::remove_file(&local_path);
            }
        }
        // the asking process runs somewhere inside the project
        Gate::load_with_home(&cfg_dir.join("src"), None, Some(&self.home)).expect("load config")
    }
}

const STRICT: &str = "
other_kitsoki_setting: {keep: [1, 2]}
agent_launch_policy:
  enabled: true
  require_capsule: true
  protected_roots: [.]
  allowed_roots: [./.worktrees/capsules, '{root}/outside']
";

const NO_CAPSULE: &str = "
agent_launch_policy:
  enabled: true
  require_capsule: false
  allowed_roots: [./.worktrees/capsules, '{root}/outside', '{root}/repos', '{root}/wt-master', '{root}/wt-topic']
";

/// As NO_CAPSULE, but only `trunk` is protected (the project itself sits on `main`).
const CARVE: &str = "
agent_launch_policy:
  allowed_roots: [./.worktrees/capsules, '{root}/outside']
  protected_branches: [trunk]
";

const OPEN: &str = "
agent_launch_policy:
  require_capsule: false
";

struct Case {
    name: &'static str,
    config: &'static str,
    wd: &'static str,
    want: Option<Check>,
}

#[test]
fn the_five_checks() {
    let w = World::new();
    use Check::*;
    let cases = [
        // 1: working dir exists and is a directory
        Case {
            name: "missing dir",
            config: STRICT,
            wd: "outside/nope",
            want: Some(WorkingDir),
        },
        Case {
            name: "a file",
            config: STRICT,
            wd: "outside/afile",
            want: Some(WorkingDir),
        },
        // 2: allowed roots
        Case {
            name: "outside every allowed root",
            config: STRICT,
            wd: "proj2",
            want: Some(AllowedRoots),
        },
        Case {
            name: "allowed root outside any protected root",
            config: STRICT,
            wd: "outside/cap2",
            want: None,
        },
        // 3: protected roots
        Case {
            name: "inside protected root, no allowed roots",
            config: OPEN,
            wd: "proj/src",
            want: Some(ProtectedRoots),
        },
        Case {
            name: "protected root itself",
            config: OPEN,
            wd: "proj",
            want: Some(ProtectedRoots),
        },
        Case {
            name: "sibling with common prefix is not inside",
            config: OPEN,
            wd: "proj2",
            want: None,
        },
        Case {
            name: "git root protected, workspace carved out",
            config: CARVE,
            wd: "proj/.worktrees/capsules/plain",
            want: None,
        },
        Case {
            name: "carved out, but the checkout it belongs to is on main",
            config: NO_CAPSULE,
            wd: "proj/.worktrees/capsules/plain",
            want: Some(ProtectedBranches),
        },
        Case {
            name: "linked worktree carved out",
            config: NO_CAPSULE,
            wd: "proj/.worktrees/capsules/wt",
            want: None,
        },
        Case {
            name: "linked worktree outside, its repository protected",
            config: NO_CAPSULE,
            wd: "outside/wt-side",
            want: Some(ProtectedRoots),
        },
        Case {
            name: "symlink into protected root",
            config: OPEN,
            wd: "outside/link-to-proj",
            want: Some(ProtectedRoots),
        },
        // 4: protected branches
        Case {
            name: "feature branch",
            config: NO_CAPSULE,
            wd: "repos/feature/sub",
            want: None,
        },
        Case {
            name: "integration/x/y matches integration/*",
            config: NO_CAPSULE,
            wd: "repos/integ",
            want: Some(ProtectedBranches),
        },
        Case {
            name: "integration/x matches integration/*",
            config: NO_CAPSULE,
            wd: "repos/integ1",
            want: Some(ProtectedBranches),
        },
        Case {
            name: "integration-x does not",
            config: NO_CAPSULE,
            wd: "repos/integration-x",
            want: None,
        },
        Case {
            name: "trunk2 is not trunk",
            config: NO_CAPSULE,
            wd: "repos/trunky",
            want: None,
        },
        Case {
            name: "detached HEAD",
            config: NO_CAPSULE,
            wd: "repos/detached",
            want: None,
        },
        Case {
            name: "unborn main",
            config: NO_CAPSULE,
            wd: "repos/unborn",
            want: Some(ProtectedBranches),
        },
        Case {
            name: "unborn work branch",
            config: NO_CAPSULE,
            wd: "repos/unborn-feature",
            want: None,
        },
        Case {
            name: "bare repo, HEAD main",
            config: NO_CAPSULE,
            wd: "repos/bare.git",
            want: Some(ProtectedBranches),
        },
        Case {
            name: "bare repo, HEAD topic",
            config: NO_CAPSULE,
            wd: "repos/bare-feature.git",
            want: None,
        },
        Case {
            name: "linked worktree on master",
            config: NO_CAPSULE,
            wd: "repos/wt-master",
            want: Some(ProtectedBranches),
        },
        Case {
            name: "linked worktree on topic",
            config: NO_CAPSULE,
            wd: "repos/wt-topic",
            want: None,
        },
        Case {
            name: "capsule on main is fine",
            config: NO_CAPSULE,
            wd: "outside/cap2",
            want: None,
        },
        Case {
            name: "carved-out clone capsule on main",
            config: STRICT,
            wd: "proj/.worktrees/capsules/cap",
            want: None,
        },
        // 5: require capsule
        Case {
            name: "no capsule",
            config: STRICT,
            wd: "outside/nocap",
            want: Some(RequireCapsule),
        },
        Case {
            name: "marker without manifest",
            config: STRICT,
            wd: "outside/marker-only",
            want: Some(RequireCapsule),
        },
        Case {
            name: "manifest that does not parse",
            config: STRICT,
            wd: "outside/bad-manifest",
            want: Some(RequireCapsule),
        },
        Case {
            name: "manifest without capsule_name",
            config: STRICT,
            wd: "outside/no-name",
            want: Some(RequireCapsule),
        },
        Case {
            name: "nested capsule",
            config: STRICT,
            wd: "outside/nest/inner/deep",
            want: None,
        },
        Case {
            name: "marker inside a capsule belongs to the outer",
            config: STRICT,
            wd: "outside/nest/markeronly",
            want: None,
        },
        Case {
            name: "carved out but not a capsule",
            config: STRICT,
            wd: "proj/.worktrees/capsules/wt",
            want: Some(RequireCapsule),
        },
    ];
    let mut failures = Vec::new();
    for c in &cases {
        let gate = w.gate(c.config, None);
        assert_eq!(gate.state(), GateState::Enabled, "{}", c.name);
        let d = gate.decide("agent.launch", Some("codex"), &w.root.join(c.wd));
        if d.failed_check != c.want || d.allowed != c.want.is_none() {
            failures.push(format!(
                "{}: want {:?}, got {:?} ({})",
                c.name, c.want, d.failed_check, d.reason
            ));
        }
        assert!(!d.reason.is_empty(), "{}: empty reason", c.name);
        // an enabled gate decides the same whether or not the decision is recorded
        let u = gate.decide_unrecorded("agent.launch", Some("codex"), &w.root.join(c.wd));
        assert_eq!(
            (u.allowed, u.failed_check, &u.reason, &u.git, &u.capsule),
            (d.allowed, d.failed_check, &d.reason, &d.git, &d.capsule),
            "{}: unrecorded",
            c.name
        );
    }
    assert!(
        failures.is_empty(),
        "failed cases:\n{}",
        failures.join("\n")
    );
}

#[test]
fn decision_details() {
    let w = World::new();
    // symlink: resolved once, to the real path; the protected root is named
    let d = w
        .gate(OPEN, None)
        .decide("agent.launch", None, &w.root.join("outside/link-to-proj"));
    assert_eq!(d.failed_check, Some(Check::ProtectedRoots));
    assert_eq!(d.resolved_working_dir, Some(w.root.join("proj/src")));
    assert_eq!(d.protected_root, Some(w.root.join("proj")));
    assert!(d.working_dir_handle().is_some());

    // nested capsule: the nearest wins, with its spec path
    let gate_s = w.gate(STRICT, None);
    let d = gate_s.decide(
        "capsule.exec",
        None,
        &w.root.join("outside/nest/inner/deep"),
    );
    let c = d.capsule.expect("capsule");
    assert_eq!(c.name, "inner");
    assert_eq!(c.root, w.root.join("outside/nest/inner"));
    assert_eq!(c.spec_path.as_deref(), Some("/specs/inner/capsule.yaml"));
    assert_eq!(d.verb, "capsule.exec");

    // branch facts
    let gate = w.gate(NO_CAPSULE, None);
    let d = gate.decide("agent.launch", None, &w.root.join("repos/integ"));
    let g = d.git.clone().expect("git");
    assert_eq!(g.branch.as_deref(), Some("integration/x/y"));
    assert_eq!(g.head, Some(HeadState::Branch));
    assert_eq!(d.protected_branch.as_deref(), Some("integration/*"));
    let d = gate.decide("agent.launch", None, &w.root.join("repos/detached"));
    let g = d.git.expect("git");
    assert_eq!((g.branch, g.head), (None, Some(HeadState::Detached)));
    let d = gate.decide("agent.launch", None, &w.root.join("repos/unborn"));
    assert_eq!(d.git.expect("git").head, Some(HeadState::Unborn));
    let d = gate.decide("agent.launch", None, &w.root.join("repos/bare.git"));
    let g = d.git.expect("git");
    assert!(g.bare);
    assert_eq!(g.root, w.root.join("repos/bare.git"));

    // linked worktree: its own root, the main repository's git dir
    let d = gate.decide(
        "agent.launch",
        None,
        &w.root.join("proj/.worktrees/capsules/wt"),
    );
    let g = d.git.expect("git");
    assert!(g.linked_worktree);
    assert_eq!(g.root, w.root.join("proj/.worktrees/capsules/wt"));
    assert_eq!(g.git_dir, w.root.join("proj/.git"));
    assert_eq!(g.branch.as_deref(), Some("feature"));
    let d = gate.decide("agent.launch", None, &w.root.join("outside/wt-side"));
    assert!(d.reason.contains("git repository"), "{}", d.reason);

    // git root protected, workspace carved out: the record names both
    let d = w.gate(CARVE, None).decide(
        "agent.launch",
        None,
        &w.root.join("proj/.worktrees/capsules/plain"),
    );
    assert!(d.allowed, "{}", d.reason);
    assert_eq!(d.git.clone().expect("git").root, w.root.join("proj"));
    assert_eq!(d.protected_root, Some(w.root.join("proj")));
    assert_eq!(
        d.allowed_root,
        Some(w.root.join("proj/.worktrees/capsules"))
    );

    // the record is JSON with the effective lists
    let v: serde_json::Value = serde_json::from_str(&d.record_json()).expect("json");
    assert_eq!(v["allowed"], true);
    assert_eq!(v["policy"]["protected_branches"][0], "trunk");
    assert_eq!(
        v["policy"]["protected_roots"][0],
        w.root.join("proj").display().to_string()
    );
}

#[test]
fn allowed_root_equal_to_protected_root_carves_nothing() {
    let w = World::new();
    let gate = w.gate(
        "agent_launch_policy:\n  protected_roots: ['{root}/proj']\n  allowed_roots: ['{root}/proj', '{root}']\n",
        None,
    );
    let d = gate.decide(
        "agent.launch",
        None,
        &w.root.join("proj/.worktrees/capsules/cap"),
    );
    assert_eq!(d.failed_check, Some(Check::ProtectedRoots), "{}", d.reason);
}

#[test]
fn dotdot_and_tilde_in_configured_paths() {
    let w = World::new();
    mkdir(&w.home.join("caps"));
    let gate = w.gate(
        "agent_launch_policy:\n  protected_roots: [./src/../../proj2/.]\n  allowed_roots: [../outside/x/../nest, '~/caps', ../not-yet/../later]\n",
        None,
    );
    let p = gate.config.policy.clone().expect("policy");
    assert_eq!(p.protected_roots, vec![w.root.join("proj2")]);
    assert_eq!(
        p.allowed_roots,
        vec![
            w.root.join("outside/nest"),
            w.home.join("caps"),
            w.root.join("later")
        ]
    );
    let d = gate.decide("agent.launch", None, &w.root.join("proj2"));
    assert_eq!(d.failed_check, Some(Check::AllowedRoots));
    let d = gate.decide("agent.launch", None, &w.root.join("outside/nest/inner"));
    assert!(d.allowed, "{}", d.reason);
}

#[test]
fn defaults_when_block_is_minimal() {
    let w = World::new();
    let gate = w.gate("agent_launch_policy: {}\n", None);
    let p = gate.config.policy.clone().expect("policy");
    assert!(p.enabled);
    assert!(!p.require_capsule);
    assert_eq!(p.protected_roots, vec![w.root.join("proj")]);
    assert!(p.allowed_roots.is_empty());
    assert_eq!(
        p.protected_branches,
        ["main", "master", "trunk", "integration/*", "staging/*"]
    );
}

#[test]
fn local_overrides_shared_key_by_key() {
    let w = World::new();
    let shared = "agent_launch_policy:\n  require_capsule: true\n  allowed_roots: ['{root}/outside']\n  protected_branches: [main]\n";
    // local replaces only protected_branches and require_capsule
    let gate = w.gate(shared, Some("agent_launch_policy:\n  protected_branches: [topic]\n  require_capsule: false\nother: 1\n"));
    let p = gate.config.policy.clone().expect("policy");
    assert_eq!(p.protected_branches, ["topic"]);
    assert!(!p.require_capsule);
    assert_eq!(p.allowed_roots, vec![w.root.join("outside")]);
    assert_eq!(gate.config.files.len(), 2);
    let d = gate.decide("agent.launch", None, &w.root.join("outside/nocap"));
    assert!(d.allowed, "{}", d.reason);
    // local turns the gate off
    let gate = w.gate(shared, Some("agent_launch_policy:\n  enabled: false\n"));
    assert_eq!(gate.state(), GateState::Disabled);
    let d = gate.decide("agent.launch", None, &w.root.join("proj"));
    assert!(d.allowed);
    assert!(d.reason.contains("disabled"), "{}", d.reason);
    // a local file alone is enough
    let gate = w.gate(
        "# nothing here\n",
        Some("agent_launch_policy:\n  allowed_roots: ['{root}/outside']\n"),
    );
    let d = gate.decide("agent.launch", None, &w.root.join("proj2"));
    assert_eq!(d.failed_check, Some(Check::AllowedRoots));
}

#[test]
fn no_config_means_gate_off() {
    let tmp = scratch();
    let dir = mkdir(&tmp.path().join("a/b"));
    let gate = Gate::load_with_home(&dir, None, None).expect("load");
    assert_eq!(gate.state(), GateState::Off);
    let d = gate.decide("agent.launch", None, &dir);
    assert!(d.allowed);
    assert!(d.reason.contains("off"), "{}", d.reason);
    assert_eq!(d.gate, GateState::Off);
    assert!(d.resolved_working_dir.is_some());
    // unrecorded, an off gate allows without gathering the facts
    let u = gate.decide_unrecorded("agent.launch", None, &dir);
    assert!(u.allowed);
    assert_eq!(u.reason, d.reason);
    assert_eq!(u.gate, GateState::Off);
    assert!(u.resolved_working_dir.is_none() && u.git.is_none() && u.capsule.is_none());
    // a file without the block: also off
    write(
        &tmp.path().join("a/.kitsoki.yaml"),
        "models: {default: x}\n",
    );
    let gate = Gate::load_with_home(&dir, None, None).expect("load");
    assert_eq!(gate.state(), GateState::Off);
    assert_eq!(gate.config.files.len(), 1);
}

#[test]
fn config_inside_a_capsule_is_skipped_during_discovery() {
    let tmp = scratch();
    let root = std::fs::canonicalize(tmp.path()).expect("canon");
    write(
        &root.join(".kitsoki.yaml"),
        "agent_launch_policy:\n  require_capsule: true\n",
    );
    make_capsule(&root.join("cap"), "cap");
    // the agent rewrote the capsule's copy to switch the gate off
    write(
        &root.join("cap/.kitsoki.yaml"),
        "agent_launch_policy:\n  enabled: false\n",
    );
    let gate = Gate::load_with_home(&root.join("cap"), None, None).expect("load");
    assert_eq!(gate.state(), GateState::Enabled);
    assert_eq!(gate.config.files, vec![root.join(".kitsoki.yaml")]);
    assert_eq!(gate.config.ignored, vec![root.join("cap/.kitsoki.yaml")]);
}

#[test]
fn explicit_config_file() {
    let tmp = scratch();
    let root = std::fs::canonicalize(tmp.path()).expect("canon");
    write(
        &root.join("etc/policy.yaml"),
        "agent_launch_policy:\n  protected_roots: [../proj]\n",
    );
    mkdir(&root.join("proj"));
    let gate = Gate::load_with_home(&root, Some(Path::new("etc/policy.yaml")), None).expect("load");
    let p = gate.config.policy.clone().expect("policy");
    assert_eq!(p.protected_roots, vec![root.join("proj")]);
    // .kitsoki.yaml named explicitly picks up its local sibling
    write(
        &root.join("x/.kitsoki.yaml"),
        "agent_launch_policy:\n  enabled: true\n",
    );
    write(
        &root.join("x/.kitsoki.local.yaml"),
        "agent_launch_policy:\n  enabled: false\n",
    );
    let gate = Gate::load_with_home(Path::new("/"), Some(&root.join("x/.kitsoki.yaml")), None)
        .expect("load");
    assert_eq!(gate.state(), GateState::Disabled);
    let err = Gate::load_with_home(&root, Some(Path::new("missing.yaml")), None).unwrap_err();
    assert!(
        err.to_string().contains("missing.yaml: cannot read"),
        "{err}"
    );
}

#[test]
fn bad_files_report_file_line_column() {
    let tmp = scratch();
    let root = std::fs::canonicalize(tmp.path()).expect("canon");
    let f = root.join(".kitsoki.yaml");
    let shown = f.display().to_string();
    let cases: &[(&str, &str, &str)] = &[
        (
            "misspelt key",
            "other: 1\nagent_launch_policy:\n  enabled: true\n  protected_root: [.]\n",
            ":4:3: unknown field `protected_root`",
        ),
        (
            "malformed yaml",
            "agent_launch_policy:\n  enabled: true\n  x: [1, 2\n",
            ":3:",
        ),
        ("bad tab indentation elsewhere", "a:\n\t- b\n", ":2:"),
        (
            "wrong type",
            "agent_launch_policy:\n  protected_roots: .\n",
            ":2:20:",
        ),
        (
            "duplicate key",
            "agent_launch_policy:\n  enabled: true\n  enabled: false\n",
            ":3:3:",
        ),
        (
            "null entry",
            "agent_launch_policy:\n  allowed_roots:\n    - ~\n",
            ":3:7: empty entry",
        ),
        (
            "tilde user",
            "agent_launch_policy:\n  allowed_roots: ['~bob/x']\n",
            ":2:19:",
        ),
        (
            "empty branch",
            "agent_launch_policy:\n  protected_branches: ['']\n",
            ":2:24: empty branch",
        ),
    ];
    let mut failures = Vec::new();
    for (name, text, want) in cases {
        write(&f, text);
        match Gate::load_with_home(&root, None, None) {
            Ok(_) => failures.push(format!("{name}: loaded")),
            Err(e) => {
                let msg = e.to_string();
                if !msg.starts_with(&shown) || !msg.contains(want) || msg.contains('\n') {
                    failures.push(format!("{name}: {msg:?} lacks {want:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // the same misspelling in the local file names the local file
    write(&f, "agent_launch_policy:\n  enabled: true\n");
    let local = root.join(".kitsoki.local.yaml");
    write(&local, "agent_launch_policy:\n  alowed_roots: []\n");
    let e = Gate::load_with_home(&root, None, None)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with(&format!("{}:2:3:", local.display())), "{e}");
}

#[test]
fn delegation_is_parsed_and_resolved() {
    let tmp = scratch();
    let root = std::fs::canonicalize(tmp.path()).expect("canon");
    write(
        &root.join(".kitsoki.yaml"),
        "agent_user_delegation:\n  enabled: true\n  run_as_user: agent\n  wrapper_bin: ./bin/wrap\n  capsule_root: ~/caps\n",
    );
    let gate = Gate::load_with_home(&root, None, Some(Path::new("/home/op"))).expect("load");
    let d = gate.config.delegation.clone().expect("delegation");
    assert_eq!(d.enabled, Some(true));
    assert_eq!(d.run_as_user.as_deref(), Some("agent"));
    assert_eq!(d.wrapper_bin, Some(root.join("bin/wrap")));
    assert_eq!(d.capsule_root, Some(PathBuf::from("/home/op/caps")));
    assert_eq!(gate.state(), GateState::Off);
}

#[test]
fn records_hold_no_secrets() {
    let w = World::new();
    let secret_env = "sk-envsecret-4f1d2c9a";
    let secret_git = "ghp_gitsecret_93be1a";
    let secret_file = "filesecret-7d0e55";
    std::env::set_var("CAPSULE_POLICY_TEST_TOKEN", secret_env);
    let repo = w.root.join("repos/feature");
    git(
        &repo,
        &[
            "remote",
            "add",
            "origin",
            &format!("https://user:{secret_git}@example.invalid/r.git"),
        ],
    );
    write(&repo.join(".env"), &format!("TOKEN={secret_file}\n"));
    write(
        &w.root.join("outside/cap2/.env"),
        &format!("TOKEN={secret_file}\n"),
    );
    let gate = w.gate(NO_CAPSULE, None);
    let tmp = scratch();
    let trace = tmp.path().join("trace.jsonl");
    for wd in ["repos/feature", "outside/cap2", "proj", "repos/integ"] {
        let d = gate.decide("agent.launch", Some("codex"), &w.root.join(wd));
        capsule_policy::append_trace(&trace, &d).expect("trace");
        let rec = d.record_json();
        for s in [secret_env, secret_git, secret_file] {
            assert!(!rec.contains(s), "secret {s} in record {rec}");
        }
    }
    let text = std::fs::read_to_string(&trace).expect("trace");
    assert_eq!(text.lines().count(), 4);
    for s in [secret_env, secret_git, secret_file] {
        assert!(!text.contains(s), "secret {s} in trace");
    }
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json line");
        assert_eq!(v["event"], "agent.launch.policy");
        assert!(v["time"].as_str().expect("time").ends_with('Z'));
        assert!(v["allowed"].is_boolean());
    }
}

#[test]
fn fsmonitor_and_hooks_never_run() {
    let w = World::new();
    let repo = w.root.join("repos/feature");
    let marker = w.root.join("fsmonitor-ran");
    let hook = w.root.join("fsmonitor.sh");
    write(
        &hook,
        &format!("#!/bin/sh\necho ran >> {}\nexit 1\n", marker.display()),
    );
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    git(
        &repo,
        &["config", "core.fsmonitor", &hook.display().to_string()],
    );
    // also a post-checkout-ish hook dir and a filter, in case anything would run them
    git(
        &repo,
        &["config", "core.hooksPath", &w.root.display().to_string()],
    );
    git(
        &repo,
        &["config", "filter.x.process", &hook.display().to_string()],
    );
    for config in [NO_CAPSULE, STRICT, OPEN] {
        let gate = w.gate(config, None);
        let d = gate.decide("agent.launch", None, &repo.join("sub"));
        assert_eq!(d.git.expect("git").branch.as_deref(), Some("feature"));
    }
    assert!(!marker.exists(), "the gate ran core.fsmonitor");
    // the fixture can fail: git itself does run it
    let _ = Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(&repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git status");
    assert!(
        marker.exists(),
        "fixture broken: git status did not run the fsmonitor hook"
    );
}
