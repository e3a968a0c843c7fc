//! The command line of a plain `capsule exec`, read without clap.
//!
//! `capsule exec` runs once per sandboxed command, and clap spends ~1.5 µs on each
//! argument: 200 `--hide PATH` flags cost ~0.3 ms before anything else happens. [`plain`]
//! reads the common shape — long flags with their value as the next argument, one capsule,
//! then `--` and the command — and gives up (`None`) on everything else: `=` forms, short
//! flag clusters, values that look like flags, repeated switches, conflicting network
//! flags, `--timeout`, `--agent-login`, a limit given twice or with a value it cannot
//! read, help and version. Those go to clap, which decides
//! and words its errors as always. The tests check that whatever [`plain`] accepts, clap
//! reads the same way.

use super::exec::ExecArgs;
use crate::limits;
use std::ffi::OsString;

/// `args` (`capsule exec …`) as clap would read them, if they have the plain shape.
pub(super) fn plain(args: &[OsString]) -> Option<ExecArgs> {
    let mut a = ExecArgs {
        capsule: String::new(),
        allow_write: Vec::new(),
        hide: Vec::new(),
        reveal: Vec::new(),
        pass_env: Vec::new(),
        env: Vec::new(),
        env_file: None,
        read_only_workspace: false,
        record_to: None,
        agent_login: None,
        no_network: false,
        open_network: false,
        allow_host: Vec::new(),
        secret: Vec::new(),
        secret_file: Vec::new(),
        publish: Vec::new(),
        no_sandbox: false,
        tty: false,
        no_gpu: false,
        timeout: None,
        activity_timeout: None,
        fds: None,
        file_size: None,
        memory: None,
        pids: None,
        cpus: None,
        refusals: None,
        quiet_refusals: false,
        list_reads: false,
        no_list_writes: false,
        tmp_size: None,
        json: false,
        command: Vec::new(),
    };
    if args.get(1)?.as_encoded_bytes() != b"exec" {
        return None;
    }
    let mut capsule = None;
    let mut it = args.iter().skip(2);
    loop {
        // no `--`: clap decides where the command starts
        let arg = it.next()?;
        let b = arg.as_encoded_bytes();
        if b == b"--" {
            break;
        }
        if !b.starts_with(b"-") {
            if capsule.is_some() {
                return None;
            }
            capsule = Some(arg.to_str()?.to_owned());
            continue;
        }
        let switch = match b {
            b"--no-network" => Some(&mut a.no_network),
            b"--open-network" => Some(&mut a.open_network),
            b"--no-sandbox" => Some(&mut a.no_sandbox),
            b"-t" | b"--tty" => Some(&mut a.tty),
            b"--no-gpu" => Some(&mut a.no_gpu),
            b"--json" => Some(&mut a.json),
            b"--quiet-refusals" => Some(&mut a.quiet_refusals),
            b"--list-reads" => Some(&mut a.list_reads),
            b"--no-list-writes" => Some(&mut a.no_list_writes),
            _ => None,
        };
        if let Some(s) = switch {
            // clap refuses a switch given twice
            if *s {
                return None;
            }
            *s = true;
            continue;
        }
        let v = it.next()?;
        let vb = v.as_encoded_bytes();
        if vb.is_empty() || vb.starts_with(b"-") {
            return None;
        }
        match b {
            b"--allow-write" => a.allow_write.push(v.into()),
            b"--hide" => a.hide.push(v.into()),
            b"--reveal" => a.reveal.push(v.into()),
            b"--pass-env" => a.pass_env.push(v.to_str()?.to_owned()),
            b"--allow-host" => a.allow_host.push(v.to_str()?.to_owned()),
            b"--refusals" if a.refusals.is_none() => {
                use super::exec::RefusalsWhen;
                a.refusals = Some(match vb {
                    b"live" => RefusalsWhen::Live,
                    b"after" => RefusalsWhen::After,
                    _ => return None,
                })
            }
            // limits: read by the functions clap uses; clap words a refusal, and a limit
            // given twice
            b"--fds" if a.fds.is_none() => a.fds = Some(limits::parse_count(v.to_str()?).ok()?),
            b"--file-size" if a.file_size.is_none() => {
                a.file_size = Some(limits::parse_size(v.to_str()?).ok()?)
            }
            b"--memory" if a.memory.is_none() => {
                a.memory = Some(limits::parse_size(v.to_str()?).ok()?)
            }
            b"--pids" if a.pids.is_none() => a.pids = Some(limits::parse_count(v.to_str()?).ok()?),
            b"--tmp-size" if a.tmp_size.is_none() => {
                a.tmp_size = Some(limits::parse_size(v.to_str()?).ok()?)
            }
            b"--cpus" if a.cpus.is_none() => a.cpus = Some(limits::parse_cpus(v.to_str()?).ok()?),
            b"--activity-timeout" if a.activity_timeout.is_none() => {
                a.activity_timeout = Some(limits::parse_duration(v.to_str()?).ok()?)
            }
            _ => return None,
        }
    }
    a.capsule = capsule?;
    a.command = it.cloned().collect();
    // clap's conflicts among the network and sandbox flags: clap words the refusal
    let exclusive = [
        a.no_network,
        a.open_network,
        a.no_sandbox,
        !a.allow_host.is_empty(),
    ];
    if a.command.is_empty()
        || exclusive.iter().filter(|x| **x).count() > 1
        || (a.list_reads && a.no_list_writes)
    {
        return None;
    }
    Some(a)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn check(args: &[OsString]) -> bool {
        let full = Cli::try_parse_from(args.to_vec());
        match plain(args) {
            Some(fast) => {
                let full = full.unwrap_or_else(|e| panic!("{args:?}: clap refused: {e}"));
                assert_eq!(
                    format!("{:?}", Command::Exec(fast)),
                    format!("{:?}", full.command),
                    "{args:?}"
                );
                true
            }
            None => false,
        }
    }

    /// `capsule` and the words of `s` (split at spaces).
    pub(in crate::cli) fn argv(s: &str) -> Vec<OsString> {
        std::iter::once("capsule")
            .chain(s.split(' ').filter(|a| !a.is_empty()))
            .map(Into::into)
            .collect()
    }

    #[test]
    fn plain_lines_are_read_as_clap_reads_them() {
        let taken = [
            "exec bench -- /bin/true",
            "exec bench -- --version -h",
            "exec --json -t --no-gpu bench -- ls -la",
            "exec bench --allow-write /tmp --hide /a --hide /b --reveal /c -- sh -c x",
            "exec bench --pass-env FOO --pass-env BAR -- true",
            "exec bench --no-network -- true",
            "exec --tty bench --open-network -- true",
            "exec bench --allow-host example.com:443 --allow-host *.x -- true",
            "exec bench --no-sandbox --allow-write /a -- true",
            "exec bench --hide rel/path -- true",
            "exec bench --fds 64 --file-size 1M --activity-timeout 2s -- true",
            "exec bench --file-size 1.5G -- true",
            "exec bench --memory 512M --pids 64 --cpus 1.5 -- true",
            "exec bench --no-list-writes -- tar -xf x",
        ];
        for line in taken {
            assert!(check(&argv(line)), "not taken: {line}");
        }
        let left_to_clap = [
            "exec bench /bin/true",
            "exec bench --timeout 5s -- true",
            "exec bench --list-reads --no-list-writes -- true",
            "exec bench --fds 0 -- true",
            "exec bench --fds 1 --fds 2 -- true",
            "exec bench --file-size 12Q -- true",
            "exec bench --activity-timeout soon -- true",
            "exec bench --agent-login claude -- true",
            "exec bench --env A=B -- true",
            "exec bench --env-file /dev/fd/4 --record-to /dev/fd/3 -- true",
            "exec bench --read-only-workspace -- true",
            "exec bench --no-network --open-network -- true",
            "exec bench --no-sandbox --allow-host a -- true",
            "exec bench --json --json -- true",
            "exec bench -t --tty -- true",
            "exec bench --hide=/a -- true",
            "exec bench --hide -x -- true",
            "exec bench --hide -- true",
            "exec bench --bogus -- true",
            "exec bench other -- true",
            "exec -tj bench -- true",
            "exec bench --",
            "exec -- bench true",
            "exec --help",
            "exec bench -h",
            "exec",
        ];
        for line in left_to_clap {
            assert!(!check(&argv(line)), "taken: {line}");
        }
        // an empty value, a non-UTF-8 name or value
        use std::os::unix::ffi::OsStringExt;
        let mut a = argv("exec bench --hide");
        a.extend(["".into(), "--".into(), "true".into()]);
        assert!(!check(&a));
        let bad = OsString::from_vec(vec![0xff, b'x']);
        let mut a = argv("exec");
        a.extend([bad.clone(), "--".into(), "true".into()]);
        assert!(!check(&a));
        let mut a = argv("exec bench --pass-env");
        a.extend([bad.clone(), "--".into(), "true".into()]);
        assert!(!check(&a));
        let mut a = argv("exec bench --hide");
        a.extend([bad, "--".into(), "true".into()]);
        assert!(check(&a), "a non-UTF-8 path is a path");
    }

    /// Many lines made of the flags in every order: whatever is taken, clap reads the same.
    #[test]
    fn mixed_lines_agree_with_clap() {
        let pool = [
            "--no-network",
            "--open-network",
            "--no-sandbox",
            "-t",
            "--tty",
            "--no-gpu",
            "--json",
            "--allow-write /w",
            "--hide /h",
            "--hide x",
            "--reveal /r",
            "--pass-env E",
            "--allow-host h:1",
            "--timeout 1s",
            "--fds 9",
            "--file-size 2K",
            "--activity-timeout 1s",
            "--fds x",
            "--memory 64M",
            "--pids 8",
            "--pids 0",
            "--cpus 0.5",
            "--cpus 0",
            "--hide",
            "bench",
            "other",
            "--",
            "-x",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut taken = 0;
        for _ in 0..3000 {
            let n = (next() % 7) as usize;
            let mut line = String::from("exec");
            for _ in 0..n {
                line.push(' ');
                line.push_str(pool[(next() % pool.len() as u64) as usize]);
            }
            if next() % 2 == 0 {
                line.push_str(" -- true x");
            }
            if check(&argv(&line)) {
                taken += 1;
            }
        }
        assert!(taken > 100, "only {taken} lines were plain");
    }
}
