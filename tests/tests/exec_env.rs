//! `capsule exec --env NAME=VALUE`, `--env-file FILE` (NUL-separated), `--record-to FILE`
//! and `--read-only-workspace`, as a program driving capsule (Kitsoki's agent runtime)
//! uses them: values reach the command but never the record; the workspace and its `.git`
//! are read-only while an `--allow-write` folder in it stays writable.

use capsule_e2e::*;

#[test]
fn env_by_value_stays_out_of_the_record_and_the_workspace_can_be_read_only() {
    for r in runners() {
        let who = r.label().to_string();
        let dir = scratch();
        let base = std::fs::canonicalize(dir.path()).expect("canon");
        let src = base.join("src");
        write(&src.join("a.txt"), "a\n");
        write(&src.join("out/keep"), "k\n");
        git(&src, &["init", "-q", "-b", "main"]);
        git(&src, &["add", "."]);
        git(&src, &["commit", "-q", "-m", "init"]);
        let root = base.join("root");
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::write(base.join("env"), b"TOKEN=SEKRET-VALUE-42\0MULTI=a\nb\0").expect("env");
        r.own(&base);
        assert_ok(
            &run(r
                .capsule(&root)
                .args(["open", "--name", "e", "--source"])
                .arg(&src)),
            &format!("{who}: open"),
        );
        let ws = root.join("workspaces/e");
        let rec = base.join("rec.json");
        let o = run(r
            .capsule(&root)
            .args(["exec", "e", "--env", "PLAIN=p1", "--env-file"])
            .arg(base.join("env"))
            .arg("--record-to")
            .arg(&rec)
            .args(["--read-only-workspace", "--allow-write"])
            .arg(ws.join("out"))
            .args(["--", "sh", "-c"])
            .arg("echo \"t=$TOKEN p=$PLAIN\"; echo x > a.txt; echo x > .git/x; echo ok > out/new && echo wrote-out"));
        let out = stdout(&o);
        assert!(
            out.contains("t=SEKRET-VALUE-42 p=p1"),
            "{who}: {out} {}",
            stderr(&o)
        );
        assert!(out.contains("wrote-out"), "{who}: {out} {}", stderr(&o));
        assert_eq!(std::fs::read_to_string(ws.join("a.txt")).expect("a"), "a\n");
        assert!(!ws.join(".git/x").exists(), "{who}: .git writable");
        let record = std::fs::read_to_string(&rec).expect("record");
        let v: serde_json::Value = serde_json::from_str(&record).expect("record json");
        assert_eq!(
            v["requested"]["env"],
            serde_json::json!(["PLAIN", "TOKEN", "MULTI"])
        );
        assert_eq!(v["requested"]["read_only_workspace"], true);
        let events = std::fs::read_to_string(root.join("bundles/e/events.jsonl")).expect("events");
        for text in [&record, &events] {
            assert!(!text.contains("SEKRET"), "{who}: a value in the record");
        }
        // a bad entry names the file, never a value
        std::fs::write(base.join("env"), b"SEKRET-without-equals\0").expect("env");
        let o = run(r
            .capsule(&root)
            .args(["exec", "e", "--env-file"])
            .arg(base.join("env"))
            .args(["--", "true"]));
        assert_eq!(code(&o), 1, "{who}");
        assert!(!stderr(&o).contains("SEKRET"), "{who}: {}", stderr(&o));
    }
}
