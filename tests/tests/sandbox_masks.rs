//! Masks over hidden paths are read-only, nosuid mounts (one bind each, its flags copied
//! from the sealed mask source): checked in the sandbox's own mount table, since Landlock
//! (the second wall) would refuse writes there even if a mask were writable.
use capsule_e2e::sandbox::*;

/// Mount options of the mount at `path`, as the command sees them in /proc/self/mountinfo,
/// in an exec with `flags`.
fn options_at(c: &Capsule, flags: &[&str], path: &str) -> String {
    let script =
        format!("awk -v p='{path}' '$5 == p {{ print $6 }}' /proc/self/mountinfo | tail -n 1");
    let o = c.exec_with(flags, &["sh", "-c", &script]);
    ok(&o, "reading the mount table");
    out(&o).trim().to_string()
}

#[test]
fn hidden_path_masks_are_read_only_and_nosuid() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // a hidden folder in a folder the sandbox shows as it is (the workspace; in the
        // home, the view leaves hidden paths absent: nothing to mask there)
        let creds = c.ws.join("creds");
        std::fs::create_dir_all(&creds).unwrap();
        std::fs::write(creds.join("store"), SECRET).unwrap();
        r.own(c.dir.path());
        let hide = creds.display().to_string();
        let flags = ["--hide", hide.as_str()];
        let opts = options_at(&c, &flags, &hide);
        assert!(!opts.is_empty(), "{}: no mask mounted there", r.label());
        let opts: Vec<&str> = opts.split(',').collect();
        assert!(opts.contains(&"ro"), "{}: mask options {opts:?}", r.label());
        assert!(
            opts.contains(&"nosuid"),
            "{}: mask options {opts:?}",
            r.label()
        );
        // the mask is empty, and the workspace (rw) is not masked that way: the check reads
        // real options
        let ws = options_at(&c, &flags, &c.ws.display().to_string());
        assert!(
            ws.split(',').any(|o| o == "rw"),
            "{}: workspace {ws}",
            r.label()
        );
        let o = c.exec_with(&flags, &["sh", "-c", &format!("ls -A '{hide}' | wc -l")]);
        assert_eq!(out(&o).trim(), "0", "{}", err(&o));
    });
}

#[test]
fn many_hidden_paths_are_all_masked() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // in a folder the home shows
        let base = c.home.join(".local/bin/many");
        let mut flags = Vec::new();
        for i in 0..50 {
            let d = base.join(format!("d{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("secret"), SECRET).unwrap();
            flags.push("--hide".to_string());
            flags.push(d.display().to_string());
        }
        std::fs::write(base.join("visible"), "shown").unwrap();
        r.own(c.dir.path());
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let o = c.exec_with(
            &flags,
            &[
                "sh",
                "-c",
                &format!(
                    "cat '{0}'/d*/secret 2>/dev/null; cat '{0}/visible'; touch '{0}/d7/x' 2>/dev/null && echo WROTE",
                    base.display()
                ),
            ],
        );
        assert!(!out(&o).contains(SECRET), "{}: {}", r.label(), out(&o));
        assert!(!out(&o).contains("WROTE"), "{}: {}", r.label(), out(&o));
        assert_eq!(out(&o), "shown", "{}: {}", r.label(), err(&o));
    });
}
