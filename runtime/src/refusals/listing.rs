//! Which kinds of refusal are listed, under which isolation, and why not the others: what
//! `capsule isolation` says, and the exec record's `refusals_not_listed`.

use serde::Serialize;

/// One kind of refusal and whether it is listed.
#[derive(Debug, Clone, Serialize)]
pub struct KindListing {
    pub kind: &'static str,
    pub listed: bool,
    /// How it is caught, or why it is not.
    pub how: &'static str,
}

fn k(kind: &'static str, listed: bool, how: &'static str) -> KindListing {
    KindListing { kind, listed, how }
}

/// The listing under full isolation (`namespaces`) or weaker (Landlock and seccomp only),
/// on a kernel with seccomp user notification and its "continue" answer (`notify`).
/// Reads of hidden credentials are listed where capsule can watch their masks
/// (`watched`: FUSE, see `crate::linux::fusemask`), reads of every hidden path when asked
/// (`reads`: `exec --list-reads`).
pub fn kinds(namespaces: bool, notify: bool, reads: bool, watched: bool) -> Vec<KindListing> {
    let mut v = Vec::new();
    if notify {
        v.push(k("syscall", true, "seccomp user notification: capsule records the call and answers EPERM, as the filter would"));
        v.push(k("write", true, "seccomp user notification on path calls with write intent, answered \"continue\" (Landlock and the mounts decide); the path is judged against the writable set, without following symlinks"));
    } else {
        v.push(k("syscall", false, "this kernel lacks seccomp user notification with \"continue\" (Linux 5.5): refused, not listed"));
        v.push(k("write", false, "this kernel lacks seccomp user notification with \"continue\" (Linux 5.5): refused, not listed"));
    }
    if namespaces && notify {
        v.push(k("connect", true, "the allowlist proxy's refusals; inside: TCP connects the sandbox's network refuses (none, --no-network, direct connects in allowlist mode) and unix sockets in hidden paths (UDP is not listed: resolvers try their name server, the proxy resolves names)"));
    } else if namespaces {
        v.push(k("connect", true, "the allowlist proxy's refusals only"));
    } else {
        v.push(k("connect", false, "weaker isolation: no network namespace (allowlist mode gets no TCP at all; Landlock's refusals are not seen)"));
    }
    let watched = watched && namespaces;
    if notify && !reads && watched {
        v.push(k("read", true, "of the home's hidden credentials (~/.ssh, ~/.aws, ...: each an empty, read-only mask served by capsule over FUSE, which lists every lookup, listing and open in it, at no cost to other opens)"));
        v.push(k("read", false, "of other hidden paths: only with `exec --list-reads` (every open then goes through capsule: a round trip each, measured +2.8 ms per warm exec and +38% on a C build here)"));
    } else if notify && !reads {
        v.push(k("read", false, if namespaces {
            "only with `exec --list-reads`: every open then goes through capsule (a round trip each, measured +2.8 ms per warm exec and +38% on a C build here); reads of the home's hidden credentials would be listed without it, but /dev/fuse cannot be opened by this user here (or CAPSULE_FUSE_MASKS=0)"
        } else {
            "only with `exec --list-reads`: every open then goes through capsule (a round trip each, measured +2.8 ms per warm exec and +38% on a C build here)"
        }));
    } else if notify {
        v.push(k("read", true, "seccomp user notification on every open, answered \"continue\" (the masks and Landlock decide); the path is judged against the hidden paths and what is shown again inside them; stat, access and readlink of hidden paths are not seen"));
    } else {
        v.push(k("read", false, "this kernel lacks seccomp user notification with \"continue\" (Linux 5.5): refused, not listed"));
    }
    v.push(k("exec", false, "nothing to list: the policy blocks no program by name (running one from a hidden path is a read)"));
    v.push(k(
        "socket",
        false,
        "nothing to list: the sandbox refuses no socket family; what it refuses is the connect",
    ));
    v
}

/// What an exec with `--no-list-writes` adds to its record's `refusals_not_listed` (the
/// kinds above say what the machine can list; this says what the exec chose not to).
pub fn writes_off() -> KindListing {
    k("write", false, "not observed in this exec (exec --no-list-writes): path calls with write intent stayed in the kernel; Landlock and the mounts refused what they refuse, unlisted")
}

/// Plain words for `capsule isolation`.
pub fn human(namespaces: bool, notify: bool, watched: bool) -> String {
    let reads = false;
    let mut s =
        String::from("refusals listed by capsule exec (stderr, the record, capsule refusals):\n");
    for l in kinds(namespaces, notify, reads, watched) {
        s.push_str(&format!(
            "  {:<8} {}: {}\n",
            l.kind,
            if l.listed { "listed" } else { "NOT listed" },
            l.how
        ));
    }
    s
}
