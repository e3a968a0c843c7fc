//! `capsule demo`: opens the example spec shipped in the binary ([`DEMO_SPEC`]), runs a
//! few commands through the real `capsule exec` to show what works and what is refused,
//! and closes the capsule again (unless `--keep`).

use super::verify::print_verification;
use super::*;

/// The example spec `capsule demo` opens (shipped inside the binary).
pub const DEMO_SPEC: &str = include_str!("../../../examples-spec/demo/capsule.yaml");

#[derive(Debug, Args)]
pub struct DemoArgs {
    #[arg(long)]
    pub json: bool,
    /// Keep the demo capsule open instead of closing it at the end.
    #[arg(long)]
    pub keep: bool,
}

/// One command the demo runs.
#[derive(Debug, serde::Serialize)]
struct DemoStep {
    command: String,
    exit_code: i32,
    output: String,
}

pub fn demo(a: DemoArgs) -> CliResult {
    let tmp = tempfile::Builder::new()
        .prefix("capsule-demo-")
        .tempdir()
        .map_err(fail)?;
    let spec_dir = tmp.path().join("spec");
    std::fs::create_dir_all(&spec_dir).map_err(fail)?;
    let spec_file = spec_dir.join("capsule.yaml");
    std::fs::write(&spec_file, DEMO_SPEC).map_err(fail)?;
    let root = tmp.path().join("root");
    let layout = Layout::new(&root);
    // A home of the demo's own, with a planted (fake) SSH key: the demo shows the key is
    // hidden without touching the person's real home.
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).map_err(fail)?;
    std::fs::write(home.join(".ssh/id_demo"), "FAKE-DEMO-KEY\n").map_err(fail)?;
    let home = home.canonicalize().map_err(fail)?;
    // SAFETY: single-threaded here; the policy of the capsule opened below is computed
    // from HOME, and the `capsule exec` children inherit it.
    unsafe { std::env::set_var("HOME", &home) };
    if !a.json {
        println!(
            "capsule demo: opening the example capsule in a temporary capsule root {}",
            root.display()
        );
        println!(
            "  (with a demo home {} holding a fake key in .ssh/)",
            home.display()
        );
    }
    let opened = open_sandboxed(
        &layout,
        &OpenRequest {
            from: OpenFrom::Spec(spec_file),
            name: None,
            dest: None,
            // the demo spec asks for nothing beyond the defaults: refuse if it ever does
            accept: Acceptance::None,
        },
    )?;
    let cap = &opened.capsule;
    if !a.json {
        println!("  opened {} at {}", cap.name, cap.workspace.display());
        println!(
            "  HEAD {} on {}",
            short(&cap.record.head),
            cap.record.branch.as_deref().unwrap_or("detached")
        );
    }
    // (what it shows, command, should the sandbox let it succeed?)
    let commands: [(&str, &str, bool); 7] = [
        ("work in the workspace", "git log --oneline && sh src/hello.sh", true),
        (
            "commit in the workspace",
            "git add notes.txt && git -c user.name=demo -c user.email=demo@capsule.invalid commit -qm notes && git log --oneline | head -1",
            true,
        ),
        ("write outside the workspace", "echo tampered > /etc/capsule-demo", false),
        ("tamper with the capsule's own record", "echo '{}' > capsule-manifest.json", false),
        ("read the (fake) SSH key in your home", "cat ~/.ssh/id_demo", false),
        ("see the host's processes", "test \"$(ls /proc | grep -c '^[0-9]')\" -gt 5", false),
        ("start a user namespace inside (seccomp)",
            "unshare --user true",
            false),
    ];
    let v = verify_capsule(cap)?;
    let mut unexpected = usize::from(!v.ok);
    if !a.json {
        println!();
        print_verification(&v);
    }
    let mut steps = Vec::new();
    for (what, c, should_work) in commands {
        let r = demo_exec(&root, tmp.path(), &cap.name, c, should_work)?;
        let verdict = match (r.exit_code == 0, should_work) {
            (true, true) => "works",
            (false, false) => "refused by the sandbox",
            (true, false) => "UNEXPECTEDLY ALLOWED",
            (false, true) => "UNEXPECTEDLY FAILED",
        };
        // `ok`: the exit status matched the expectation
        if !r.ok {
            unexpected += 1;
        }
        if !a.json {
            println!("\n# {what}: {verdict}");
            println!("$ {c}    (exit {})", r.exit_code);
            for l in r.output.lines().take(6) {
                println!("  {l}");
            }
        }
        steps.push(DemoStep {
            command: c.into(),
            exit_code: r.exit_code,
            output: r.output,
        });
    }
    if !a.json {
        println!("\nthe policy the sandbox enforced:");
        for w in policy_in_words(&cap.policy).iter().take(8) {
            println!("  {w}");
        }
        println!("\nnext: `capsule open <spec.yaml>` or `capsule open --source <checkout>`, then");
        println!("      `capsule exec <name> -- <command>`; see README.md.");
    }
    let closed = if a.keep {
        false
    } else {
        store::close(&layout, &cap.name, true).map_err(fail)?;
        true
    };
    if a.json {
        print_json(&json!({
            "capsule": capsule_json(cap),
            "commands": steps,
            "verify": v,
            "sandboxed": true,
            "unexpected": unexpected,
            "closed": closed,
        }));
    } else if closed {
        println!("\nclosed {}: workspace and bundle removed.", cap.name);
    } else {
        let kept = tmp.keep();
        println!(
            "\nkept {} (capsule root {}); close it with CAPSULE_ROOT={} capsule close {}",
            cap.name,
            kept.join("root").display(),
            kept.join("root").display(),
            cap.name
        );
    }
    if unexpected > 0 {
        return Err(CliError::failure(format!(
            "demo: {unexpected} command(s) did not behave as the sandbox promises (see above); check `capsule isolation`"
        )));
    }
    Ok(ExitCode::SUCCESS)
}

/// Run `sh -c cmd` in the demo capsule through the real `capsule exec` (this binary),
/// from a directory outside any Kitsoki project so no operator gate config applies.
fn demo_exec(
    root: &Path,
    cwd: &Path,
    name: &str,
    cmd: &str,
    should_work: bool,
) -> Result<ProbeResult, CliError> {
    let exe = std::env::current_exe().map_err(fail)?;
    let out = std::process::Command::new(exe)
        .args(["exec", name, "--", "sh", "-c", cmd])
        .env("CAPSULE_ROOT", root)
        .env_remove("CAPSULE_POLICY_CONFIG")
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(fail)?;
    let exit_code = out.status.code().unwrap_or(-1);
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(ProbeResult {
        name: cmd.into(),
        command: cmd.into(),
        expect: if should_work { "zero" } else { "nonzero" },
        exit_code,
        // a runtime failure (125) is never the refusal the demo wants to show
        ok: (exit_code == 0) == should_work && exit_code != i32::from(crate::exit::SANDBOX_FAILED),
        output,
    })
}
