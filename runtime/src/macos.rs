//! The macOS executor: `sandbox-exec` with a generated Seatbelt profile. (Issue 7.)
