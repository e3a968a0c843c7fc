//! Property tests of the configuration loader: any text given as `.kitsoki.yaml` is parsed
//! (and merged) without a panic, and a refusal is one line; generated shared and local
//! files (each key present or not, root entries relative, absolute, `~`, `..`, empty or
//! null) load to exactly the effective policy a reference model of the documented merge
//! gives (the later file wins key by key, defaults when absent, only the entries in
//! effect are checked), and the gate's decision on generated working directories equals
//! the reference model of checks 2, 3 and 5. Cases per run: `PROPTEST_CASES` (defaults
//! below; `hack/fuzz.sh` runs more).

use super::*;
use crate::Gate;
use proptest::prelude::*;

/// `PROPTEST_CASES` when set, else `cases`.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

/// Pieces of a configuration file, so that arbitrary joins reach into every key.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "agent_launch_policy:\n",
            "agent_user_delegation:\n",
            "  enabled: true\n",
            "  enabled: ",
            "  require_capsule: ",
            "  protected_roots: [",
            "  allowed_roots:\n    - ",
            "  protected_branches: [",
            "  wrapper_bin: ",
            "  capsule_root: ",
            "  run_as_user: ",
            "  bogus: 1\n",
            "\"x\\ny\": 1\n",
            "~",
            "'~'",
            "~/a",
            "~bob",
            "..",
            "/",
            "\"\\0\"",
            "\"\"",
            "null",
            "&a ",
            "*a",
            "? ",
            "- ",
            "[",
            "]",
            "{",
            "}",
            ", ",
            ": ",
            "\n",
            "  ",
            "\t",
            "\"",
            "'",
            "#",
            "---\n",
        ])
        .prop_map(str::to_string),
        "\\PC{0,6}",
    ]
}

/// A root entry as written (YAML), relative to the config's folder `proj`.
const ROOTS: &[&str] = &[
    "\"a\"",
    "\"a/b\"",
    "\"b\"",
    "\".\"",
    "\"a/../b\"",
    "\"./a/\"",
    "\"..\"",
    "\"../other\"",
    "\"c/d\"",
    "'~'",
    "\"~/h\"",
    "\"~bob\"",
    "\"\"",
    "~",
    "null",
    "ABS/a",
    "ABS/a/../other",
];

/// Branch patterns as written.
const BRANCHES: &[&str] = &["main", "release/*", "\"\"", "x"];

/// One generated `agent_launch_policy` block (`None` keys are left out).
#[derive(Debug, Clone)]
struct Block {
    enabled: Option<bool>,
    require: Option<bool>,
    protected: Option<Vec<&'static str>>,
    allowed: Option<Vec<&'static str>>,
    branches: Option<Vec<&'static str>>,
}

fn block() -> impl Strategy<Value = Block> {
    let roots = || prop::option::of(prop::collection::vec(prop::sample::select(ROOTS), 0..3));
    (
        prop::option::of(any::<bool>()),
        prop::option::weighted(0.2, any::<bool>()),
        roots(),
        roots(),
        prop::option::weighted(
            0.3,
            prop::collection::vec(prop::sample::select(BRANCHES), 0..3),
        ),
    )
        .prop_map(|(enabled, require, protected, allowed, branches)| Block {
            enabled,
            require,
            protected,
            allowed,
            branches,
        })
}

/// One file: absent, or present with or without a block (and other keys, ignored).
fn layer() -> impl Strategy<Value = Option<Option<Block>>> {
    prop::option::of(prop::option::weighted(0.85, block()))
}

fn render(b: &Option<Block>, abs: &Path) -> String {
    let mut s = String::from("other_tool: {x: 1}\n");
    let Some(b) = b else { return s };
    s.push_str("agent_launch_policy:\n");
    let list = |v: &[&str]| {
        let items: Vec<String> = v
            .iter()
            .map(|e| e.replace("ABS", &abs.display().to_string()))
            .collect();
        format!("[{}]", items.join(", "))
    };
    if let Some(e) = b.enabled {
        s.push_str(&format!("  enabled: {e}\n"));
    }
    if let Some(r) = b.require {
        s.push_str(&format!("  require_capsule: {r}\n"));
    }
    for (k, v) in [
        ("protected_roots", &b.protected),
        ("allowed_roots", &b.allowed),
        ("protected_branches", &b.branches),
    ] {
        if let Some(v) = v {
            s.push_str(&format!("  {k}: {}\n", list(v)));
        }
    }
    s
}

/// Reference model of one root entry: `None` when refused (empty, null, `~user`).
fn model_root(e: &str, proj: &Path, home: &Path) -> Option<PathBuf> {
    let raw = e.trim_matches(|c| c == '"' || c == '\'');
    if e == "~" || e == "null" || raw.is_empty() || raw.starts_with("~b") {
        return None;
    }
    let joined = if let Some(rest) = raw.strip_prefix('~') {
        home.join(rest.trim_start_matches('/'))
    } else if raw == "ABS/a" || raw == "ABS/a/../other" {
        proj.parent()?.join(&raw[4..])
    } else {
        proj.join(raw)
    };
    // the tree has no symlinks: canonical is lexical
    Some(paths::normalize_lexically(&joined))
}

/// What the model says the loaded policy is (`Err(())`: the load is refused).
fn model(
    layers: &[Option<Block>],
    proj: &Path,
    home: &Path,
) -> Result<Option<EffectivePolicy>, ()> {
    let blocks: Vec<&Block> = layers.iter().flatten().collect();
    if blocks.is_empty() {
        return Ok(None);
    }
    let last =
        |f: &dyn Fn(&Block) -> Option<Vec<&'static str>>| blocks.iter().rev().find_map(|b| f(b));
    let roots = |v: Option<Vec<&str>>, default: Vec<PathBuf>| -> Result<Vec<PathBuf>, ()> {
        match v {
            None => Ok(default),
            Some(v) => v
                .iter()
                .map(|e| model_root(e, proj, home).ok_or(()))
                .collect(),
        }
    };
    let protected = roots(last(&|b| b.protected.clone()), vec![proj.to_path_buf()])?;
    let allowed = roots(last(&|b| b.allowed.clone()), Vec::new())?;
    let branches = match last(&|b| b.branches.clone()) {
        None => DEFAULT_PROTECTED_BRANCHES
            .iter()
            .map(|s| s.to_string())
            .collect(),
        Some(v) if v.contains(&"\"\"") => return Err(()),
        Some(v) => v.iter().map(|s| s.to_string()).collect(),
    };
    Ok(Some(EffectivePolicy {
        enabled: blocks.iter().rev().find_map(|b| b.enabled).unwrap_or(true),
        require_capsule: blocks.iter().rev().find_map(|b| b.require).unwrap_or(false),
        protected_roots: protected,
        allowed_roots: allowed,
        protected_branches: branches,
    }))
}

/// Reference model of the decision in a tree without git or capsules: checks 2, 3 and 5.
fn model_allows(p: &Option<EffectivePolicy>, wd: &Path) -> bool {
    let Some(p) = p.as_ref().filter(|p| p.enabled) else {
        return true;
    };
    let inside_allowed = p.allowed_roots.iter().any(|a| wd.starts_with(a));
    if !p.allowed_roots.is_empty() && !inside_allowed {
        return false;
    }
    for r in &p.protected_roots {
        let carved = p
            .allowed_roots
            .iter()
            .any(|a| wd.starts_with(a) && a.starts_with(r) && a != r);
        if wd.starts_with(r) && !carved {
            return false;
        }
    }
    !p.require_capsule
}

/// The fixture tree: `<tmp>/proj/{a/b,b,c/d}`, `<tmp>/other`, `<tmp>/home/h`.
struct Tree {
    _dir: tempfile::TempDir,
    top: PathBuf,
    proj: PathBuf,
    home: PathBuf,
}

fn tree() -> Tree {
    let dir = tempfile::tempdir_in("/dev/shm").expect("a scratch folder on /dev/shm");
    let top = std::fs::canonicalize(dir.path()).expect("canonical scratch folder");
    for d in ["proj/a/b", "proj/b", "proj/c/d", "other", "home/h"] {
        std::fs::create_dir_all(top.join(d)).expect("fixture folder");
    }
    Tree {
        proj: top.join("proj"),
        home: top.join("home"),
        top,
        _dir: dir,
    }
}

const WORKING_DIRS: &[&str] = &[
    "proj", "proj/a", "proj/a/b", "proj/b", "proj/c/d", "other", "home/h",
];

/// Found by `loaded_policy_and_decision_equal_the_reference_model`: a block whose key was
/// written with nothing under it (YAML null) turned the gate off instead of applying the
/// block's defaults, unlike `agent_launch_policy: {}`.
#[test]
fn regression_an_empty_block_applies_its_defaults() {
    let t = tree();
    let text = "agent_launch_policy:\n  # enabled: false\nagent_user_delegation:\n";
    std::fs::write(t.proj.join(SHARED_FILE), text).unwrap();
    let cfg = load(&t.proj, None, Some(&t.home)).unwrap();
    let p = cfg.policy.clone().expect("the block is present");
    assert!(p.enabled);
    assert_eq!(p.protected_roots, vec![t.proj.clone()]);
    assert_eq!(cfg.delegation, Some(Delegation::default()));
    let gate = Gate {
        config: cfg,
        searched_from: t.proj.clone(),
    };
    assert!(!gate.decide("agent.launch", None, &t.proj).allowed);
}

proptest! {
    #![proptest_config(config(800))]

    #[test]
    fn parsing_any_text_never_panics(
        pieces in prop::collection::vec(fragment(), 0..24),
        raw in "\\PC{0,64}",
    ) {
        let home = Path::new("/home/u");
        for text in [pieces.concat(), raw] {
            let path = Path::new("/cfg/.kitsoki.yaml");
            let merged = parse(path, &text).and_then(|raw| {
                let layer = Layer { path: path.to_path_buf(), dir: PathBuf::from("/cfg"), raw };
                merge(vec![layer], Some(home))
            });
            if let Err(e) = merged {
                let e = e.to_string();
                prop_assert!(!e.contains('\n') && !e.contains('\r'), "a multi-line error: {:?}", e);
            }
        }
    }
}

proptest! {
    #![proptest_config(config(1200))]

    #[test]
    fn loaded_policy_and_decision_equal_the_reference_model(
        shared in layer(),
        local in layer(),
        wd in prop::sample::select(WORKING_DIRS),
    ) {
        let t = tree();
        let abs = &t.top;
        let mut present = Vec::new();
        for (name, l) in [(SHARED_FILE, &shared), (LOCAL_FILE, &local)] {
            if let Some(b) = l {
                std::fs::write(t.proj.join(name), render(b, abs)).map_err(|e| TestCaseError::fail(e.to_string()))?;
                present.push(b.clone());
            }
        }
        let want = model(&present, &t.proj, &t.home);
        let got = load(&t.proj, None, Some(&t.home));
        match (&want, &got) {
            (Err(()), Err(e)) => {
                prop_assert!(!e.to_string().contains('\n'), "a multi-line error: {}", e);
                return Ok(());
            }
            (Ok(w), Ok(g)) => prop_assert_eq!(w, &g.policy),
            _ => prop_assert!(false, "model {:?}, loader {:?}", want, got.map(|g| g.policy)),
        }
        let (Ok(want), Ok(config)) = (want, got) else { return Ok(()) };
        let wd = t.top.join(wd);
        let gate = Gate { config, searched_from: t.proj.clone() };
        let d = gate.decide("agent.launch", None, &wd);
        prop_assert_eq!(d.allowed, model_allows(&want, &wd), "{}: {}", wd.display(), d.reason);
    }
}
