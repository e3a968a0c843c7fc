//! Reading the layer: the walk that lists its changes against the real home (`capsule
//! home diff`), with content diffs for text files.

use super::*;

struct Walk<'a> {
    layer: &'a Layer,
    with_diff: bool,
    out: Vec<Change>,
}

impl Layer {
    /// The changes in the layer (all of them; `filter` keeps those under the given relative
    /// paths). `with_diff` adds unified content diffs for text files.
    pub fn changes(&self, filter: &[PathBuf], with_diff: bool) -> Result<Vec<Change>, LayerError> {
        let upper = match fsat::open_dir(&self.upper) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("reading", &self.upper)(e)),
        };
        let real = fsat::open_dir(&self.home).map_err(io("reading", &self.home))?;
        let mut w = Walk {
            layer: self,
            with_diff,
            out: Vec::new(),
        };
        w.dir(&upper, Some(&real), Path::new(""), filter, 0)
            .map_err(|e| match e {
                WalkError::Io(e) => io("reading", &self.upper)(e),
                WalkError::TooDeep(p) => LayerError::TooDeep(self.upper.join(p)),
            })?;
        Ok(w.out)
    }

    pub(super) fn is_excluded(&self, rel: &Path) -> bool {
        self.excluded.iter().any(|e| rel.starts_with(e))
    }
    pub(super) fn hidden_reason(&self, rel: &Path) -> Option<String> {
        self.hidden
            .iter()
            .find(|h| rel.starts_with(h))
            .map(|h| format!("~/{} is hidden from tasks", esc(h)))
    }
}

/// Does `rel` pass `filter` (it lies under a filter path, or a filter path lies under it)?
fn wanted(filter: &[PathBuf], rel: &Path) -> bool {
    filter.is_empty()
        || filter
            .iter()
            .any(|f| rel.starts_with(f) || f.starts_with(rel))
}
fn selected(filter: &[PathBuf], rel: &Path) -> bool {
    filter.is_empty() || filter.iter().any(|f| rel.starts_with(f))
}

impl Walk<'_> {
    fn push(&mut self, filter: &[PathBuf], c: Change) {
        if selected(filter, &c.path) {
            self.out.push(c);
        }
    }

    fn dir(
        &mut self,
        upper: &OwnedFd,
        real: Option<&OwnedFd>,
        rel: &Path,
        filter: &[PathBuf],
        depth: usize,
    ) -> Result<(), WalkError> {
        if depth > MAX_DEPTH {
            return Err(WalkError::TooDeep(rel.to_path_buf()));
        }
        for name in fsat::list(upper)? {
            let path = rel.join(&name);
            if self.layer.is_excluded(&path) || !wanted(filter, &path) {
                continue;
            }
            let Some(st) = fsat::stat_at(upper, &name)? else {
                continue;
            };
            let real_st = match real {
                Some(r) => fsat::stat_at(r, &name)?,
                None => None,
            };
            let base = |kind, entry| Change {
                path: path.clone(),
                kind,
                entry,
                mode: None,
                target: None,
                refused: None,
                runs_as_you: match kind {
                    ChangeKind::Removed => None,
                    _ => crate::home::hostrun::runs_as_you(&path),
                },
                diff: None,
                binary: false,
                sha256: None,
            };
            let add_or_change = if real_st.is_some() {
                ChangeKind::Changed
            } else {
                ChangeKind::Added
            };
            if let Some(why) = self.layer.hidden_reason(&path) {
                let mut c = base(add_or_change, entry_type(&st));
                c.refused = Some(why);
                // reported even when a path below it was asked for
                self.out.push(c);
                continue;
            }
            if is_whiteout(upper, &name, &st) {
                if let Some(rs) = real_st {
                    self.removed(real, &name, &path, &rs, filter);
                }
                continue;
            }
            match st.st_mode & libc::S_IFMT {
                libc::S_IFREG => {
                    match self.file(upper, real, &name, &path, &st, real_st.as_ref(), filter) {
                        Err(e) if denied(&e) => {
                            let mut c = base(add_or_change, EntryType::File);
                            c.refused = Some(UNREADABLE.into());
                            self.push(filter, c);
                        }
                        r => r?,
                    }
                }
                libc::S_IFLNK => {
                    let target = fsat::read_link_at(upper, &name)?;
                    if let (Some(r), Some(rs)) = (real, real_st.as_ref()) {
                        if fsat::is_type(rs, libc::S_IFLNK)
                            && fsat::read_link_at(r, &name)? == target
                        {
                            continue;
                        }
                    }
                    let mut c = base(add_or_change, EntryType::Symlink);
                    if !symlink_inside(&self.layer.home, &path, &target) {
                        c.refused = Some(format!(
                            "symlink to {} points outside the home directory",
                            esc(&target)
                        ));
                    }
                    c.target = Some(target);
                    self.push(filter, c);
                }
                libc::S_IFDIR => {
                    let sub = match fsat::open_dir_at(upper, &name) {
                        Ok(sub) => sub,
                        Err(e) if denied(&e) => {
                            let mut c = base(add_or_change, EntryType::Dir);
                            c.refused = Some(UNREADABLE.into());
                            self.push(filter, c);
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    };
                    let real_dir = match (real, real_st.as_ref()) {
                        (Some(r), Some(rs)) if fsat::is_type(rs, libc::S_IFDIR) => {
                            Some(fsat::open_dir_at(r, &name)?)
                        }
                        _ => None,
                    };
                    // a folder made only to hold a cache's mount point is not a change
                    let holds_excluded = self
                        .layer
                        .excluded
                        .iter()
                        .any(|e| e.starts_with(&path) && e != &path);
                    if real_dir.is_none() {
                        if !(holds_excluded && real_st.is_none()) {
                            let mut c = base(add_or_change, EntryType::Dir);
                            c.mode = Some(st.st_mode & 0o777);
                            self.push(filter, c);
                        }
                    } else if let Some(rd) = real_dir.as_ref().filter(|_| is_opaque(&sub)) {
                        // every real entry not in the layer was removed
                        let keep: BTreeSet<OsString> = fsat::list(&sub)?.into_iter().collect();
                        for n in fsat::list(rd)? {
                            let p = path.join(&n);
                            if keep.contains(&n)
                                || self.layer.is_excluded(&p)
                                || !wanted(filter, &p)
                            {
                                continue;
                            }
                            if let Some(rs) = fsat::stat_at(rd, &n)? {
                                self.removed(Some(rd), &n, &p, &rs, filter);
                            }
                        }
                    }
                    self.dir(&sub, real_dir.as_ref(), &path, filter, depth + 1)?;
                }
                _ => {
                    let mut c = base(add_or_change, EntryType::Other);
                    c.refused = Some(
                        if fsat::is_type(&st, libc::S_IFCHR) || fsat::is_type(&st, libc::S_IFBLK) {
                            "a device node".into()
                        } else {
                            "a FIFO or socket".into()
                        },
                    );
                    self.push(filter, c);
                }
            }
        }
        Ok(())
    }

    fn removed(
        &mut self,
        real: Option<&OwnedFd>,
        name: &OsStr,
        path: &Path,
        rs: &libc::stat,
        filter: &[PathBuf],
    ) {
        let mut c = Change {
            path: path.to_path_buf(),
            kind: ChangeKind::Removed,
            entry: entry_type(rs),
            mode: None,
            target: None,
            refused: self.layer.hidden_reason(path),
            runs_as_you: None,
            diff: None,
            binary: false,
            sha256: None,
        };
        if self.with_diff && fsat::is_type(rs, libc::S_IFREG) {
            if let Some(r) = real {
                let old = fsat::open_file_at(r, name)
                    .ok()
                    .and_then(|f| read_limited(f, DIFF_LIMIT).ok().flatten());
                match old {
                    Some(o) if is_text(&o) => c.diff = Some(unified(path, &o, b"")),
                    _ => c.binary = true,
                }
            }
        }
        self.push(filter, c);
    }

    #[allow(clippy::too_many_arguments)]
    fn file(
        &mut self,
        upper: &OwnedFd,
        real: Option<&OwnedFd>,
        name: &OsStr,
        path: &Path,
        st: &libc::stat,
        real_st: Option<&libc::stat>,
        filter: &[PathBuf],
    ) -> std::io::Result<()> {
        let mode = st.st_mode & 0o777;
        let real_file = match (real, real_st) {
            (Some(r), Some(rs)) if fsat::is_type(rs, libc::S_IFREG) => Some((r, rs)),
            _ => None,
        };
        if let Some((r, rs)) = real_file {
            if rs.st_mode & 0o777 == mode
                && rs.st_size == st.st_size
                && same_content(
                    fsat::open_file_at(upper, name)?,
                    fsat::open_file_at(r, name)?,
                )?
            {
                return Ok(()); // copied up without a change
            }
        }
        let mut c = Change {
            path: path.to_path_buf(),
            kind: if real_st.is_some() {
                ChangeKind::Changed
            } else {
                ChangeKind::Added
            },
            entry: EntryType::File,
            mode: Some(mode),
            target: None,
            refused: None,
            runs_as_you: crate::home::hostrun::runs_as_you(path),
            diff: None,
            binary: false,
            sha256: None,
        };
        if st.st_size as u64 > APPLY_LIMIT {
            c.refused = Some(format!(
                "larger than {} MiB; not read (copy it yourself if you want it)",
                APPLY_LIMIT >> 20
            ));
            c.binary = true;
            self.push(filter, c);
            return Ok(());
        }
        c.sha256 = Some(sha256_of(fsat::open_file_at(upper, name)?, APPLY_LIMIT)?);
        if self.with_diff {
            let new = read_limited(fsat::open_file_at(upper, name)?, DIFF_LIMIT)?;
            let old = match real_file {
                Some((r, _)) => read_limited(fsat::open_file_at(r, name)?, DIFF_LIMIT)?,
                None => Some(Vec::new()),
            };
            match (old, new) {
                (Some(o), Some(n)) if is_text(&o) && is_text(&n) => {
                    if o != n {
                        c.diff = Some(unified(path, &o, &n));
                    }
                }
                _ => c.binary = true,
            }
        }
        self.push(filter, c);
        Ok(())
    }
}

pub(super) fn unified(path: &Path, old: &[u8], new: &[u8]) -> String {
    use std::fmt::Write as _;
    let o = String::from_utf8_lossy(old);
    let n = String::from_utf8_lossy(new);
    // lines end at `\n` only, as `home diff` shows them (a `\r` is part of its line): the
    // diff library's own split also ends a line at a lone `\r`, and printed such a line
    // without a `\n`, gluing the next line of the diff onto it
    let ol: Vec<&str> = o.split_inclusive('\n').collect();
    let nl: Vec<&str> = n.split_inclusive('\n').collect();
    // two large texts with nothing in common cost the diff quadratic time: past the
    // deadline it gives a coarser (still correct) diff
    let d = similar::TextDiff::configure()
        .deadline(std::time::Instant::now() + DIFF_DEADLINE)
        .diff_slices(&ol, &nl);
    let mut udiff = d.unified_diff();
    udiff.context_radius(3);
    let mut out = String::new();
    for (i, hunk) in udiff.iter_hunks().enumerate() {
        if i == 0 {
            let _ = writeln!(out, "--- a/~/{}\n+++ b/~/{}", esc(path), esc(path));
        }
        let _ = writeln!(out, "{}", hunk.header());
        for c in hunk.iter_changes() {
            let _ = write!(out, "{}{}", c.tag(), c.value());
            if !c.value().ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
    out
}
