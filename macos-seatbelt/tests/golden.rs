//! Golden files of the profile text per network mode (`tests/golden/<mode>.sb` and
//! `<mode>.params`), and golden decision tables evaluated on the parsed text.
//!
//! When the generator changes on purpose: `UPDATE_GOLDEN=1 cargo test -p capsule-seatbelt
//! --test golden`, then have a person review the diff of `tests/golden/`.

mod common;
use capsule_bundle::policy::NetworkMode;
use capsule_seatbelt::{generate_checked, parse, Evaluator, ModelResolver, Target};
use common::*;
use std::path::Path;

#[test]
fn profile_text_matches_golden_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for &mode in MODES {
        let p = policy(mode);
        let g = generate_checked(&inputs(&p), &ModelResolver::macos()).unwrap();
        let params: String = g.params.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        for (ext, text) in [("sb", &g.text), ("params", &params)] {
            let file = dir.join(format!("{}.{ext}", mode.as_str()));
            if update {
                std::fs::write(&file, text).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&file).unwrap_or_default();
            if &want != text {
                stale.push(file.display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "profile text changed: {stale:?}; review and run with UPDATE_GOLDEN=1 to accept"
    );
}

/// (operation, target, expected allow) for every mode.
fn common_cases() -> Vec<(&'static str, Target, bool)> {
    let p = |s: &str| Target::path(s);
    let ws = |rel: &str| Target::path(format!("{WS}/{rel}"));
    let bundle = |rel: &str| Target::path(format!("{BUNDLE}/{rel}"));
    vec![
        ("file-read-data", p("/Users/u/.ssh/id_rsa"), false),
        ("file-read-metadata", p("/Users/u/.ssh"), false),
        // the home is default deny: a name on no list is hidden, listed tool config is not
        ("file-read-data", p("/Users/u/.sshx"), false),
        ("file-read-data", p("/Users/u/.bash_history"), false),
        (
            "file-read-data",
            p("/Users/u/.config/rclone/rclone.conf"),
            false,
        ),
        (
            "file-read-data",
            p("/Users/u/.pulumi/credentials.json"),
            false,
        ),
        (
            "file-read-data",
            p("/Users/u/.cache/huggingface/token"),
            false,
        ),
        (
            "file-read-data",
            p("/Users/u/src/later-project/.env"),
            false,
        ),
        ("file-read-data", p("/Users/u/.gitconfig"), true),
        ("file-read-data", p("/Users/u/.config/git/config"), true),
        ("file-read-data", p("/Users/u/.zshrc"), true),
        ("file-write-data", p("/Users/u/.zshrc"), false),
        (
            "file-read-data",
            p("/Users/u/.rustup/toolchains/x/bin/rustc"),
            true,
        ),
        // listed, but its credentials stay hidden; and a listed folder the spec hid too
        (
            "file-read-data",
            p("/Users/u/.config/git/credentials"),
            false,
        ),
        ("file-read-data", p("/Users/u/.cargo/config.toml"), false),
        ("file-read-data", p("/Users/u/.cargo/bin/cargo"), true),
        ("file-read-data", p("/Users/u/.aws/credentials"), false),
        // default hidden paths absent from the policy (they did not exist at open)
        ("file-read-data", p("/Users/u/.netrc"), false),
        ("file-read-data", p("/Users/u/.config/gh/hosts.yml"), false),
        (
            "file-read-data",
            p("/Users/u/Library/Keychains/login.keychain-db"),
            false,
        ),
        ("file-read-data", p("/Users/u/.config/other/x"), false),
        ("file-read-data", p("/Users/u/Documents/taxes.pdf"), false),
        (
            "file-read-data",
            p("/Users/u/src/other-project/README"),
            false,
        ),
        ("file-read-data", p("/Users/u/.claude/session.json"), false),
        ("file-read-data", p("/private/etc/passwd"), true),
        ("file-read-data", p("/usr/bin/git"), true),
        ("file-read-data", bundle("policy.json"), false),
        (
            "file-read-data",
            p(&format!("{ROOT}/workspaces/other/x")),
            false,
        ),
        ("file-read-data", p("/Users/u/.cargo/bin/cargo"), true),
        ("process-exec", p("/Users/u/.cargo/bin/cargo"), true),
        (
            "file-read-data",
            p("/Users/u/.cargo/credentials.toml"),
            false,
        ),
        ("process-exec", p("/Users/u/.cargo/env-helper"), false),
        ("process-exec-interpreter", p("/Users/u/.ssh/x.sh"), false),
        ("process-exec-interpreter", p("/bin/sh"), true),
        ("file-write-data", p("/Users/u/.cargo/bin/cargo"), false),
        ("file-write-data", ws("src/main.rs"), true),
        ("file-write-create", ws("target/debug/x"), true),
        ("file-write-data", ws("capsule-manifest.json"), false),
        ("file-write-unlink", ws(".kitsoki-capsule"), false),
        ("file-read-data", ws("capsule-manifest.json"), true),
        ("file-write-data", p("/Users/u/x"), false),
        ("file-write-data", p("/Users/u/.zshrc"), false),
        ("file-write-data", p("/private/tmp/x"), false),
        ("file-write-data", bundle("tmp/task-1/x"), true),
        ("file-write-data", bundle("home/.config/tool/x"), true),
        ("file-write-data", bundle("cache/npm/x"), true),
        ("file-write-data", bundle("policy.json"), false),
        ("file-write-data", p("/Users/u/shared-out/a"), true),
        ("file-write-data", p("/dev/null"), true),
        ("file-write-data", p("/dev/disk0"), false),
        ("file-write-unlink", ws("src/main.rs"), true),
        ("file-write-unlink", p("/Users/u/.ssh"), false),
        ("file-write-unlink", p("/Users/u"), false),
        ("file-link", p("/Users/u/.ssh/id_rsa"), false),
        ("file-link", ws("a"), true),
        (
            "file-read-data",
            p("/private/tmp/ssh-agent.abc/agent.1"),
            false,
        ),
        ("file-read-data", p("/tmp/ssh-agent.abc/agent.1"), false),
        ("process-fork", Target::None, true),
        ("sysctl-write", Target::None, false),
        ("signal", Target::Process("same-sandbox".into()), true),
        ("signal", Target::Process("others".into()), false),
        (
            "mach-lookup",
            Target::Mach("com.apple.system.logger".into()),
            true,
        ),
        (
            "mach-lookup",
            Target::Mach("com.apple.SecurityServer".into()),
            false,
        ),
        (
            "mach-lookup",
            Target::Mach("com.apple.coreservices.launchservicesd".into()),
            false,
        ),
        (
            "network-outbound",
            Target::RemoteUnix("/private/tmp/ssh-agent.abc/agent.1".into()),
            false,
        ),
        (
            "network-outbound",
            Target::RemoteUnix("/private/var/run/docker.sock".into()),
            false,
        ),
        (
            "network-outbound",
            Target::RemoteUnix(format!("{TASK_TMP}/s.sock").into()),
            true,
        ),
        (
            "network-bind",
            Target::LocalUnix(format!("{TASK_TMP}/s.sock").into()),
            true,
        ),
        (
            "network-bind",
            Target::LocalUnix(format!("{BUNDLE}/tmp/s.sock").into()),
            false,
        ),
    ]
}

fn net(host: &str, port: u16) -> Target {
    Target::Remote {
        host: host.into(),
        port,
    }
}
fn local(host: &str, port: u16) -> Target {
    Target::Local {
        host: host.into(),
        port,
    }
}

/// (operation, target, allow) per mode: loopback, the proxy, a non-loopback address.
fn network_cases(mode: NetworkMode) -> Vec<(&'static str, Target, bool)> {
    let (lo, lo6, proxy, far, bind, dns) = match mode {
        NetworkMode::None => (true, true, true, false, true, false),
        NetworkMode::Off => (false, false, false, false, false, false),
        NetworkMode::Allowlist => (false, false, true, false, false, false),
        NetworkMode::Open => (true, true, true, true, true, true),
        NetworkMode::Replay => unreachable!(),
    };
    vec![
        ("network-outbound", net("127.0.0.1", 8080), lo),
        ("network-outbound", net("::1", 8080), lo6),
        ("network-outbound", net("localhost", PROXY_PORT), proxy),
        ("network-outbound", net("93.184.216.34", 443), far),
        ("network-bind", local("localhost", 3000), bind),
        ("network-inbound", local("localhost", 3000), bind),
        (
            "mach-lookup",
            Target::Mach("com.apple.dnssd.service".into()),
            dns,
        ),
    ]
}

#[test]
fn golden_decision_tables_per_mode() {
    for &mode in MODES {
        let p = policy(mode);
        let g = generate_checked(&inputs(&p), &ModelResolver::macos()).unwrap();
        // evaluate what was written, not what was meant
        let parsed = parse::parse(&g.text).unwrap();
        let ev = Evaluator::new(&parsed, &g.params).unwrap();
        let mut bad = Vec::new();
        for (op, t, want) in common_cases().into_iter().chain(network_cases(mode)) {
            let d = ev.decide(op, &t);
            if d.allow != want {
                let rule = d.rule.and_then(|i| ev.rule(i)).map(|r| format!("{r:?}"));
                bad.push(format!(
                    "{}: {op} {t:?}: got allow={} by {rule:?}",
                    mode.as_str(),
                    d.allow
                ));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
}

#[test]
fn keychain_only_when_asked() {
    let p = policy(NetworkMode::None);
    let mut i = inputs(&p);
    i.allow_keychain = true;
    let g = generate_checked(&i, &ModelResolver::macos()).unwrap();
    let ev = Evaluator::new(&g.profile, &g.params).unwrap();
    assert!(
        ev.decide(
            "mach-lookup",
            &Target::Mach("com.apple.SecurityServer".into())
        )
        .allow
    );
}

#[test]
fn modes_that_cannot_be_rendered() {
    let p = policy(NetworkMode::Replay);
    assert!(generate_checked(&inputs(&p), &ModelResolver::macos()).is_err());
    let p = policy(NetworkMode::Allowlist);
    let mut i = inputs(&p);
    i.proxy_port = None;
    let e = generate_checked(&i, &ModelResolver::macos()).unwrap_err();
    assert!(e.to_string().contains("proxy"), "{e}");
}
