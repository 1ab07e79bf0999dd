package consent

import (
	"context"
	"fmt"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Adopt takes over the folder grants a sandbox still has from an earlier
// broker (a gateway that restarted: the grants live in the sandbox's
// supervisor, the decisions died with the old process): each one the
// sandbox shows in force becomes a grant of this broker, scope session,
// desired and effective as read back, so that it is listed and can be
// revoked; none is left in force unseen. It returns how many it adopted.
func (b *Broker) Adopt(ctx context.Context) (int, error) {
	sts, err := b.cfg.Applier.FolderGrants(ctx)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, st := range sts {
		if st.State != provider.GrantEffective || b.labels[st.Label] {
			continue
		}
		b.labels[st.Label] = true
		access := policy.AccessReadWrite
		if st.ReadOnly {
			access = policy.AccessReadOnly
		}
		now := b.now()
		e := &entry{key: decisionKey(KindFolder, st.Source, access), granted: decisionKey(KindFolder, st.Source, access)}
		e.r = Request{ID: randID("req-"), Sandbox: b.cfg.Sandbox, Kind: KindFolder, Target: st.Source, Access: access, Asked: 1,
			Requester: Requester{Via: "adopted"}, Created: now, State: StateApproved, Effective: true, Path: st.Path,
			Detail: "granted before this broker started (adopted from the sandbox)"}
		st := st
		g := &Grant{ID: randID("grant-"), Sandbox: b.cfg.Sandbox, Request: e.r.ID, Kind: KindFolder, Target: st.Source, Access: access,
			Scope: ScopeSession, Desired: true, Effective: true, Mode: provider.ConsentLive, Path: st.Path, Folder: &st,
			Detail: fmt.Sprintf("adopted: in force in the sandbox (label %s) when this broker started", st.Label)}
		e.r.Grant = g.ID
		b.keep(e)
		b.grants[g.ID] = g
		b.gorder = append(b.gorder, g.ID)
		b.grantReq[g.ID] = e
		n++
	}
	return n, nil
}
