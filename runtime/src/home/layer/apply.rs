//! Writing the real home from the layer: `apply` (only what the last review showed) and
//! `discard`.

use super::*;

/// What `apply` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Applied {
    #[serde(serialize_with = "capsule_bundle::escape::serialize_paths")]
    pub applied: Vec<PathBuf>,
    /// Changes applied over a real file that moved on (`--force`).
    #[serde(serialize_with = "capsule_bundle::escape::serialize_paths")]
    pub forced: Vec<PathBuf>,
}

/// Parent components and name of a relative path.
fn split(rel: &Path) -> Result<(Vec<OsString>, OsString), LayerError> {
    let mut comps = fsat::plain_components(rel).ok_or_else(|| LayerError::BadPath(esc(rel)))?;
    let name = comps.pop().ok_or_else(|| LayerError::BadPath(esc(rel)))?;
    Ok((comps, name))
}

impl Layer {
    /// Copy the changes under `filter` (all when empty) to the real home directory.
    /// Refuses unsafe entries always, changes not in the last review (`home diff`; with
    /// `token`, only when the last review is that one, see [`crate::home::review`]), and changes
    /// whose real file moved on since the baseline unless `force`. Nothing is written when
    /// anything is refused. The caller holds the exec lock ([`crate::home::lock::exclusive`]).
    pub fn apply(
        &self,
        bundle_dir: &Path,
        filter: &[PathBuf],
        force: bool,
        token: Option<&str>,
    ) -> Result<Applied, LayerError> {
        let changes = self.changes(filter, false)?;
        for f in filter {
            if !changes.iter().any(|c| c.path.starts_with(f)) {
                return Err(LayerError::NoChange(f.clone()));
            }
        }
        let refused: Vec<_> = changes
            .iter()
            .filter_map(|c| c.refused.as_ref().map(|r| (c.path.clone(), r.clone())))
            .collect();
        if !refused.is_empty() {
            return Err(LayerError::Refused(refused));
        }
        if !changes.is_empty() {
            let review = crate::home::review::Review::load(bundle_dir)
                .map_err(io("reading the review in", bundle_dir))?
                .ok_or(LayerError::NotReviewed)?;
            if let Some(t) = token {
                if !review.is(t) {
                    return Err(LayerError::OtherReview(capsule_bundle::escape::name(
                        t.as_bytes(),
                    )));
                }
            }
            let unreviewed: Vec<PathBuf> = review
                .unreviewed(&changes)
                .into_iter()
                .map(|c| c.path.clone())
                .collect();
            if !unreviewed.is_empty() {
                return Err(LayerError::Unreviewed(unreviewed));
            }
        }
        let home_fd = fsat::open_dir(&self.home).map_err(io("opening", &self.home))?;
        let upper_fd = fsat::open_dir(&self.upper).map_err(io("opening", &self.upper))?;
        let mut base = Baseline::load(bundle_dir)
            .map_err(io("reading", &bundle_dir.join(baseline::BASELINE_FILE)))?;
        let mut moved = Vec::new();
        if let Some(b) = &base {
            for c in &changes {
                let comps = fsat::plain_components(&c.path).unwrap_or_default();
                let now = baseline::current(&home_fd, &comps).map_err(|e| LayerError::Io {
                    what: "checking",
                    path: self.home.join(&c.path),
                    source: e,
                })?;
                if let Err(why) = b.moved_on(&c.path, now.as_ref()) {
                    moved.push((c.path.clone(), why));
                }
            }
        } else {
            tracing::warn!(
                "no home baseline in {}: cannot tell whether real files moved on",
                bundle_dir.display()
            );
        }
        if !moved.is_empty() && !force {
            return Err(LayerError::MovedOn(moved));
        }
        let mut done = Applied {
            forced: moved.into_iter().map(|(p, _)| p).collect(),
            ..Default::default()
        };
        // what a killed apply left in the folders this one writes into
        let mut swept = BTreeSet::new();
        for c in &changes {
            let Ok((parents, _)) = split(&c.path) else {
                continue;
            };
            if swept.insert(parents.clone()) {
                if let Ok(dir) = fsat::open_dir_path(&home_fd, &parents) {
                    crate::home::applytmp::remove_stale(&dir);
                }
            }
        }
        for c in &changes {
            self.apply_one(&home_fd, &upper_fd, c)?;
            if let Some(b) = base.as_mut().filter(|_| c.path.to_str().is_some()) {
                let comps = fsat::plain_components(&c.path).unwrap_or_default();
                b.update(&c.path, baseline::current(&home_fd, &comps).ok().flatten());
            }
            done.applied.push(c.path.clone());
        }
        if let Some(b) = &base {
            b.save(bundle_dir)
                .map_err(io("writing", &bundle_dir.join(baseline::BASELINE_FILE)))?;
        }
        Ok(done)
    }

    pub(super) fn apply_one(
        &self,
        home_fd: &OwnedFd,
        upper_fd: &OwnedFd,
        c: &Change,
    ) -> Result<(), LayerError> {
        let real_path = self.home.join(&c.path);
        let (parents, name) = split(&c.path)?;
        let err = |what: &'static str| io(what, &real_path);
        let parent = fsat::create_dir_path(home_fd, &parents, 0o755)
            .map_err(err("creating the folder of"))?;
        let tmp = crate::home::applytmp::name();
        let _ = capsule_bundle::rmtree::remove_at(&parent, &tmp);
        let real_st = fsat::stat_at(&parent, &name).map_err(err("checking"))?;
        let real_is_dir = real_st
            .as_ref()
            .is_some_and(|s| fsat::is_type(s, libc::S_IFDIR));
        match (c.kind, c.entry) {
            (ChangeKind::Removed, _) => {
                capsule_bundle::rmtree::remove_at(&parent, &name).map_err(err("removing"))?;
            }
            (_, EntryType::Dir) => {
                if real_st.is_some() && !real_is_dir {
                    capsule_bundle::rmtree::remove_at(&parent, &name).map_err(err("replacing"))?;
                }
                if !real_is_dir {
                    fsat::mkdir_at(&parent, &name, c.mode.unwrap_or(0o755))
                        .map_err(err("creating"))?;
                }
            }
            (_, EntryType::File) => {
                let up_dir = fsat::open_dir_path(upper_fd, &parents)
                    .map_err(err("reading the layer copy of"))?;
                let mut src =
                    fsat::open_file_at(&up_dir, &name).map_err(err("reading the layer copy of"))?;
                let mode = c.mode.unwrap_or(0o644) & 0o777;
                let mut dst = fsat::create_file_at(&parent, &tmp, 0o600).map_err(err("writing"))?;
                // the bytes written are the bytes hashed: they must be the reviewed ones
                let written = copy_hashed(&mut src, &mut dst).and_then(|sum| {
                    fsat::fchmod(dst.as_raw_fd(), mode)?;
                    dst.flush()?;
                    dst.sync_all()?;
                    Ok(sum)
                });
                match written {
                    Ok(sum) if Some(&sum) == c.sha256.as_ref() => {}
                    Ok(_) => {
                        let _ = capsule_bundle::rmtree::remove_at(&parent, &tmp);
                        return Err(LayerError::ChangedWhileApplying(c.path.clone()));
                    }
                    Err(e) => {
                        let _ = capsule_bundle::rmtree::remove_at(&parent, &tmp);
                        return Err(err("writing")(e));
                    }
                }
                if real_is_dir {
                    capsule_bundle::rmtree::remove_at(&parent, &name).map_err(err("replacing"))?;
                }
                fsat::rename_at(&parent, &tmp, &name).map_err(err("writing"))?;
            }
            (_, EntryType::Symlink) => {
                let target = c.target.clone().unwrap_or_default();
                fsat::symlink_at(&target, &parent, &tmp).map_err(err("writing"))?;
                if real_is_dir {
                    capsule_bundle::rmtree::remove_at(&parent, &name).map_err(err("replacing"))?;
                }
                fsat::rename_at(&parent, &tmp, &name).map_err(err("writing"))?;
            }
            (_, EntryType::Other) => {
                return Err(LayerError::Refused(vec![(
                    c.path.clone(),
                    "not a file, folder or symlink".into(),
                )]))
            }
        }
        Ok(())
    }

    /// Remove the changes under `filter` (all when empty) from the layer. Returns the
    /// relative paths removed from the upper directory.
    pub fn discard(&self, filter: &[PathBuf]) -> Result<Vec<PathBuf>, LayerError> {
        let upper_fd = match fsat::open_dir(&self.upper) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("opening", &self.upper)(e)),
        };
        let mut removed = Vec::new();
        if filter.is_empty() {
            for n in fsat::list(&upper_fd).map_err(io("reading", &self.upper))? {
                let p = PathBuf::from(&n);
                if self.is_excluded(&p) {
                    continue;
                }
                capsule_bundle::rmtree::remove_at(&upper_fd, &n)
                    .map_err(io("removing", &self.upper.join(&n)))?;
                removed.push(p);
            }
            return Ok(removed);
        }
        // check every path first: nothing is removed when one is wrong
        let mut plan = Vec::new();
        for f in filter {
            let (parents, name) = split(f)?;
            let mut cur = fsat::dup(&upper_fd).map_err(io("opening", &self.upper))?;
            let mut so_far = PathBuf::new();
            for p in &parents {
                so_far.push(p);
                cur = match fsat::open_dir_at(&cur, p) {
                    Ok(d) => d,
                    Err(_) => return Err(LayerError::NoChange(f.clone())),
                };
                if is_opaque(&cur) {
                    return Err(LayerError::InsideOpaque {
                        path: f.clone(),
                        dir: so_far.clone(),
                    });
                }
            }
            match fsat::stat_at(&cur, &name) {
                Ok(Some(_)) => plan.push((cur, name, f.clone())),
                _ => return Err(LayerError::NoChange(f.clone())),
            }
        }
        for (dir, name, rel) in plan {
            capsule_bundle::rmtree::remove_at(&dir, &name)
                .map_err(io("removing", &self.upper.join(&rel)))?;
            removed.push(rel);
        }
        Ok(removed)
    }
}
