//! Network modes: the allowlist proxy (host side), the relay inside the sandbox, and the
//! refusal log. (Issue 6.)
