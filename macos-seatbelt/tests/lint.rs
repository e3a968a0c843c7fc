//! The linter passes every generated profile and catches each forbidden construct (one
//! negative test per kind, on hand-written text run through the parser).

mod common;
use capsule_seatbelt::lint::{lint, Kind};
use capsule_seatbelt::{generate_checked, parse, ModelResolver};
use common::*;
use std::collections::BTreeMap;

const HEAD: &str = "(version 1)\n(deny default (with message \"capsule-0123456789\"))\n";

fn kinds(body: &str, params: &[(&str, &str)]) -> Vec<Kind> {
    let p = parse::parse(&format!("{HEAD}{body}")).unwrap();
    let map: BTreeMap<String, String> = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    lint(&p, &map).into_iter().map(|f| f.kind).collect()
}

#[test]
fn generated_profiles_are_clean() {
    for &mode in MODES {
        let p = policy(mode);
        let g = generate_checked(&inputs(&p), &ModelResolver::macos()).unwrap();
        let findings = lint(&parse::parse(&g.text).unwrap(), &g.params);
        assert!(findings.is_empty(), "{findings:?}");
    }
}

#[test]
fn a_clean_hand_written_profile_passes() {
    let k = kinds(
        "(allow file-read*)\n(allow file-write* (subpath (param \"WS\")))\n(allow network-outbound (remote ip \"localhost:*\"))\n(allow file-read* (regex #\"^/usr/lib/[a-z]+$\"))",
        &[("WS", "/Users/u/ws")],
    );
    assert!(k.is_empty(), "{k:?}");
}

#[test]
fn catches_each_forbidden_construct() {
    let ws = [("WS", "/Users/u/ws")];
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Kind);
    let cases: &[Case] = &[
        (
            "(allow file-frobnicate (subpath (param \"WS\")))",
            &ws,
            Kind::UnknownOperation,
        ),
        (
            "(allow file-read* (vnode-type REGULAR-FILE))",
            &[],
            Kind::UnknownFilter,
        ),
        (
            "(allow network-outbound (remote ip \"example.com:443\"))",
            &[],
            Kind::UnknownFilter,
        ),
        (
            "(allow file-read* (with something))",
            &[],
            Kind::UnknownModifier,
        ),
        ("(allow default)", &[], Kind::AllowDefault),
        (
            "(allow process-exec (with no-sandbox))",
            &[],
            Kind::NoSandbox,
        ),
        ("(import \"system.sb\")", &[], Kind::ForbiddenForm),
        ("(define x 1)", &[], Kind::ForbiddenForm),
        ("(allow file-write*)", &[], Kind::UnfilteredAllow),
        ("(allow file-write-data)", &[], Kind::UnfilteredAllow),
        ("(allow network*)", &[], Kind::UnfilteredAllow),
        ("(allow network-outbound)", &[], Kind::UnfilteredAllow),
        ("(allow mach-lookup)", &[], Kind::UnfilteredAllow),
        ("(allow file*)", &[], Kind::UnfilteredAllow),
        (
            "(allow file-read* (regex #\"/Users/u\"))",
            &[],
            Kind::UnanchoredRegex,
        ),
        (
            "(allow file-read* (regex #\"^/Users/\\\\w+\"))",
            &[],
            Kind::PcreRegex,
        ),
        (
            "(allow file-read* (regex #\"^/a(?!b)\"))",
            &[],
            Kind::PcreRegex,
        ),
        (
            "(allow file-write* (subpath \"/Users/u/ws\"))",
            &[],
            Kind::LiteralPath,
        ),
        (
            "(allow file-write* (subpath (param \"WS\")))",
            &[("WS", "/Users/u/ws/")],
            Kind::NonCanonicalPath,
        ),
        (
            "(allow file-write* (subpath (param \"WS\")))",
            &[("WS", "/Users//u")],
            Kind::NonCanonicalPath,
        ),
        (
            "(allow file-write* (subpath (param \"WS\")))",
            &[("WS", "/Users/u/../v")],
            Kind::NonCanonicalPath,
        ),
        (
            "(allow file-write* (subpath (param \"WS\")))",
            &[("WS", "Users/u")],
            Kind::NonCanonicalPath,
        ),
        (
            "(allow file-write* (subpath (param \"NOPE\")))",
            &ws,
            Kind::UndefinedParam,
        ),
        (
            "(allow file-read* (subpath (param \"WS\")))\n(deny file-read*)",
            &ws,
            Kind::FallbackAfterOverride,
        ),
    ];
    for (body, params, want) in cases {
        let k = kinds(body, params);
        assert!(k.contains(want), "{body}: want {want:?}, got {k:?}");
    }
    // preamble
    let p = parse::parse("(version 1)\n(allow file-read*)\n(deny default)").unwrap();
    assert!(lint(&p, &BTreeMap::new())
        .iter()
        .any(|f| f.kind == Kind::BadPreamble));
}

#[test]
fn catches_oversized_rules() {
    let big = "/Users/u/".to_string() + &"x".repeat(2000);
    let mut body = String::from("(deny file-read*");
    let mut params = Vec::new();
    for i in 0..10 {
        body.push_str(&format!(" (subpath (param \"P{i}\"))"));
        params.push((format!("P{i}"), format!("{big}{i}")));
    }
    body.push(')');
    let refs: Vec<(&str, &str)> = params
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert!(kinds(&body, &refs).contains(&Kind::OversizedRule));
}

#[test]
fn generator_splits_long_lists_under_the_budget() {
    let mut p = policy(capsule_bundle::policy::NetworkMode::None);
    // 400 hidden siblings with long names
    for i in 0..400 {
        p.hidden.push(capsule_bundle::policy::HiddenPath {
            path: format!("/Users/u/src/{}-{i}", "p".repeat(200)).into(),
            reason: capsule_bundle::policy::HiddenReason::SiblingProject,
        });
    }
    let g = generate_checked(&inputs(&p), &ModelResolver::macos()).unwrap();
    let rules = g.profile.rules().count();
    assert!(rules > 12, "long lists must be split: {rules} rules");
}
