package audit

import (
	"net/netip"
	"time"
)

// OCSF constants for the Network Activity class (schema.ocsf.io/1.8.0/
// classes/network_activity, class 4001, category 4 "Network Activity"):
// a connection a person forwarded into a sandbox (corral sandbox forward)
// is one Open and one Close event, or one Refuse when nothing listened.
const (
	NetworkClassUID  = 4001
	NetworkClassName = "Network Activity"
	NetworkOpen      = 1
	NetworkClose     = 2
	NetworkRefuse    = 5
	DirectionInbound = 1
)

// NetworkActivity is an OCSF Network Activity event (class_uid 4001).
type NetworkActivity struct {
	Classification
	StatusID       int            `json:"status_id"`
	Status         string         `json:"status"`
	StatusDetail   string         `json:"status_detail,omitempty"`
	Message        string         `json:"message,omitempty"`
	Metadata       Metadata       `json:"metadata"`
	ConnectionInfo ConnectionInfo `json:"connection_info"`
	SrcEndpoint    *Endpoint      `json:"src_endpoint,omitempty"` // nil: the peer is not known
	DstEndpoint    Endpoint       `json:"dst_endpoint"`
	Traffic        *Traffic       `json:"traffic,omitempty"`
	Device         Device         `json:"device"`
	Unmapped       ForwardInfo    `json:"unmapped"`
}

func (NetworkActivity) OCSFClassUID() int { return NetworkClassUID }

// ConnectionInfo is the OCSF network_connection_info object.
type ConnectionInfo struct {
	UID          string `json:"uid"`
	ProtocolName string `json:"protocol_name"`
	DirectionID  int    `json:"direction_id"`
	Direction    string `json:"direction"`
}

// ForwardInfo is Corral's data about a forwarded connection.
type ForwardInfo struct {
	SandboxID  string `json:"sandbox_id,omitempty"`
	PolicyHash string `json:"policy_hash,omitempty"`
	Provider   string `json:"provider,omitempty"`
	Kind       string `json:"kind"` // "forward"
}

// Forward is one forwarded connection: from Peer (the address the
// forwarding client accepted it from, possibly empty) to Port on the
// sandbox's own loopback; UID (connection_info.uid) ties its events
// together.
type Forward struct {
	UID  string
	Peer string
	Port int
}

// NewForward is a Forward with a fresh UID.
func NewForward(peer string, port int) Forward {
	return Forward{UID: newUUID(), Peer: peer, Port: port}
}

// ForwardOpened is the Open event of f.
func ForwardOpened(run RunInfo, f Forward) NetworkActivity {
	e := forwardEvent(run, f, NetworkOpen, "Open")
	e.Message = "forwarded connection opened"
	return e
}

// ForwardRefused is the Refuse event of f: nothing accepted it (reason).
func ForwardRefused(run RunInfo, f Forward, reason string) NetworkActivity {
	e := forwardEvent(run, f, NetworkRefuse, "Refuse")
	e.StatusID, e.Status, e.StatusDetail = StatusFailure, "Failure", reason
	e.Message = "forwarded connection refused: " + reason
	return e
}

// ForwardClosed is the Close event of f, with the bytes it carried (in:
// into the sandbox, out: back) and why it ended ("" when both sides
// finished).
func ForwardClosed(run RunInfo, f Forward, in, out int64, reason string) NetworkActivity {
	e := forwardEvent(run, f, NetworkClose, "Close")
	e.Traffic = &Traffic{BytesIn: in, BytesOut: out}
	e.Message = "forwarded connection closed"
	if reason != "" {
		e.StatusDetail = reason
		e.Message += ": " + reason
	}
	return e
}

func forwardEvent(run RunInfo, f Forward, act int, actName string) NetworkActivity {
	e := NetworkActivity{
		Classification: classify(time.Now(), NetworkClassUID, NetworkClassName, NetworkCategory, NetworkCatName, act, actName),
		StatusID:       StatusSuccess, Status: "Success",
		Metadata:       newMetadata(run, hostProfile...),
		ConnectionInfo: ConnectionInfo{UID: f.UID, ProtocolName: "tcp", DirectionID: DirectionInbound, Direction: "Inbound"},
		SrcEndpoint:    peerEndpoint(f.Peer),
		DstEndpoint:    Endpoint{IP: "127.0.0.1", Port: f.Port},
		Device:         device(),
		Unmapped:       ForwardInfo{SandboxID: run.SandboxID, PolicyHash: run.PolicyHash, Provider: run.Provider, Kind: "forward"},
	}
	e.setSeverity(SeverityInformational)
	return e
}

// peerEndpoint is the endpoint of address peer ("IP:PORT"; anything else
// is kept as a hostname; nil when empty).
func peerEndpoint(peer string) *Endpoint {
	if ap, err := netip.ParseAddrPort(peer); err == nil {
		return &Endpoint{IP: ap.Addr().String(), Port: int(ap.Port())}
	}
	if peer == "" {
		return nil
	}
	return &Endpoint{Hostname: peer}
}
