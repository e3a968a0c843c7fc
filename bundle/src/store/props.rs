//! Property tests of the readers of what the runtime reads back from disk: the workspace's
//! manifest ([`crate::workspace::manifest::Manifest::read`]) and the bundle's
//! `bundle.json` and `policy.json` ([`crate::store::record::read_record`],
//! [`crate::store::record::read_policy`]). Any bytes,
//! and JSON documents generated from the records' own field names with hostile values
//! (newlines, controls, wrong types, unknown enum variants), are read without a panic and,
//! when refused, with a one-line error; a manifest that is read is written back and read
//! again unchanged. Cases per run: `PROPTEST_CASES` (defaults below; `hack/fuzz.sh` runs
//! more).

use crate::layout::bundle_files;
use crate::store::record::{read_policy, read_record};
use crate::workspace::manifest::Manifest;
use proptest::prelude::*;
use serde_json::Value;
use std::path::Path;

/// `PROPTEST_CASES` when set, else `cases`.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

/// Field names of the manifest, the record, the policy and their parts, and a few more.
const KEYS: &[&str] = &[
    "capsule_name",
    "spec_path",
    "workspace",
    "opened_at",
    "source",
    "synthetic",
    "repo",
    "commit",
    "head",
    "branch",
    "network",
    "tree_digest",
    "environment",
    "probes",
    "name",
    "run",
    "command",
    "expect",
    "capsule",
    "bundle",
    "policy_digest",
    "version",
    "grants",
    "digest",
    "by",
    "tool_reveals",
    "limits",
    "memory",
    "cpus",
    "read_only",
    "tmp_dir",
    "home",
    "home_layer",
    "cache_dir",
    "writable",
    "hidden",
    "path",
    "reason",
    "revealed",
    "pass_env",
    "devices",
    "mode",
    "allow",
    "secrets",
    "publish",
    "Reveal",
    "NetworkOpen",
    "x\ny",
    "",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "none",
            "allowlist",
            "open",
            "credentials",
            "read_only",
            "x\ny",
            "a\r\nb",
            "\u{1b}[2J",
            "\u{202e}",
            "/abs",
            "../up",
            "sha256:00",
            "2026-01-01T00:00:00Z",
            "zero",
            "nonzero",
            "",
        ])
        .prop_map(str::to_string),
        "\\PC{0,12}",
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        (u64::MAX - 2..=u64::MAX).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

/// Valid documents of each kind, the starting points of [`near_document`].
fn valid_documents() -> Vec<Value> {
    use serde_json::json;
    vec![
        json!({"capsule_name": "c", "workspace": "/w", "opened_at": "t",
               "source": {"synthetic": true, "head": "00", "branch": "main"},
               "network": "none", "environment": {"env": {"K": "v"}},
               "probes": [{"name": "p", "run": "true", "expect": "zero"}],
               "capsule": {"bundle": "/b", "policy_digest": "sha256:00"}}),
        json!({"version": 2, "name": "c", "workspace": "/w", "opened_at": "t",
               "policy_digest": "sha256:00", "network": "live", "tree_digest": "00",
               "grants": {"grants": [{"kind": "reveal", "value": "/x"}, {"kind": "network_open"}], "digest": "d", "by": "all"},
               "tool_reveals": ["/t"], "limits": {"memory": "1G"}}),
        json!({"version": 1, "capsule_name": "c", "workspace": "/w", "read_only": ["/w/m"],
               "tmp_dir": "/b/tmp", "home": "/h", "home_layer": null, "cache_dir": null,
               "writable": ["/x"], "hidden": [{"path": "/h/.ssh", "reason": "credentials"}],
               "revealed": [], "pass_env": ["TERM"], "devices": ["fuse"],
               "network": {"mode": "allowlist", "allow": ["a.test"], "secrets": {"T": ["a.test"]},
                           "publish": ["8080"]}}),
    ]
}

/// One change to a document: at a key (or a key of the object under it), a new value
/// or none.
type Mutation = (&'static str, Option<&'static str>, Option<Value>);

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(
        (
            prop::sample::select(KEYS),
            prop::option::of(prop::sample::select(KEYS)),
            prop::option::weighted(0.8, json()),
        ),
        1..4,
    )
}

/// `doc` with `muts` applied.
fn mutate(mut doc: Value, muts: Vec<Mutation>) -> Value {
    for (k, sub, v) in muts {
        let Some(top) = doc.as_object_mut() else {
            break;
        };
        let target = match sub {
            Some(s) => match top.get_mut(k).and_then(Value::as_object_mut) {
                Some(inner) => (inner, s),
                None => (top, k),
            },
            None => (top, k),
        };
        let (obj, key) = target;
        match v {
            Some(v) => obj.insert(key.to_string(), v),
            None => obj.remove(key),
        };
    }
    doc
}

/// A document close to a real one: a valid one with a few fields replaced or removed, so
/// that the readers get past "missing field" to every field's own checks.
fn near_document() -> impl Strategy<Value = Value> {
    (prop::sample::select(valid_documents()), mutations()).prop_map(|(d, m)| mutate(d, m))
}

/// `a` and `b` are equal JSON, floats to within their last digits (serde_json without
/// its `float_roundtrip` feature may read a float back one unit off).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Write `bytes` as each file and read each back: no panic, errors on one line.
fn read_all(dir: &Path, bytes: &[u8]) -> Result<(), TestCaseError> {
    let one_line = |what: &str, e: String| -> Result<(), TestCaseError> {
        prop_assert!(
            !e.contains('\n') && !e.contains('\r'),
            "{} error on more than one line: {:?}",
            what,
            e
        );
        Ok(())
    };
    let manifest = dir.join(crate::workspace::manifest::MANIFEST);
    std::fs::write(&manifest, bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
    match Manifest::read(&manifest) {
        Ok(m) => {
            let again = serde_json::to_vec(&m).map_err(|e| TestCaseError::fail(e.to_string()))?;
            std::fs::write(&manifest, again).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back = Manifest::read(&manifest).map_err(TestCaseError::fail)?;
            let (a, b) = (serde_json::to_value(&back), serde_json::to_value(&m));
            prop_assert!(
                matches!((a, b), (Ok(a), Ok(b)) if same(&a, &b)),
                "the manifest does not read back as written: {:?} vs {:?}",
                back,
                m
            );
        }
        Err(e) => one_line("manifest", e)?,
    }
    for f in [bundle_files::RECORD, bundle_files::POLICY] {
        std::fs::write(dir.join(f), bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    if let Err(e) = read_record(dir) {
        one_line("bundle.json", e.to_string())?;
    }
    if let Err(e) = read_policy(dir) {
        one_line("policy.json", e.to_string())?;
    }
    Ok(())
}

/// The starting points of [`near_document`] are themselves read.
#[test]
fn valid_documents_are_read() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let docs = valid_documents();
    std::fs::write(
        dir.path().join(crate::workspace::manifest::MANIFEST),
        docs[0].to_string(),
    )
    .unwrap();
    std::fs::write(dir.path().join(bundle_files::RECORD), docs[1].to_string()).unwrap();
    std::fs::write(dir.path().join(bundle_files::POLICY), docs[2].to_string()).unwrap();
    Manifest::read(&dir.path().join(crate::workspace::manifest::MANIFEST)).unwrap();
    read_record(dir.path()).unwrap();
    read_policy(dir.path()).unwrap();
}

/// Found by `generated_records_never_panic`: serde's "unknown variant" quotes the file's
/// text raw, so a variant with a newline gave a two-line error.
#[test]
fn regression_unknown_variant_error_is_one_line() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut doc = valid_documents()[2].clone();
    doc["network"]["mode"] = Value::from("x\ny\u{1b}[2J");
    std::fs::write(dir.path().join(bundle_files::POLICY), doc.to_string()).unwrap();
    let e = read_policy(dir.path()).unwrap_err().to_string();
    assert!(e.contains("unknown variant `x\\ny\\x1b[2J`"), "{e}");
    assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e}");
}

proptest! {
    #![proptest_config(config(2200))]

    #[test]
    fn reading_any_bytes_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        doc in json(),
        cut in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir_in("/dev/shm").map_err(|e| TestCaseError::fail(e.to_string()))?;
        read_all(dir.path(), &bytes)?;
        // a JSON document cut anywhere
        let text = serde_json::to_vec(&doc).map_err(|e| TestCaseError::fail(e.to_string()))?;
        read_all(dir.path(), &text[..cut.index(text.len() + 1)])?;
    }

    #[test]
    fn generated_records_never_panic(doc in near_document()) {
        let dir = tempfile::tempdir_in("/dev/shm").map_err(|e| TestCaseError::fail(e.to_string()))?;
        let text = serde_json::to_vec(&doc).map_err(|e| TestCaseError::fail(e.to_string()))?;
        read_all(dir.path(), &text)?;
    }
}
