//! `capsule verify` and the probes: running a spec's probes against a workspace
//! ([`run_probe`], the one place to swap probe execution into the sandbox), checking an
//! open capsule's tree digest and sentinel ([`verify_capsule`]), and verifying a spec by
//! opening it for the time of the check.

use super::*;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// An open capsule (name or workspace path), or a spec to open temporarily and verify.
    #[arg(value_name = "SPEC|WORKSPACE|NAME")]
    pub target: String,
    /// For a spec: accept the access it asks beyond the defaults (as `capsule open`).
    #[arg(long, value_name = "DIGEST", num_args = 0..=1, require_equals = true)]
    pub accept_grants: Option<Option<String>>,
    #[arg(long)]
    pub json: bool,
}

/// The outcome of one probe.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeResult {
    pub name: String,
    pub command: String,
    pub expect: &'static str,
    pub exit_code: i32,
    pub ok: bool,
    pub output: String,
}

/// Run one probe of `cap`.
///
/// THE place probe execution happens. For now: `sh -c <run>` in the workspace (or the
/// probe's `dir` inside it) with a minimal clean environment (PATH, an empty HOME, LANG,
/// Kitsoki's fixed git identity, no global/system git config), killed after
/// [`PROBE_TIMEOUT`]. On Linux it runs inside the capsule's sandbox (the executor of
/// `capsule exec`, with the capsule's own policy and network mode; HOME is an empty folder
/// in the capsule's tmp); elsewhere it is not sandboxed yet.
pub fn run_probe(cap: &OpenCapsule, probe: &Probe) -> ProbeResult {
    let expect = if probe.expect_zero { "zero" } else { "nonzero" };
    let mut res = ProbeResult {
        name: probe.name.clone(),
        command: probe.run.clone(),
        expect,
        exit_code: -1,
        ok: false,
        output: String::new(),
    };
    let cwd = match &probe.dir {
        Some(d) => match capsule_bundle::workspace::wspath::inside(
            &cap.workspace,
            d,
            capsule_bundle::workspace::wspath::Last::NoSymlink,
        ) {
            Ok(p) => p,
            Err(e) => {
                res.output = format!("probe dir: {e}");
                return res;
            }
        },
        None => cap.workspace.clone(),
    };
    let home = match tempfile::Builder::new()
        .prefix("capsule-probe-home-")
        .tempdir()
    {
        Ok(h) => h,
        Err(e) => {
            res.output = format!("cannot make a probe HOME: {e}");
            return res;
        }
    };
    let out_file = match tempfile::tempfile() {
        Ok(f) => f,
        Err(e) => {
            res.output = format!("cannot make an output file: {e}");
            return res;
        }
    };
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(&probe.run)
        .current_dir(&cwd)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home.path())
        .env("LANG", "C.UTF-8")
        .env("TZ", "UTC")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", capsule_bundle::git::run::IDENTITY_NAME)
        .env("GIT_AUTHOR_EMAIL", capsule_bundle::git::run::IDENTITY_EMAIL)
        .env("GIT_AUTHOR_DATE", capsule_bundle::git::run::FIXED_DATE)
        .env(
            "GIT_COMMITTER_NAME",
            capsule_bundle::git::run::IDENTITY_NAME,
        )
        .env(
            "GIT_COMMITTER_EMAIL",
            capsule_bundle::git::run::IDENTITY_EMAIL,
        )
        .env("GIT_COMMITTER_DATE", capsule_bundle::git::run::FIXED_DATE)
        .stdin(Stdio::null());
    match out_file.try_clone() {
        Ok(f2) => {
            cmd.stdout(Stdio::from(f2));
        }
        Err(_) => {
            cmd.stdout(Stdio::null());
        }
    }
    match out_file.try_clone() {
        Ok(f3) => {
            cmd.stderr(Stdio::from(f3));
        }
        Err(_) => {
            cmd.stderr(Stdio::null());
        }
    }
    // Linux: in the capsule's sandbox with its own policy and network mode
    #[cfg(target_os = "linux")]
    let status = {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::ExitStatusExt;
        let env = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_os_string(), v?.to_os_string())))
            .collect();
        match crate::exec::run_probe(
            cap,
            &probe.run,
            &cwd,
            env,
            PROBE_TIMEOUT,
            out_file.as_raw_fd(),
        ) {
            Ok(code) => code.map(|c| std::process::ExitStatus::from_raw((c & 0xff) << 8)),
            Err(e) => {
                res.output = format!("probe did not run: {e}");
                return res;
            }
        }
    };
    #[cfg(not(target_os = "linux"))]
    let status = {
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                res.output = format!("cannot run sh: {e}");
                return res;
            }
        };
        let start = std::time::Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if start.elapsed() > PROBE_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break None,
            }
        }
    };
    use std::io::{Read, Seek};
    let mut f = out_file;
    let mut out = String::new();
    if f.seek(std::io::SeekFrom::Start(0)).is_ok() {
        let mut buf = Vec::new();
        let _ = f.take(64 * 1024).read_to_end(&mut buf);
        out = String::from_utf8_lossy(&buf).trim().to_string();
    }
    res.output = out;
    match status {
        Some(s) => {
            use std::os::unix::process::ExitStatusExt;
            res.exit_code = s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0));
            res.ok = (res.exit_code == 0) == probe.expect_zero;
        }
        None => {
            res.output = format!(
                "timed out after {}s; killed. {}",
                PROBE_TIMEOUT.as_secs(),
                res.output
            );
        }
    }
    res
}

// ------------------------------------------------------------------ verify

/// The result of verifying an open capsule.
#[derive(Debug, serde::Serialize)]
pub struct Verification {
    pub ok: bool,
    pub capsule_name: String,
    pub workspace: PathBuf,
    pub spec_path: Option<PathBuf>,
    pub expected_tree_digest: Option<String>,
    pub actual_tree_digest: String,
    pub probes: Vec<ProbeResult>,
    pub errors: Vec<String>,
}

/// Tree digest against the spec and every probe, for an open capsule.
pub fn verify_capsule(cap: &OpenCapsule) -> Result<Verification, CliError> {
    let spec: Option<Spec> = match &cap.record.spec_path {
        Some(p) => Some(capsule_bundle::spec::load(p).map_err(fail)?),
        None => None,
    };
    let actual = capsule_bundle::workspace::digest::tree_digest(&cap.workspace).map_err(fail)?;
    let mut v = Verification {
        ok: true,
        capsule_name: cap.name.clone(),
        workspace: cap.workspace.clone(),
        spec_path: cap.record.spec_path.clone(),
        expected_tree_digest: spec.as_ref().and_then(|s| s.verify.tree_digest.clone()),
        actual_tree_digest: format!("sha256:{actual}"),
        probes: Vec::new(),
        errors: Vec::new(),
    };
    if let Some(want) = &v.expected_tree_digest {
        if !capsule_bundle::workspace::digest::matches(want, &actual) {
            v.ok = false;
            v.errors.push(format!(
                "tree_digest mismatch: got sha256:{actual}, want {want}"
            ));
        }
    }
    if let Some(s) = &spec {
        let _phase = capsule_bundle::progress::phase(
            capsule_bundle::progress::PROBES,
            s.verify.probes.len() as u64,
        );
        for p in &s.verify.probes {
            let r = run_probe(cap, p);
            capsule_bundle::progress::inc(capsule_bundle::progress::PROBES, 1);
            if !r.ok {
                v.ok = false;
                v.errors.push(format!(
                    "probe {:?} failed: exit {} (expected {})",
                    r.name, r.exit_code, r.expect
                ));
            }
            v.probes.push(r);
        }
    }
    Ok(v)
}

pub(super) fn print_verification(v: &Verification) {
    println!(
        "{} {}",
        if v.ok { "verified" } else { "FAILED" },
        esc_name(&v.capsule_name)
    );
    match &v.expected_tree_digest {
        Some(w) => println!(
            "  tree digest  {} (want {})",
            v.actual_tree_digest,
            esc_line(w)
        ),
        None => println!("  tree digest  {} (spec pins none)", v.actual_tree_digest),
    }
    for p in &v.probes {
        println!(
            "  probe {:<28} {}  exit {} (expect {})",
            esc_name(&p.name),
            if p.ok { "ok  " } else { "FAIL" },
            p.exit_code,
            p.expect
        );
        if !p.ok && !p.output.is_empty() {
            for l in p.output.split('\n').take(5) {
                println!("      | {}", esc_line(l));
            }
        }
    }
}

/// Verify an open capsule, or a spec opened in a temporary capsule root.
fn verify_target(
    layout: &Layout,
    target: &str,
    accept: Acceptance,
) -> Result<Verification, CliError> {
    Ok(match store::resolve(layout, target) {
        Ok(cap) => {
            let v = verify_capsule(&cap)?;
            // the results go into the manifest, as `kitsoki capsule verify` does (read-only
            // inside the sandbox: the probes cannot forge them)
            let probes = serde_json::to_value(&v.probes).unwrap_or_default();
            let hex = v.actual_tree_digest.trim_start_matches("sha256:");
            capsule_bundle::workspace::manifest::write_verified(&cap.workspace, hex, probes)
                .map_err(|e| fail(format!("verify {}: {e}", cap.name)))?;
            v
        }
        Err(capsule_bundle::Error::NotFound(_)) => {
            // not an open capsule: a spec, opened in a temporary capsule root
            let spec_path = capsule_bundle::spec::find_spec(target).map_err(|e| {
                fail(format!(
                    "{}: neither an open capsule nor a spec ({e})",
                    target
                ))
            })?;
            let tmp = tempfile::Builder::new()
                .prefix("capsule-verify-")
                .tempdir()
                .map_err(fail)?;
            let tl = Layout::new(tmp.path());
            let opened = open_sandboxed(
                &tl,
                &OpenRequest {
                    from: OpenFrom::Spec(spec_path),
                    name: None,
                    dest: None,
                    accept,
                },
            )?;
            let v = verify_capsule(&opened.capsule)?;
            let _ = store::close(&tl, &opened.capsule.name, true);
            v
        }
        Err(e) => return Err(fail(e)),
    })
}

pub fn verify(a: VerifyArgs) -> CliResult {
    let layout = layout()?;
    let accept = acceptance(&a.accept_grants)?;
    let line = crate::cli::progress::Line::start(a.json);
    let v = verify_target(&layout, &a.target, accept);
    drop(line);
    let v = v?;
    if a.json {
        print_json(&serde_json::to_value(&v).unwrap_or_default());
    } else {
        print_verification(&v);
    }
    if v.ok {
        Ok(ExitCode::SUCCESS)
    } else if a.json {
        Ok(ExitCode::from(crate::exit::FAILURE))
    } else {
        Err(fail(format!(
            "verify {}: {}",
            v.capsule_name,
            v.errors.join("; ")
        )))
    }
}

// ------------------------------------------------------------------ close / list
