//! The seccomp filter: refused syscalls, ioctl masks, foreign ABIs. (Issue 4.)
