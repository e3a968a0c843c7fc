//! `capsule-policy` owns the launch-policy gate: Kitsoki's `agent_launch_policy` block in
//! `.kitsoki.yaml` / `.kitsoki.local.yaml`, the five checks, and the decision records.
