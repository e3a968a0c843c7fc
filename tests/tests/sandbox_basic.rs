//! Ordinary work inside the sandbox, and the exec record.
mod sandbox_support;
use sandbox_support::*;

#[test]
fn true_and_exit_codes() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.exec(&["true"]);
        ok(&o, "true");
        assert_eq!(code(&c.exec(&["sh", "-c", "exit 7"])), 7);
        assert_eq!(code(&c.exec(&["sh", "-c", "kill -TERM $$"])), 128 + 15);
        assert_eq!(code(&c.exec(&["no-such-command-xyz"])), 127);
        assert_eq!(code(&c.exec(&["/etc/passwd"])), 126);
    });
}
