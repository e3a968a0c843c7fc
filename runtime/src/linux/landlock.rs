//! Landlock rules derived from the sandbox policy (second wall). (Issue 4.)
