//! One resolved plan, three renderings that must agree: for the same capsule, the plan
//! `capsule inspect --json` shows, its OCI `config.json` (`config_now`), the Seatbelt
//! profile `capsule seatbelt` prints (judged by `capsule-seatbelt`'s evaluator) and the
//! Linux executor itself (`capsule exec`, probed from inside) give every path of the plan
//! the same access: hidden (not readable, not writable), read-only, or read-write. The
//! capsule has the default hidden paths, a hidden folder with a revealed carve-out, a
//! sibling project made after open (hidden by the resolution of now), an extra writable
//! folder, the workspace and its read-only manifest and sentinel; network none and open.

use capsule_bundle::policy::{
    Access, HiddenPath, HiddenReason, NetworkMode, NetworkPolicy, SandboxPolicy,
};
use capsule_e2e::sandbox::{self, Capsule};
use capsule_e2e::{assert_ok, runners, stderr, stdout};
use capsule_seatbelt::{Evaluator, Target};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const NONCE: &str = "capsule-0123456789abcdef";
/// The content of the probe file planted in every folder of the plan.
const MARK: &str = "render-probe";

/// A capsule with a hidden folder `vault` (a carve-out `vault/public` revealed), an extra
/// writable folder `out`, a source checkout `projects/app` (a sibling project appears
/// after open) and the network `mode`.
fn fixture(r: &capsule_e2e::Runner, mode: NetworkMode) -> Capsule {
    let c = Capsule::with(r, |p| {
        let home = p.home.clone().expect("fixture has a home");
        for d in ["vault/public", "out", "projects/app"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::write(home.join("vault/key.txt"), "VAULT-SECRET").unwrap();
        p.hidden.push(HiddenPath {
            path: home.join("vault"),
            reason: HiddenReason::Requested,
        });
        p.revealed.push(home.join("vault/public"));
        p.writable.push(home.join("out"));
        p.network = NetworkPolicy {
            mode,
            ..Default::default()
        };
    });
    // opened from a checkout: its sibling projects are hidden, those made later too
    let record = c.bundle.join("bundle.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    v["source"] = Value::from(c.home.join("projects/app").to_str().unwrap());
    std::fs::write(&record, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    std::fs::create_dir_all(c.home.join("projects/other")).unwrap();
    std::fs::write(c.home.join("projects/other/notes"), "OTHER-PROJECT").unwrap();
    c.runner.own(c.dir.path());
    c
}

/// `path` is `root` or below it.
fn within(path: &Path, root: &Path) -> bool {
    path.starts_with(root)
}

fn strs(v: &Value) -> Vec<PathBuf> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default()
}

/// What a file or folder `q` is under `config.json`'s mounts, in order, then
/// `maskedPaths` and `readonlyPaths` (as runc and crun apply them).
fn oci_access(config: &Value, q: &Path) -> Access {
    let linux = &config["linux"];
    if strs(&linux["maskedPaths"]).iter().any(|m| within(q, m)) {
        return Access::Hidden;
    }
    let mounts = config["mounts"].as_array().expect("mounts");
    let Some(m) = mounts
        .iter()
        .rev()
        .find(|m| within(q, Path::new(m["destination"].as_str().unwrap_or("-"))))
    else {
        // nothing mounted there: the empty root
        return Access::Hidden;
    };
    let dst = Path::new(m["destination"].as_str().unwrap());
    let src = Path::new(m["source"].as_str().unwrap_or(""));
    let opts: Vec<&str> = m["options"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    let is_bind = opts.iter().any(|o| *o == "bind" || *o == "rbind");
    let rel = q.strip_prefix(dst).unwrap();
    // the host path itself shows only through a bind of the same path, or an overlay
    // with the same path as a lower layer (writes go to its upper layer)
    let lower = |o: &&str| {
        o.strip_prefix("lowerdir=")
            .is_some_and(|l| l.split(':').any(|l| Path::new(l).join(rel) == q))
    };
    let shown = if m["type"] == "overlay" {
        opts.iter().any(lower)
    } else {
        is_bind && src.join(rel) == q
    };
    if !shown {
        return Access::Hidden;
    }
    // a read-only path makes the one mount there read-only, not those mounted below it
    let ro = opts.iter().any(|o| *o == "ro" || *o == "rro")
        || strs(&linux["readonlyPaths"])
            .iter()
            .any(|r| within(q, r) && within(r, dst));
    if ro {
        Access::ReadOnly
    } else {
        Access::ReadWrite
    }
}

/// What the Seatbelt evaluator decides for `q` (read data; write: create in a folder,
/// write a file's data).
fn seatbelt_access(ev: &Evaluator<'_>, q: &Path, dir: bool) -> Access {
    let read_target = if dir {
        q.join(".render-probe")
    } else {
        q.to_path_buf()
    };
    let read = ev
        .decide("file-read-data", &Target::path(&read_target))
        .allow;
    let write = if dir {
        ev.decide("file-write-create", &Target::path(q.join(".render-w")))
            .allow
    } else {
        ev.decide("file-write-data", &Target::path(q)).allow
    };
    match (read, write) {
        (false, false) => Access::Hidden,
        (true, false) => Access::ReadOnly,
        (true, true) => Access::ReadWrite,
        (false, true) => panic!("{}: writable but not readable in the profile", q.display()),
    }
}

fn q(p: &Path) -> String {
    let s = p.to_str().unwrap();
    assert!(!s.contains('\''), "{s}");
    format!("'{s}'")
}

/// One line per probe path: `R <path>` when its content is readable inside the sandbox,
/// `W <path>` when a write there succeeds.
fn executor_script(paths: &[(PathBuf, bool)]) -> String {
    let mut s = String::new();
    for (p, dir) in paths {
        let (qp, probe) = (q(p), q(&p.join(".render-probe")));
        if *dir {
            s += &format!(
                "[ \"$(cat {probe} 2>/dev/null)\" = {MARK} ] && echo \"R {p}\"\n\
                 touch {w} 2>/dev/null && echo \"W {p}\"\n",
                p = p.display(),
                w = q(&p.join(".render-w")),
            );
        } else {
            s += &format!(
                "[ -s {qp} ] && echo \"R {p}\"\n( : >> {qp} ) 2>/dev/null && echo \"W {p}\"\n",
                p = p.display()
            );
        }
    }
    s
}

fn executor_access(out: &str, p: &Path) -> Access {
    let has = |k: &str| out.lines().any(|l| l == format!("{k} {}", p.display()));
    match (has("R"), has("W")) {
        (false, false) => Access::Hidden,
        (true, false) => Access::ReadOnly,
        (true, true) => Access::ReadWrite,
        (false, true) => panic!("{}: writable but not readable in the sandbox", p.display()),
    }
}

fn json_of(c: &Capsule, args: &[&str]) -> Value {
    let o = c.capsule().args(args).output().unwrap();
    assert_ok(&o, &args.join(" "));
    serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn every_path_of_the_plan_has_the_same_access_in_every_rendering() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        for mode in [NetworkMode::None, NetworkMode::Open] {
            check(&r, mode);
        }
    }
}

fn check(r: &capsule_e2e::Runner, mode: NetworkMode) {
    let c = fixture(r, mode);
    let inspect = json_of(&c, &["inspect", sandbox::NAME, "--json"]);
    let plan = &inspect["plan"];
    assert!(plan.is_object(), "no plan: {}", inspect["plan_error"]);
    let config = &inspect["config_now"];
    let ll = &plan["landlock"];
    // the plan's own decision, path by path (deeper rules win, as the mounts are built)
    let decided = SandboxPolicy {
        version: 1,
        capsule_name: sandbox::NAME.into(),
        workspace: PathBuf::from(ll["workspace"].as_str().expect("plan names its workspace")),
        read_only: strs(&ll["read_only"]),
        tmp_dir: "/tmp".into(),
        home: None,
        home_layer: None,
        cache_dir: None,
        writable: strs(&ll["writable"]),
        hidden: strs(&ll["hidden"])
            .into_iter()
            .map(|path| HiddenPath {
                path,
                reason: HiddenReason::Requested,
            })
            .collect(),
        revealed: strs(&ll["revealed"]),
        pass_env: vec![],
        devices: vec![],
        network: NetworkPolicy::default(),
    };
    let sibling = c.home.join("projects/other");
    assert!(
        decided.hidden.iter().any(|h| h.path == sibling),
        "the plan hides the project made after open: {ll}"
    );

    // and inspect says so in words
    let words: Vec<&str> = inspect["policy_in_words"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    assert!(
        words
            .iter()
            .any(|w| w.starts_with(&format!("hidden: {} (", sibling.display()))),
        "{words:?}"
    );

    // every path of the plan that exists on the host, a probe file planted in folders
    let mut paths: Vec<(PathBuf, bool)> = Vec::new();
    let listed = decided
        .hidden
        .iter()
        .map(|h| h.path.clone())
        .chain(decided.revealed.iter().cloned())
        .chain(decided.writable.iter().cloned())
        .chain(decided.read_only.iter().cloned())
        .chain([decided.workspace.clone()]);
    // a folder the plan overlays (the home layer) is written copy-on-write, into the
    // layer: each backend has its own way (on macOS HOME is the layer itself); checked
    // below: the real one is never written
    let overlaid: Vec<PathBuf> = plan["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["kind"] == "overlay" || m["kind"] == "home_view")
        .filter_map(|m| m["dst"].as_str().map(PathBuf::from))
        .collect();
    for p in listed {
        if overlaid.contains(&p) {
            continue;
        }
        let Ok(md) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if paths.iter().any(|(x, _)| *x == p) || md.file_type().is_symlink() {
            continue;
        }
        if md.is_dir() {
            std::fs::write(p.join(".render-probe"), MARK).unwrap();
        } else if md.len() == 0 {
            continue;
        }
        paths.push((p, md.is_dir()));
    }
    c.runner.own(c.dir.path());
    let kinds: Vec<Access> = paths.iter().map(|(p, _)| decided.access(p)).collect();
    for want in [Access::Hidden, Access::ReadOnly, Access::ReadWrite] {
        assert!(kinds.contains(&want), "no {want:?} path among {paths:?}");
    }

    // the Seatbelt profile of the same capsule
    let sb = json_of(&c, &["seatbelt", sandbox::NAME, "--json", "--nonce", NONCE]);
    let profile = capsule_seatbelt::parse::parse(sb["profile"].as_str().unwrap()).unwrap();
    let params: BTreeMap<String, String> = serde_json::from_value(sb["params"].clone()).unwrap();
    let ev = Evaluator::new(&profile, &params).unwrap();

    // the executor, probed from inside; and the network: the host's loopback
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    let script = format!(
        "{}(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo HOST-NET\necho PROBE-END\n",
        executor_script(&paths)
    );
    let o = c.exec(&["bash", "-c", &script]);
    let out = stdout(&o);
    assert!(out.contains("PROBE-END"), "{out}\n{}", stderr(&o));

    // what inspect showed is what ran: the record names the same plan
    let recs = c.records();
    let ran = &recs.last().expect("an exec record")["applied"]["plan_digest"];
    assert!(
        plan["digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:")),
        "{}",
        plan["digest"]
    );
    assert_eq!(*ran, plan["digest"], "the exec record's plan digest");
    let text = c
        .capsule()
        .args(["inspect", sandbox::NAME])
        .output()
        .unwrap();
    assert!(
        stdout(&text).contains(&format!("plan digest {}", plan["digest"].as_str().unwrap())),
        "{}",
        stdout(&text)
    );

    let mut wrong = Vec::new();
    for ((p, dir), want) in paths.iter().zip(&kinds) {
        let got = [
            ("config.json", oci_access(config, p)),
            ("seatbelt", seatbelt_access(&ev, p, *dir)),
            ("executor", executor_access(&out, p)),
        ];
        for (what, a) in got {
            if a != *want {
                wrong.push(format!("{}: plan {want:?}, {what} {a:?}", p.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "renderings disagree with the plan ({mode:?}, {}):\n{}\nexecutor said:\n{out}",
        r.label(),
        wrong.join("\n")
    );

    // network: its own namespace in the plan and config.json, the host unreachable from
    // the executor and any remote host refused by the profile, all or none of them
    let isolated = mode != NetworkMode::Open;
    assert_eq!(plan["namespaces"]["network"], Value::from(isolated));
    let netns = config["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["type"] == "network");
    assert_eq!(netns, isolated, "config.json network namespace ({mode:?})");
    // a documentation address (TEST-NET-3), only ever given to the Seatbelt evaluator (a
    // pure model of the profile): nothing connects to it
    let remote = Target::Remote {
        host: "203.0.113.7".into(),
        port: 443,
    };
    assert_eq!(
        ev.decide("network-outbound", &remote).allow,
        !isolated,
        "seatbelt remote host ({mode:?})"
    );
    assert_eq!(
        out.contains("HOST-NET"),
        !isolated,
        "executor reaching the host ({mode:?}): {out}"
    );
    drop(host);
    for o in &overlaid {
        assert!(
            !o.join(".render-w").exists(),
            "{}: a write reached the real folder under the overlay",
            o.display()
        );
    }
}
