//! Round trip: what the renderer writes, the parser reads back unchanged. Paths full of
//! `"`, `\`, `)`, `;`, newlines and non-ASCII characters travel as parameters and never
//! appear in the text; literals with such characters (no control characters) survive
//! escaping.

mod common;
use capsule_bundle::policy::{HiddenPath, HiddenReason, NetworkMode};
use capsule_seatbelt::sbpl::{
    self, Action, Filter, Item, Modifier, Operation, Profile, Rule, Str, OPERATIONS,
};
use capsule_seatbelt::{generate_checked, parse, Evaluator, ModelResolver, Target};
use proptest::prelude::*;
use std::path::PathBuf;

/// A path component made of nasty characters (never `/`, never NUL).
fn nasty_component() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('"'),
            Just('\\'),
            Just(')'),
            Just('('),
            Just(';'),
            Just('\n'),
            Just(' '),
            Just('é'),
            Just('日'),
            Just('#'),
            Just('a'),
            Just('z'),
        ],
        1..8,
    )
    .prop_map(|v| v.into_iter().collect::<String>())
    .prop_filter("not . or ..", |s| s != "." && s != "..")
}

/// A literal: anything but control characters.
fn literal() -> impl Strategy<Value = String> {
    "[^\\p{Cc}]{0,16}"
}

fn str_arg() -> impl Strategy<Value = Str> {
    prop_oneof![literal().prop_map(Str::Lit), literal().prop_map(Str::Param)]
}

fn leaf_filter() -> impl Strategy<Value = Filter> {
    prop_oneof![
        str_arg().prop_map(Filter::Literal),
        str_arg().prop_map(Filter::Subpath),
        str_arg().prop_map(Filter::GlobalName),
        literal().prop_map(Filter::Regex),
        literal().prop_map(Filter::RemoteIp),
        literal().prop_map(Filter::LocalIp),
        "[a-z][a-z-]{0,10}".prop_map(Filter::Target),
        str_arg().prop_map(|s| Filter::RemoteUnixSocket(Box::new(Filter::Subpath(s)))),
        str_arg().prop_map(|s| Filter::LocalUnixSocket(Box::new(Filter::Literal(s)))),
    ]
}

fn filter() -> impl Strategy<Value = Filter> {
    leaf_filter().prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Filter::RequireAll),
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Filter::RequireAny),
            inner.prop_map(|f| Filter::RequireNot(Box::new(f))),
        ]
    })
}

fn rule() -> impl Strategy<Value = Rule> {
    (
        any::<bool>(),
        proptest::collection::vec(0..OPERATIONS.len(), 1..4),
        proptest::collection::vec(filter(), 0..4),
        proptest::collection::vec(
            prop_oneof![
                literal().prop_map(Modifier::Message),
                Just(Modifier::Report),
                Just(Modifier::NoSandbox)
            ],
            0..2,
        ),
    )
        .prop_map(|(allow, ops, filters, modifiers)| Rule {
            action: if allow { Action::Allow } else { Action::Deny },
            operations: ops
                .into_iter()
                .map(|i| Operation::new(OPERATIONS[i].0))
                .collect(),
            filters,
            modifiers,
        })
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        4 => rule().prop_map(Item::Rule),
        1 => any::<u32>().prop_map(Item::Version),
        1 => literal().prop_map(Item::Comment),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn model_round_trips(items in proptest::collection::vec(item(), 0..12)) {
        let p = Profile { items };
        let text = sbpl::render(&p).unwrap();
        let back = parse::parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(back, p);
    }

    #[test]
    fn nasty_paths_travel_as_parameters(
        ws in proptest::collection::vec(nasty_component(), 1..3),
        secret in nasty_component(),
        mode in 0usize..4,
    ) {
        let mode = common::MODES[mode];
        let mut p = common::policy(mode);
        let ws: PathBuf = PathBuf::from("/Users/u/ws").join(ws.iter().collect::<PathBuf>());
        p.workspace = ws.clone();
        // in a folder the home shows (default deny hides the rest of it anyway)
        let secret_path = PathBuf::from("/Users/u/.config/git").join(&secret);
        p.hidden.push(HiddenPath { path: secret_path.clone(), reason: HiddenReason::Requested });
        let g = generate_checked(&common::inputs(&p), &ModelResolver::macos()).unwrap();
        // the text holds no path: the nasty names never appear in it
        for name in ws.iter().skip(4).chain([secret.as_ref()]) {
            let name = name.to_str().unwrap();
            if name.chars().any(|c| c != 'a' && c != 'z' && c != ' ') {
                let needle = format!("/{name}");
                let pasted = g.text.contains(&needle);
                prop_assert!(!pasted, "{:?} pasted into the text", name);
            }
        }
        // and they come back unchanged through the parameters
        let back = parse::parse(&g.text).unwrap();
        prop_assert_eq!(&back, &g.profile);
        prop_assert!(g.params.values().any(|v| v == ws.to_str().unwrap()));
        let ev = Evaluator::new(&back, &g.params).unwrap();
        prop_assert!(ev.decide("file-write-data", &Target::Path(ws.join("f"))).allow);
        prop_assert!(!ev.decide("file-read-data", &Target::Path(secret_path.join("k"))).allow);
        let beside = PathBuf::from(format!("{}x", secret_path.display()));
        prop_assert!(ev.decide("file-read-data", &Target::Path(beside)).allow);
    }
}

#[test]
fn control_characters_are_refused_in_literals() {
    let mut r = Rule::new(Action::Deny, &["default"], vec![]);
    r.modifiers.push(Modifier::Message("a\nb".into()));
    let p = Profile {
        items: vec![Item::Rule(r)],
    };
    assert!(sbpl::render(&p).is_err());
    let r = Rule::new(
        Action::Allow,
        &["file-read*"],
        vec![Filter::Literal(Str::Lit("/a\0b".into()))],
    );
    assert!(sbpl::render(&Profile {
        items: vec![Item::Rule(r)]
    })
    .is_err());
}

#[test]
fn nonce_is_validated() {
    use capsule_seatbelt::Nonce;
    assert!(Nonce::parse("short").is_err());
    assert!(Nonce::parse("capsule-\"; (allow default)").is_err());
    assert!(Nonce::parse("capsule-0123456789").is_ok());
    let n = Nonce::random().unwrap();
    assert!(Nonce::parse(n.as_str()).is_ok());
    let _ = NetworkMode::None;
}
