//! What isolation this machine gives (user namespaces, Landlock ABI, seccomp), and the
//! operator's knowing acceptance of weaker isolation. (Issue 4.)
