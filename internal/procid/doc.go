// Package procid names a process across pid reuse — its pid and its start
// time (Linux: /proc/PID/stat field 22, clock ticks after boot; Windows:
// the creation time, a FILETIME) — and kills it only while the pid still
// names that process. The mxc provider's kept wxc-exec and the
// isolation_session service's in-session supervisor use it.
package procid
