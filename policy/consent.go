package policy

import "time"

// Consent is the consent section: the ceiling of what a running workload
// may ask a person for (a folder, a host). Nil: nothing may be asked, and
// no request channel is served. A request outside Ask, inside Never, or
// inside a filesystem.deny / network.deny entry is refused without a
// prompt, with the reason (docs/consent.md).
//
//	consent:
//	  folders: {ask: ["~/src/**"], never: [~/.ssh], access: rw}
//	  hosts:   {ask: ["*.github.com:443"], never: [169.254.169.254]}
//	  timeout: 10m        # pending → expired (a deny)
//	  max_pending: 5
//	  rate: {burst: 5, per: 1m}
//	  persist: ~/.config/corral/grants.local.yaml
type Consent struct {
	Folders *ConsentFolders `json:"folders,omitempty" yaml:"folders"`
	Hosts   *ConsentHosts   `json:"hosts,omitempty" yaml:"hosts"`
	// Timeout is how long a request stays pending before it expires
	// (a deny); default DefaultConsentTimeout, at most MaxConsentTimeout.
	Timeout Duration `json:"timeout,omitempty" yaml:"timeout"`
	// MaxPending bounds the requests pending at once; more are refused
	// (rate_limited). Default DefaultConsentMaxPending, at most 100.
	MaxPending int `json:"max_pending,omitempty" yaml:"max_pending"`
	// Rate is a token bucket over new requests (coalesced ones are free);
	// default DefaultConsentBurst per DefaultConsentPer.
	Rate *ConsentRate `json:"rate,omitempty" yaml:"rate"`
	// Persist is the local file of standing ("always") grants; default
	// DefaultConsentPersist. It must not be reachable from the sandbox.
	Persist string `json:"persist,omitempty" yaml:"persist"`
}

// ConsentFolders is consent.folders.
type ConsentFolders struct {
	// Ask are path globs ("~", "{workdir}" expanded; "*" within one
	// component, a "**" component any number of them) a request's
	// canonical path must match.
	Ask []string `json:"ask" yaml:"ask"`
	// Never are paths never granted: a request at or inside one is
	// refused, and one inside a granted tree is masked.
	Never []string `json:"never,omitempty" yaml:"never"`
	// Access is the most that may be granted: ro (the default) or rw.
	Access Access `json:"access,omitempty" yaml:"access"`
}

// ConsentHosts is consent.hosts. Entries are "HOST[:PORT]", HOST as an
// allow entry's (an exact name, "*." or "**." wildcard, an IP literal or
// CIDR), PORT a number or "*" (default 443).
type ConsentHosts struct {
	Ask   []string `json:"ask" yaml:"ask"`
	Never []string `json:"never,omitempty" yaml:"never"`
}

// ConsentRate is consent.rate: Burst new requests, refilled at Burst per
// Per.
type ConsentRate struct {
	Burst int      `json:"burst" yaml:"burst"`
	Per   Duration `json:"per" yaml:"per"`
}

// Consent defaults and bounds.
const (
	DefaultConsentTimeout    = 10 * time.Minute
	MaxConsentTimeout        = 24 * time.Hour
	DefaultConsentMaxPending = 5
	DefaultConsentBurst      = 5
	DefaultConsentPer        = time.Minute
	DefaultConsentPersist    = "~/.config/corral/grants.local.yaml"
)

// ResolvedConsent is the consent section made concrete (Resolve): globs
// and paths expanded and canonical, defaults filled in.
type ResolvedConsent struct {
	Folders      []ConsentGlob `json:"folders,omitempty"`       // folders.ask
	FolderNever  []string      `json:"folders_never,omitempty"` // canonical
	FolderAccess Access        `json:"folders_access,omitempty"`
	Hosts        []ConsentHost `json:"hosts,omitempty"` // hosts.ask
	HostNever    []ConsentHost `json:"hosts_never,omitempty"`
	Timeout      time.Duration `json:"timeout"`
	MaxPending   int           `json:"max_pending"`
	Burst        int           `json:"burst"`
	Per          time.Duration `json:"per"`
	Persist      string        `json:"persist"` // canonical (its directory resolved), may not exist yet
}

// ConsentGlob is one folders.ask entry: Glob is absolute with its
// literal leading components canonical.
type ConsentGlob struct {
	Glob  string `json:"glob"`
	Field string `json:"field"` // "consent.folders.ask[0]"
}

// ConsentHost is one hosts entry: Host as an Endpoint's, Port 0 for any.
type ConsentHost struct {
	Host  string `json:"host"`
	Port  int    `json:"port"`
	Field string `json:"field"`
}

// FolderCeiling is what the ceiling says of one folder request that may
// be asked (AskFolder).
type FolderCeiling struct {
	Field string // the ask entry that allows it
	// Masks are the canonical paths inside the folder that stay hidden:
	// filesystem.deny entries and consent.folders.never.
	Masks []string
	// ReadOnly are the canonical paths inside the folder that stay
	// read-only in a read-write grant (the protected entries).
	ReadOnly []string
}

// ConsentRefusal is why a request may not even be asked: Field names the
// policy entry that refuses it ("consent.folders.never[1]",
// "filesystem.deny[0]"; "consent.folders.ask" when nothing allows it).
type ConsentRefusal struct {
	Field  string
	Reason string
}

func (e *ConsentRefusal) Error() string { return e.Reason + " (" + e.Field + ")" }
