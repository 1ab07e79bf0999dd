// Package trust checks that no user but the caller (and root) can change
// the directories on the way to a path corral trusts: a service's base
// directory, the gateway's bearer-token file. A directory another user
// can write could have the trusted file swapped under corral between a
// check and a use.
package trust
