package policy

// AskFolder checks one folder request against the consent ceiling: path is
// the canonical host directory asked for, access ro or rw. It is refused
// (with the entry that refuses it) when the policy has no consent.folders,
// when no folders.ask glob matches path, when access is above
// folders.access, when path is at or inside a folders.never entry or a
// filesystem.deny entry, or when it is at or above a path the policy keeps
// from the sandbox that cannot be masked (the home itself, /, /proc, /sys,
// /dev, Corral's own state). Otherwise it returns the ask entry that allows
// it and the masks and read-only paths inside it.
func (r *Resolved) AskFolder(path string, access Access) (FolderCeiling, *ConsentRefusal) {
	return FolderCeiling{}, &ConsentRefusal{Field: "consent", Reason: "not implemented"}
}

// AskHost checks one host request (host a name or IP literal, lower case,
// port 1-65535) against the consent ceiling: refused when the policy has
// no consent.hosts or no network mode proxy, when no hosts.ask entry
// matches, or when a hosts.never or network.deny entry does. It returns the
// ask entry that allows it.
func (r *Resolved) AskHost(host string, port int) (string, *ConsentRefusal) {
	return "", &ConsentRefusal{Field: "consent", Reason: "not implemented"}
}
