//! Red team: the launch-policy gate in front of `capsule exec` never takes its configuration
//! from inside the workspace. A command that could delete the sentinel (weaker isolation)
//! and plant a `.kitsoki.yaml` there must not switch the operator's policy off for execs
//! started from inside the workspace.

use capsule_e2e::*;
use std::path::PathBuf;

#[test]
fn a_config_planted_in_the_workspace_does_not_replace_the_operators() {
    for runner in runners() {
        let s = scratch();
        runner.own(s.path());
        let root = s.path().join("root");
        // the operator's project: the capsule root lies inside it, capsules are carved out
        std::fs::write(
            s.path().join(".kitsoki.yaml"),
            "agent_launch_policy:\n  enabled: true\n  require_capsule: true\n  allowed_roots: [./root/workspaces]\n",
        )
        .unwrap();
        runner.own(s.path());
        let spec = kitsoki_capsules().join("clean-repo");
        let o = run(runner
            .capsule(&root)
            .current_dir(s.path())
            .arg("open")
            .arg(&spec)
            .arg("--json"));
        assert_ok(&o, "open");
        let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let ws = PathBuf::from(j["workspace"].as_str().unwrap());
        // an exec started from inside the workspace is allowed: it is a capsule
        let o =
            run(runner
                .capsule(&root)
                .current_dir(&ws)
                .args(["exec", "clean-repo", "--", "true"]));
        assert_ok(&o, &format!("[{}] exec inside the capsule", runner.label()));
        // what a command under weaker isolation could do: drop the sentinel, plant a config
        std::fs::remove_file(ws.join(".kitsoki-capsule")).unwrap();
        std::fs::write(
            ws.join(".kitsoki.yaml"),
            "agent_launch_policy:\n  enabled: false\n",
        )
        .unwrap();
        runner.own(&ws);
        let o =
            run(runner
                .capsule(&root)
                .current_dir(&ws)
                .args(["exec", "clean-repo", "--", "true"]));
        assert_eq!(
            o.status.code(),
            Some(3),
            "[{}] the planted config switched the gate off: {}",
            runner.label(),
            stderr(&o)
        );
        assert!(
            stderr(&o).contains("denied by the launch policy"),
            "{}",
            stderr(&o)
        );
    }
}
