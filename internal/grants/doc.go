// Package grants mounts live folder grants into a host-side slot whose
// mount propagation carries them into a running sandbox, and reads back
// from the kernel what a sandbox shows of them: its mountinfo, the
// processes still holding a revoked grant, the process behind a loopback
// connection. The docker provider uses it (its slot is a tmpfs in the
// host's mount namespace, bound into the container with rslave
// propagation); the mechanism is the consent experiment's (reference
// consent/README.md §2 (B) and §3): open_tree(2) clones, mount_setattr(2),
// move_mount(2), mount_namespaces(7).
package grants
