//! The task's own environment: the home layer and its review, package caches, revealed
//! projects next to the source, devices. (Issue 5.)
