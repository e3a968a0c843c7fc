//! The task's environment on macOS. Seatbelt cannot redirect a write, so the home layer
//! and the caches are reached by pointing environment variables at them: `HOME` and
//! `XDG_*` at the home layer, each tool's cache variable at the capsule's cache folder,
//! `TMPDIR` at the task's own temporary folder.

use capsule_bundle::policy::SandboxPolicy;
use std::path::Path;

/// Cache variables and the sub-folder of the capsule cache each one gets.
pub const CACHE_VARS: &[(&str, &str)] = &[
    ("npm_config_cache", "npm"),
    ("YARN_CACHE_FOLDER", "yarn"),
    ("npm_config_store_dir", "pnpm-store"),
    ("PIP_CACHE_DIR", "pip"),
    ("UV_CACHE_DIR", "uv"),
    ("GOCACHE", "go-build"),
    ("GOMODCACHE", "go-mod"),
    ("BUNDLE_USER_CACHE", "bundler"),
    ("COMPOSER_CACHE_DIR", "composer"),
    ("DENO_DIR", "deno"),
    ("HOMEBREW_CACHE", "homebrew"),
];

/// Variables to set for the task (name, value), given the effective policy (canonical
/// paths) and the task's TMPDIR. Variables not listed keep the executor's values.
pub fn task_env(eff: &SandboxPolicy, task_tmp: &Path) -> Vec<(String, String)> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut v = vec![("TMPDIR".to_string(), s(task_tmp))];
    if let Some(h) = &eff.home_layer {
        v.push(("HOME".into(), s(h)));
        v.push(("XDG_CONFIG_HOME".into(), s(&h.join(".config"))));
        v.push(("XDG_DATA_HOME".into(), s(&h.join(".local/share"))));
        v.push(("XDG_STATE_HOME".into(), s(&h.join(".local/state"))));
        if eff.cache_dir.is_none() {
            v.push(("XDG_CACHE_HOME".into(), s(&h.join(".cache"))));
        }
    }
    if let Some(c) = &eff.cache_dir {
        v.push(("XDG_CACHE_HOME".into(), s(c)));
        for (name, sub) in CACHE_VARS {
            v.push((name.to_string(), s(&c.join(sub))));
        }
    }
    v
}
