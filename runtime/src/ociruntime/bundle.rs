//! Reading a bundle's `config.json` into the config model of the container's plan
//! ([`crate::plan::container::config`]): parsed as its closed list of fields, then the
//! values it cannot honour refused ([`crate::plan::container::config::check`]).

use crate::plan::container::config::{check, Spec};
use std::path::Path;

/// Read `bundle/config.json`. Errors: one line naming the file, the field and where.
pub fn load(bundle: &Path) -> Result<Spec, String> {
    let path = bundle.join("config.json");
    let text = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let spec: Spec = serde_json::from_slice(&text).map_err(|e| {
        format!(
            "{}: {e} (capsule-runc refuses fields it cannot enforce)",
            path.display()
        )
    })?;
    check(&spec).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(spec)
}
