package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// errAddressRefused is wrapped by a refusal of a JobManager's reported RPC address that is not
// consistent with the Raft configuration (checkReportedAddress).
var errAddressRefused = errors.New("jobmanager address refused")

// hostLookupTimeout bounds resolving the host names of one address report: a report waits for
// it, and a resolver that hangs must not hold the leader's handler.
const hostLookupTimeout = 2 * time.Second

// memberRaftAddr returns the Raft address of a member of the Raft configuration.
func (jm *JobManager) memberRaftAddr(id string) (string, bool) {
	f := jm.node.r.GetConfiguration()
	if f.Error() != nil {
		return "", false
	}
	i := slices.IndexFunc(f.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == id })
	if i < 0 {
		return "", false
	}
	return string(f.Configuration().Servers[i].Address), true
}

// checkReportedAddress decides whether a follower's report of its RPC address (RegisterJobManager)
// is consistent with the Raft configuration, the only thing that says where a member runs: the
// report must come from the member's Raft host (the TCP peer of the call is one of the host's
// addresses), and the address must be on that host (its host is the Raft host's name or
// resolves to one of its addresses). Anyone else's report, or an address elsewhere, would
// redirect flinkctl and TaskManagers that follow the leader hints and the addresses GetCluster
// lists. (A leader records its own address itself, through Raft, before it serves.)
func checkReportedAddress(ctx context.Context, nodeID, raftAddr, rpcAddr string, from net.Addr) error {
	raftHost, _, err := net.SplitHostPort(raftAddr)
	if err != nil {
		return fmt.Errorf("%w: %s's raft address %q: %w", errAddressRefused, nodeID, raftAddr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, hostLookupTimeout)
	defer cancel()
	hostIPs, err := hostAddrs(ctx, raftHost)
	if err != nil {
		return fmt.Errorf("%w: %s's raft host %q: %w", errAddressRefused, nodeID, raftHost, err)
	}
	peer, err := netip.ParseAddrPort(fmt.Sprint(from))
	if err != nil {
		return fmt.Errorf("%w: the caller's address %v: %w", errAddressRefused, from, err)
	}
	if !slices.Contains(hostIPs, peer.Addr().Unmap()) {
		return fmt.Errorf("%w: the report for %s comes from %s, not from its raft host %s", errAddressRefused, nodeID, peer.Addr(), raftHost)
	}
	rpcHost, _, err := net.SplitHostPort(rpcAddr)
	if err != nil {
		return fmt.Errorf("%w: rpc_address %q: %w", errAddressRefused, rpcAddr, err)
	}
	if rpcHost == raftHost {
		return nil
	}
	rpcIPs, err := hostAddrs(ctx, rpcHost)
	if err != nil {
		return fmt.Errorf("%w: rpc_address %q: %w", errAddressRefused, rpcAddr, err)
	}
	if !slices.ContainsFunc(rpcIPs, func(a netip.Addr) bool { return slices.Contains(hostIPs, a) }) {
		return fmt.Errorf("%w: rpc_address %q of %s is not on its raft host %s", errAddressRefused, rpcAddr, nodeID, raftHost)
	}
	return nil
}

// hostAddrs returns the IP addresses of a host: itself for an IP literal, else what it
// resolves to.
func hostAddrs(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	return addrs, nil
}
