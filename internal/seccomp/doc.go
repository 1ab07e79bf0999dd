// Package seccomp builds and installs Corral's seccomp-bpf syscall filter.
//
// The filter is a classic BPF program over struct seccomp_data (see the
// kernel's Documentation/userspace-api/seccomp_filter.rst). It first checks
// the audit architecture (a foreign architecture kills the process), then
// walks a table of rules keyed by syscall number; anything not matched is
// allowed. Denied calls fail with EPERM, except socket families outside the
// allow list (EAFNOSUPPORT) and clone3 (ENOSYS, so that libc falls back to
// clone, whose flags the filter can inspect — the same choice as Docker's
// default seccomp profile). With Options.DenyUnixSockets (the policy's
// network.unix_sockets: deny), socket(AF_UNIX) and socketpair(AF_UNIX) of
// any type but SOCK_STREAM and SOCK_SEQPACKET fail with EPERM.
//
// The package is Linux-only; Build reports an error on architectures that
// have no syscall table here (only amd64 and arm64 do).
package seccomp
