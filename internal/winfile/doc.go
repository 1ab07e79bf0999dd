// Package winfile opens and checks Windows files the way corral trusts
// them: a path walked from its volume root by handle, never through a
// link, and a file or directory checked on the handle it was opened as
// (its type, links, owner and DACL). The audit log, the gateway's token,
// lock and directories and the mxc provider's private directories use it.
// It has code on Windows only.
package winfile
