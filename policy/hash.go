package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Hash returns "sha256:<hex>" of the canonical JSON of p: p with every
// default made explicit (Protected, Env.Pass, IncludeWorkdir, network mode,
// one entry per layer, the consent section's defaults) and marshalled with encoding/json (struct fields in
// declaration order, map keys sorted, sizes in bytes, durations as Go
// duration strings). Formatting, comments, key order and YAML-versus-JSON do
// not change the hash; spelling out a default does not either (git:
// read-only is normalised to omitted instead).
func Hash(p *Policy) string {
	sum := sha256.Sum256(canonicalJSON(p))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func canonicalJSON(p *Policy) []byte {
	c := *p
	c.file, c.pos = "", nil
	if c.Filesystem.Protected == nil {
		c.Filesystem.Protected = DefaultProtected
	}
	if c.Process.Env.Pass == nil {
		c.Process.Env.Pass = defaultEnvPass(p.OS())
	}
	if c.Filesystem.IncludeWorkdir == nil {
		t := true
		c.Filesystem.IncludeWorkdir = &t
	}
	if c.Network.Mode == "" {
		c.Network.Mode = NetworkNone
	}
	if c.Network.UnixSockets == "" {
		c.Network.UnixSockets = DefaultFor(p.OS()).Network.UnixSockets
	}
	if c.Filesystem.Git == GitReadOnly {
		c.Filesystem.Git = "" // the default, omitted: hashes from before the field stay valid
	}
	if p.Consent != nil {
		cs := p.Consent.withDefaults()
		c.Consent = &cs
	}
	layers := Layers{}
	for _, l := range AllLayers {
		layers[l] = p.Layers.Requirement(l)
	}
	for l, req := range p.Layers {
		if !knownLayer(l) { // invalid, but must still change the hash
			layers[l] = req
		}
	}
	c.Layers = layers
	data, err := json.Marshal(&c)
	if err != nil {
		panic("policy: cannot marshal policy: " + err.Error()) // plain data; cannot happen
	}
	return data
}
