//! Weaker isolation for real: a capsule command re-run inside a new user namespace whose
//! `user.max_user_namespaces` is 0, so `capsule` there cannot make the namespaces of full
//! isolation (a machine without user namespaces, for whatever runs there).

use crate::Runner;
use std::process::{Command, Stdio};

impl Runner {
    /// `base` (a command for this runner: program, arguments, environment, working
    /// directory) run by this runner inside a user namespace that may create no more, with
    /// stdin from `/dev/null`. `unshare`, `sh` and the program exec each other, so the
    /// spawned pid is the program's. More arguments may be added to what is returned.
    pub fn without_userns(&self, base: &Command) -> Command {
        let mut w = match self {
            Runner::Current => Command::new("unshare"),
            Runner::User { uid, gid, .. } => {
                let mut w = Command::new("setpriv");
                w.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--clear-groups")
                    .arg("unshare");
                w
            }
        };
        w.args(["-U", "-r", "sh", "-c"])
            .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"")
            .arg(base.get_program())
            .args(base.get_args());
        w.env_clear();
        for (k, v) in base.get_envs() {
            if let Some(v) = v {
                w.env(k, v);
            }
        }
        if let Some(d) = base.get_current_dir() {
            w.current_dir(d);
        }
        w.stdin(Stdio::null());
        w
    }
}
