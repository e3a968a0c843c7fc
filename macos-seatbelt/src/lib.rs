//! `capsule-seatbelt` owns macOS Seatbelt profiles: a typed SBPL model rendered from the
//! capsule's sandbox policy, plus a parser, linter and evaluator so all of it is tested on
//! Linux.
