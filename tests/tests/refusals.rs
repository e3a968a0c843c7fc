//! Every refusal listed: a command that does each refused thing gets exactly those
//! refusals (kind, target, program, grant) in the exec record, in `refusals.jsonl` and on
//! stderr; ordinary work gets none; a storm of refusals keeps the record bounded.
use capsule_e2e::sandbox::*;

fn record(c: &Capsule) -> serde_json::Value {
    c.records().pop().expect("exec record")
}

fn refusals(rec: &serde_json::Value) -> Vec<serde_json::Value> {
    rec["refusals"].as_array().cloned().unwrap_or_default()
}

#[test]
fn refused_syscall_is_listed_with_the_same_errno() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let script = "import ctypes,os\nlibc=ctypes.CDLL(None,use_errno=True)\nfor i in range(3):\n rc=libc.syscall(250,0,0,0,0,0)\nprint(rc, os.strerror(ctypes.get_errno()))";
        // a warm spare (installed ahead of time) and a root built for the exec
        for idle in ["30", "0"] {
            let mut cmd = c.capsule();
            cmd.env("CAPSULE_PREPARED_IDLE", idle);
            cmd.args(["exec", NAME, "--", "python3", "-c", script]);
            cmd.stdin(std::process::Stdio::null());
            let o = cmd.output().unwrap();
            ok(&o, "keyctl");
            assert_eq!(out(&o), "-1 Operation not permitted\n", "{}", err(&o));
            let rec = record(&c);
            let list = refusals(&rec);
            assert_eq!(list.len(), 1, "{rec}");
            assert_eq!(list[0]["kind"], "syscall");
            assert_eq!(list[0]["target"], "keyctl");
            assert_eq!(list[0]["program"], "python3");
            assert_eq!(list[0]["count"], 3);
            assert!(list[0]["pid"].as_i64().is_some_and(|p| p > 0), "{rec}");
            assert!(list[0].get("grant").is_none(), "{rec}");
            assert!(
                err(&o).contains("capsule: refused syscall keyctl (python3), 3 times\n"),
                "{}",
                err(&o)
            );
        }
    });
}

#[test]
fn proxy_refusal_is_listed_with_its_grant() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // nothing listens there: the proxy refuses before it would connect
        let script = "export NO_PROXY= no_proxy=; curl -s -o /dev/null -w '%{http_code}\\n' --max-time 20 http://127.0.0.1:9/x; \
                      curl -s -o /dev/null -w '%{http_code}\\n' --max-time 20 http://127.0.0.1:9/y";
        let mut cmd = c.capsule();
        cmd.env("CAPSULE_PROXY_TEST_RESOLVE", "listed.test=127.0.0.1");
        cmd.args([
            "exec",
            NAME,
            "--allow-host",
            "listed.test:443",
            "--",
            "sh",
            "-c",
            script,
        ]);
        cmd.stdin(std::process::Stdio::null());
        let o = cmd.output().unwrap();
        assert_eq!(out(&o), "403\n403\n", "{}", err(&o));
        let rec = record(&c);
        let list = refusals(&rec);
        assert_eq!(list.len(), 1, "{rec}");
        assert_eq!(list[0]["kind"], "connect");
        assert_eq!(list[0]["target"], "127.0.0.1:9");
        assert_eq!(list[0]["count"], 2);
        assert_eq!(list[0]["grant"], "--allow-host 127.0.0.1:9");
        assert_eq!(list[0]["reason"], "not on the allowlist");
        // the proxy sees a socket; the program behind it is found on the host
        assert_eq!(list[0]["program"], "curl", "{rec}");
        assert!(list[0]["pid"].as_i64().is_some_and(|p| p > 1), "{rec}");
        assert!(
            err(&o).contains(
                "capsule: refused connect 127.0.0.1:9 (curl): not on the allowlist, 2 times; to allow: --allow-host 127.0.0.1:9\n"
            ),
            "{}",
            err(&o)
        );
        // the capsule's log has it, with a time, and `capsule refusals` lists it
        let log = std::fs::read_to_string(c.bundle.join("refusals.jsonl")).unwrap();
        let lines: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "{log}");
        assert!(lines[0]["time"].as_str().unwrap().ends_with('Z'), "{log}");
        assert_eq!(lines[0]["exec"], rec["started_at"]);
        let o = c.capsule().args(["refusals", NAME]).output().unwrap();
        ok(&o, "capsule refusals");
        assert!(
            out(&o).contains("refused connect 127.0.0.1:9 (curl)"),
            "{}",
            out(&o)
        );
        let o = c
            .capsule()
            .args(["refusals", NAME, "--json", "--since", "1h"])
            .output()
            .unwrap();
        ok(&o, "capsule refusals --json --since 1h");
        let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
        assert_eq!(v[0]["program"], "curl", "{v}");
        let o = c
            .capsule()
            .args([
                "refusals",
                NAME,
                "--json",
                "--since",
                "2099-01-01T00:00:00Z",
            ])
            .output()
            .unwrap();
        ok(&o, "capsule refusals --since the future");
        assert_eq!(out(&o).trim(), "[]");
    });
}

/// A connect the proxy refuses names the program that tried it, whatever it is called:
/// a copy of curl under a long name (its `comm` is cut at 15 bytes: the executable's file
/// name is given), one under a name with a terminal escape (faithful in the record,
/// escaped on stderr), through HTTP, CONNECT and SOCKS5, in the record (`--json`, the
/// log) and on stderr. The proxy only ever refuses: it connects
/// nowhere (the targets are the sandbox's loopback, off the allowlist).
#[test]
fn proxy_refusals_name_the_program_that_tried() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // (an HTTP request, a CONNECT tunnel and a SOCKS5 request, each to a port off the list)
        let script = r#"set -e; export NO_PROXY= no_proxy=; c=$(command -v curl); e=$(printf '\033')
            cp "$c" ./fetch-o-matic-3000; cp "$c" "./ev${e}[2Jil"
            ./fetch-o-matic-3000 -s -o /dev/null -w '%{http_code}\n' --max-time 20 http://127.0.0.1:9/
            "./ev${e}[2Jil" -s -o /dev/null --max-time 20 https://127.0.0.1:10/ || true
            curl -s -o /dev/null --max-time 20 -x socks5h://127.0.0.1:3128 http://127.0.0.1:11/ || true"#;
        let mut cmd = c.capsule();
        cmd.env("CAPSULE_PROXY_TEST_RESOLVE", "listed.test=127.0.0.1");
        cmd.args([
            "exec",
            NAME,
            "--json",
            "--allow-host",
            "listed.test:443",
            "--",
        ]);
        cmd.args(["sh", "-c", script]);
        cmd.stdin(std::process::Stdio::null());
        let o = cmd.output().unwrap();
        ok(&o, "refused connects");
        // the command's line, then the record (`--json`), as in events.jsonl
        let stdout = out(&o);
        let (first, json) = stdout.split_once('\n').unwrap();
        assert_eq!(first, "403", "{}", err(&o));
        let rec: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(refusals(&rec), refusals(&record(&c)));
        let mut got: Vec<(String, String)> = refusals(&rec)
            .iter()
            .map(|r| {
                assert_eq!(r["kind"], "connect", "{rec}");
                assert!(r["pid"].as_i64().is_some_and(|p| p > 1), "{rec}");
                let t = r["target"].as_str().unwrap().to_string();
                (t, r["program"].as_str().unwrap().to_string())
            })
            .collect();
        got.sort();
        let want = [
            ("127.0.0.1:10", "ev\x1b[2Jil"),
            ("127.0.0.1:11", "curl"),
            ("127.0.0.1:9", "fetch-o-matic-3000"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(got, want, "{rec}");
        // on the terminal the escape is shown, never sent
        let e = err(&o);
        assert!(!e.contains('\x1b'), "{e:?}");
        assert!(
            e.contains(
                "capsule: refused connect 127.0.0.1:10 (ev\\x1b[2Jil): not on the allowlist"
            ),
            "{e}"
        );
        assert!(
            e.contains(
                "capsule: refused connect 127.0.0.1:9 (fetch-o-matic-3000): not on the allowlist"
            ),
            "{e}"
        );
        let o = c.capsule().args(["refusals", NAME]).output().unwrap();
        ok(&o, "capsule refusals");
        assert!(!out(&o).contains('\x1b'), "{:?}", out(&o));
        assert!(out(&o).contains("(ev\\x1b[2Jil)"), "{}", out(&o));
    });
}

#[test]
fn ordinary_work_has_no_refusals() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // by default (the home's hidden credentials watched where FUSE can be used), and
        // with every open observed
        for flags in [&[][..], &["--list-reads"]] {
            let o = c.exec_with(
                flags,
                &[
                    "sh",
                    "-c",
                    "git -c user.name=t -c user.email=t@t commit -q --allow-empty -m wip && \
                 python3 -m venv --without-pip /tmp/venv && /tmp/venv/bin/python -c 'print(1)' && \
                 cc -o /tmp/a src/main.c 2>/dev/null; ls -la ~ >/dev/null; true",
                ],
            );
            ok(&o, "git commit, venv");
            let rec = record(&c);
            assert_eq!(
                refusals(&rec),
                Vec::<serde_json::Value>::new(),
                "{flags:?} {rec}"
            );
            assert!(!err(&o).contains("refused"), "{}", err(&o));
        }
    });
}

/// 100,000 refused syscalls: answered one by one in bounded time, one entry counted.
#[test]
fn refusal_storm_keeps_the_record_bounded() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let script = "import ctypes\nlibc=ctypes.CDLL(None)\nf=libc.syscall\nfor i in range(100000):\n f(250,0,0,0,0,0)\nfor i in range(300):\n f(250-2*(i%2),0,0,0,0,0)";
        let t = std::time::Instant::now();
        let o = c.exec_with(&["--quiet-refusals"], &["python3", "-c", script]);
        let took = t.elapsed();
        ok(&o, "storm");
        assert!(took < std::time::Duration::from_secs(30), "{took:?}");
        assert!(!err(&o).contains("refused"), "{}", err(&o));
        let rec = record(&c);
        let list = refusals(&rec);
        assert_eq!(list.len(), 2, "{rec}");
        assert_eq!(list[0]["target"], "keyctl");
        assert_eq!(list[0]["count"], 100150);
        assert_eq!(list[1]["target"], "add_key");
        assert_eq!(list[1]["count"], 150);
        let line = serde_json::to_string(&rec).unwrap();
        assert!(line.len() < 64 * 1024, "{}", line.len());
        eprintln!("storm of 100,300 refusals: {took:?}");
    });
}

#[test]
fn writes_outside_the_writable_paths_are_listed() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let script = "import os\n\
             for p in ['/etc/x', '/etc/x']:\n try: open(p, 'w')\n except OSError as e: print('open', e.errno)\n\
             try: os.rename('README.md', '/usr/stolen')\nexcept OSError as e: print('rename', e.errno)\n\
             open('ok.txt', 'w').write('x')\nos.rename('ok.txt', 'ok2.txt')\nos.unlink('ok2.txt')\n\
             os.mkdir('/tmp/d'); os.rename('/tmp/d', '/tmp/e'); os.rmdir('/tmp/e')\n";
        let o = c.exec(&["python3", "-c", script]);
        ok(&o, "writes");
        assert_eq!(out(&o).lines().count(), 3, "{} {}", out(&o), err(&o));
        assert!(c.ws.join("README.md").exists());
        let rec = record(&c);
        let list = refusals(&rec);
        assert_eq!(list.len(), 2, "{rec}");
        assert_eq!(list[0]["kind"], "write");
        assert_eq!(list[0]["target"], "/etc/x");
        assert_eq!(list[0]["program"], "python3");
        assert_eq!(list[0]["count"], 2);
        assert_eq!(list[0]["grant"], "--allow-write /etc/x");
        assert_eq!(list[1]["kind"], "write");
        assert_eq!(list[1]["target"], "/usr/stolen");
        assert_eq!(list[1]["grant"], "--allow-write /usr");
        let e = err(&o);
        assert!(
            e.contains("capsule: refused write /etc/x (python3): openat outside the writable paths, 2 times; to allow: --allow-write /etc/x\n"),
            "{e}"
        );
        assert!(
            e.contains("capsule: refused write /usr/stolen (python3): rename outside the writable paths; to allow: --allow-write /usr\n"),
            "{e}"
        );
    });
}

/// `--no-list-writes` takes the observation away, not the wall: the writes are refused as
/// before, unlisted, the record says so, a refused syscall is still listed, and a failed
/// command is told what it cannot see.
#[test]
fn no_list_writes_keeps_the_wall_and_says_what_is_lost() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let script = "import ctypes,os,sys\nlibc=ctypes.CDLL(None,use_errno=True)\n\
             try: open('/etc/x', 'w')\nexcept OSError as e: print('open', e.errno)\n\
             try: os.rename('README.md', '/usr/stolen')\nexcept OSError as e: print('rename', e.errno)\n\
             open('ok.txt', 'w').write('x')\nlibc.syscall(250,0,0,0,0,0)\nsys.exit(3)\n";
        // a warm spare (its filter installed ahead of time) and a root built for the exec
        for idle in ["30", "0"] {
            let mut cmd = c.capsule();
            cmd.env("CAPSULE_PREPARED_IDLE", idle);
            cmd.args([
                "exec",
                "--no-list-writes",
                NAME,
                "--",
                "python3",
                "-c",
                script,
            ]);
            cmd.stdin(std::process::Stdio::null());
            let o = cmd.output().unwrap();
            assert_eq!(o.status.code(), Some(3), "{}", err(&o));
            let stdout = out(&o);
            let lines: Vec<&str> = stdout.lines().collect();
            assert_eq!(lines.len(), 2, "{} {}", out(&o), err(&o));
            // EACCES (Landlock), EROFS (a read-only mount), EXDEV (a rename across mounts)
            let refused = |l: &&str| [" 13", " 30", " 18"].iter().any(|e| l.ends_with(e));
            assert!(lines.iter().all(refused), "{lines:?}");
            assert!(!std::path::Path::new("/usr/stolen").exists());
            assert!(c.ws.join("README.md").exists());
            assert_eq!(std::fs::read_to_string(c.ws.join("ok.txt")).unwrap(), "x");
            let rec = record(&c);
            let list = refusals(&rec);
            assert_eq!(list.len(), 1, "{rec}");
            assert_eq!(list[0]["kind"], "syscall", "{rec}");
            let not_listed = rec["refusals_not_listed"].to_string();
            assert!(
                not_listed.contains("write: not observed in this exec (exec --no-list-writes)"),
                "{rec}"
            );
            let e = err(&o);
            assert!(
                e.contains("capsule: refused syscall keyctl (python3)"),
                "{e}"
            );
            assert!(!e.contains("capsule: refused write /"), "{e}");
            assert!(
                e.contains(
                    "capsule: refused writes are not listed in this exec (--no-list-writes)"
                ),
                "{e}"
            );
        }
        // and without it, the next exec lists them again
        let o = c.exec(&["python3", "-c", "open('/etc/x', 'w')"]);
        assert!(!o.status.success());
        let rec = record(&c);
        assert_eq!(refusals(&rec)[0]["target"], "/etc/x", "{rec}");
        assert!(
            !rec["refusals_not_listed"]
                .to_string()
                .contains("--no-list-writes"),
            "{rec}"
        );
    });
}

#[test]
fn connects_refused_inside_are_listed() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let home = c.home.display().to_string();
        let script = format!(
            "import socket\n\
             def tcp(a):\n s=socket.socket(); s.settimeout(3)\n try: s.connect(a)\n except OSError as e: print(a[1], e.errno)\n\
             tcp(('192.0.2.1', 443)); tcp(('127.0.0.1', 9))\n\
             u=socket.socket(socket.AF_UNIX)\n\
             try: u.connect('{home}/.ssh/agent.sock')\nexcept OSError as e: print('unix', e.errno)\n"
        );
        // network: none; loopback is the sandbox's own (nothing listens: not a refusal)
        let o = c.exec(&["python3", "-c", &script]);
        ok(&o, "connects");
        let rec = record(&c);
        let list = refusals(&rec);
        assert_eq!(list.len(), 2, "{rec}");
        assert_eq!(list[0]["kind"], "connect");
        assert_eq!(list[0]["target"], "192.0.2.1:443");
        assert_eq!(list[0]["program"], "python3");
        assert_eq!(list[0]["grant"], "--allow-host 192.0.2.1:443");
        assert_eq!(list[1]["target"], format!("{home}/.ssh/agent.sock"));
        assert!(list[1].get("grant").is_none(), "{rec}");
        assert!(
            err(&o).contains("capsule: refused connect 192.0.2.1:443 (python3): no network but the sandbox's own loopback; to allow: --allow-host 192.0.2.1:443\n"),
            "{}",
            err(&o)
        );
        // --no-network: loopback is refused too
        let o = c.exec_with(&["--no-network"], &["python3", "-c", &script]);
        ok(&o, "connects, no network");
        let list = refusals(&record(&c));
        let targets: Vec<&str> = list.iter().map(|r| r["target"].as_str().unwrap()).collect();
        assert_eq!(
            targets,
            [
                "192.0.2.1:443",
                "127.0.0.1:9",
                &format!("{home}/.ssh/agent.sock")
            ],
            "{list:?}"
        );
        assert_eq!(list[1]["reason"], "no network at all (--no-network)");
    });
}

/// Weaker isolation (no namespaces): refused syscalls and writes are still listed (host
/// paths), and the record says which kinds are not.
#[test]
fn weaker_isolation_lists_syscalls_and_writes() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let no_userns = |args: &[&str]| {
            c.runner
                .without_userns(c.capsule().args(args))
                .output()
                .expect("run capsule in a user namespace")
        };
        ok(
            &no_userns(&["isolation", "--accept-weaker", "on"]),
            "accept weaker",
        );
        let script = "import ctypes,os\nlibc=ctypes.CDLL(None,use_errno=True)\nlibc.syscall(250,0,0,0,0,0)\nprint(os.strerror(ctypes.get_errno()))\ntry: open('/etc/x','w')\nexcept OSError as e: print(e.errno)\nopen('ok.txt','w')";
        let o = no_userns(&["exec", NAME, "--", "python3", "-c", script]);
        ok(&o, "weaker exec");
        assert!(
            out(&o).starts_with("Operation not permitted\n"),
            "{}",
            out(&o)
        );
        let rec = record(&c);
        let list = refusals(&rec);
        let got: Vec<(&str, &str)> = list
            .iter()
            .map(|r| (r["kind"].as_str().unwrap(), r["target"].as_str().unwrap()))
            .collect();
        assert_eq!(got, [("syscall", "keyctl"), ("write", "/etc/x")], "{rec}");
        let not_listed = rec["refusals_not_listed"].to_string();
        assert!(not_listed.contains("connect: weaker isolation"), "{rec}");
        assert!(not_listed.contains("read: only with"), "{rec}");
    });
}

/// `capsule isolation` says which kinds are listed and which are not.
#[test]
fn isolation_says_which_kinds_are_listed() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.capsule().arg("isolation").output().unwrap();
        ok(&o, "capsule isolation");
        let s = out(&o);
        let read = if r.watches_masks() {
            "read     listed: of the home's hidden credentials"
        } else {
            "read     NOT listed: only with `exec --list-reads`"
        };
        for kind in [
            "syscall  listed",
            "write    listed",
            "connect  listed",
            read,
            "exec     NOT listed",
        ] {
            assert!(s.contains(kind), "{kind}: {s}");
        }
        let o = c.capsule().args(["isolation", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
        let weaker = v["refusals"]["weaker"].as_array().unwrap();
        assert!(
            weaker
                .iter()
                .any(|k| k["kind"] == "connect" && k["listed"] == false),
            "{v}"
        );
    });
}

#[test]
fn reads_of_hidden_paths_are_listed() {
    each_runner(|r| {
        let c = Capsule::new(r);
        std::fs::write(c.home.join(".ssh/id_ed25519"), SECRET).unwrap();
        std::fs::create_dir_all(c.home.join(".aws")).unwrap();
        std::fs::write(c.home.join(".aws/credentials"), SECRET).unwrap();
        c.runner.own(&c.home);
        let home = c.home.display().to_string();
        let script = format!(
            "cat {home}/.ssh/id_ed25519; python3 -c 'import os; os.listdir(\"{home}/.aws\")' 2>/dev/null; cat README.md {home}/notes.txt >/dev/null; true"
        );
        // by default where capsule watches the credentials' masks (the same list), else
        // only when asked (every open then goes through capsule)
        let o = c.sh(&script);
        if !r.watches_masks() {
            assert!(refusals(&record(&c)).is_empty(), "{}", err(&o));
        }
        let o = if r.watches_masks() {
            o
        } else {
            c.exec_with(&["--list-reads"], &["sh", "-c", &script])
        };
        assert!(!out(&o).contains(SECRET), "{}", out(&o));
        let rec = record(&c);
        let list = refusals(&rec);
        let got: Vec<(&str, String, &str, &str)> = list
            .iter()
            .map(|r| {
                (
                    r["kind"].as_str().unwrap(),
                    r["target"].as_str().unwrap().replace(&home, "~"),
                    r["program"].as_str().unwrap(),
                    r["grant"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "read",
                    "~/.ssh/id_ed25519".into(),
                    "cat",
                    &*format!("--reveal {home}/.ssh")
                ),
                (
                    "read",
                    "~/.aws".into(),
                    "python3",
                    &*format!("--reveal {home}/.aws")
                ),
            ],
            "{rec}"
        );
        assert!(
            err(&o).contains(&format!(
                "capsule: refused read {home}/.ssh/id_ed25519 (cat): a hidden path; to allow: --reveal {home}/.ssh\n"
            )),
            "{}",
            err(&o)
        );
        assert!(
            err(&o).contains(&format!(
                "capsule: refused read {home}/.aws (python3): listing a hidden folder; to allow: --reveal {home}/.aws\n"
            )),
            "{}",
            err(&o)
        );
    });
}

/// The issue's command: each refused thing once, exactly those refusals, in the record
/// and on stderr.
#[test]
fn each_refused_thing_once_gets_exactly_those_refusals() {
    each_runner(|r| {
        let c = Capsule::new(r);
        std::fs::write(c.home.join(".ssh/id_ed25519"), SECRET).unwrap();
        std::fs::create_dir_all(c.home.join(".aws")).unwrap();
        c.runner.own(&c.home);
        let home = c.home.display().to_string();
        let script = format!(
            "cat {home}/.ssh/id_ed25519 2>/dev/null; python3 -c 'import os; os.listdir(\"{home}/.aws\")' 2>/dev/null; \
             python3 -c \"\nimport ctypes, os\ntry: open('/etc/x', 'w')\nexcept OSError: pass\ntry: os.rename('README.md', '/usr/stolen')\nexcept OSError: pass\nctypes.CDLL(None).syscall(250, 0, 0, 0, 0, 0)\n\"; \
             env NO_PROXY= no_proxy= curl -s -o /dev/null --max-time 20 http://127.0.0.1:9/; true"
        );
        // with every open observed; and by default where the credentials' masks are
        // watched (the reads are then listed by the masks alone)
        for list_reads in [true, false] {
            if !list_reads && !r.watches_masks() {
                continue;
            }
            let mut cmd = c.capsule();
            cmd.env("CAPSULE_PROXY_TEST_RESOLVE", "listed.test=127.0.0.1");
            cmd.args(["exec", NAME]);
            if list_reads {
                cmd.arg("--list-reads");
            }
            cmd.args(["--allow-host", "listed.test:443", "--"]);
            cmd.args(["sh", "-c", &script]);
            cmd.stdin(std::process::Stdio::null());
            let o = cmd.output().unwrap();
            ok(&o, "each refused thing");
            let rec = record(&c);
            let mut got: Vec<String> = refusals(&rec)
                .iter()
                .map(|r| {
                    format!(
                        "{} {} ({}) {}",
                        r["kind"].as_str().unwrap(),
                        r["target"].as_str().unwrap().replace(&home, "~"),
                        r["program"].as_str().unwrap(),
                        r["grant"].as_str().unwrap_or("-").replace(&home, "~"),
                    )
                })
                .collect();
            got.sort();
            assert_eq!(
                got,
                [
                    "connect 127.0.0.1:9 (curl) --allow-host 127.0.0.1:9",
                    "read ~/.aws (python3) --reveal ~/.aws",
                    "read ~/.ssh/id_ed25519 (cat) --reveal ~/.ssh",
                    "syscall keyctl (python3) -",
                    "write /etc/x (python3) --allow-write /etc/x",
                    "write /usr/stolen (python3) --allow-write /usr",
                ],
                "{rec}"
            );
            let lines = err(&o)
                .lines()
                .filter(|l| l.starts_with("capsule: refused "))
                .count();
            assert_eq!(lines, 6, "{}", err(&o));
        }
    });
}

/// The capsule's logs stay bounded across execs: one exec refusing 6,000 writes of 3 KB
/// paths appends a bounded amount (it added 1.9 MB to the two logs before), and a log
/// past its cap (`refusals.jsonl` 4 MiB, `events.jsonl` 8 MiB) is rotated to `NAME.1`
/// by the next exec; `capsule refusals` reads both files.
#[test]
fn logs_stay_bounded_across_execs() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let refusals_log = c.bundle.join("refusals.jsonl");
        let events_log = c.bundle.join("events.jsonl");
        // logs as full as their caps, of old lines
        let old_refusal = r#"{"time":"2026-01-01T00:00:00.000Z","kind":"syscall","target":"old","program":"sh","count":1}"#;
        let n_old = (4 << 20) / (old_refusal.len() + 1) + 1;
        std::fs::write(&refusals_log, format!("{old_refusal}\n").repeat(n_old)).unwrap();
        let old_event = format!("{{\"old\":\"{}\"}}", "x".repeat(1000));
        std::fs::write(
            &events_log,
            format!("{old_event}\n").repeat((8 << 20) / 1000 + 1),
        )
        .unwrap();
        for p in [&refusals_log, &events_log] {
            c.runner.own(p);
        }
        let script = "import os\nd='/'.join(['d' * 200] * 15)\n\
             for i in range(6000):\n try: open('/etc/%d/' % i + d, 'w')\n except OSError: pass\n";
        let o = c.exec_with(&["--quiet-refusals"], &["python3", "-c", script]);
        ok(&o, "6,000 refused writes");
        let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let added_refusals = size(&refusals_log);
        let added_events = size(&events_log);
        eprintln!("one exec of 6,000 refused 3 KB paths: refusals.jsonl +{added_refusals} B, events.jsonl +{added_events} B");
        assert!(
            added_refusals > 0 && added_refusals <= 256 << 10,
            "{added_refusals}"
        );
        assert!(
            added_events > 0 && added_events <= 256 << 10,
            "{added_events}"
        );
        assert_eq!(
            size(&c.bundle.join("refusals.jsonl.1")),
            (n_old * (old_refusal.len() + 1)) as u64
        );
        assert!(size(&c.bundle.join("events.jsonl.1")) > 8 << 20);
        assert_eq!(c.records().len(), 1);
        // `capsule refusals` reads the rotated file, then the new one
        let o = c
            .capsule()
            .args(["refusals", NAME, "--json"])
            .output()
            .unwrap();
        ok(&o, "capsule refusals");
        let lines: Vec<serde_json::Value> = serde_json::from_str(&out(&o)).unwrap();
        assert_eq!(lines.len(), n_old + 256, "{}", err(&o));
        assert_eq!(lines[0]["target"], "old");
        assert_eq!(lines[n_old]["kind"], "write");
        // the path is cut in the log, and a grant that would name a cut path is left out
        assert!(lines[n_old]["target"].as_str().unwrap().len() < 600);
        assert!(lines[n_old].get("grant").is_none(), "{}", lines[n_old]);
    });
}
