package raftnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/command"
)

// AddServer adds a server; voter selects voter or non-voter. Leader only
// (ErrNotLeader). Returns the index of the configuration change. addr must
// be host:port with a port in 1..65535. Adding a server that is already a
// member at the same address with the same suffrage changes nothing and
// returns the latest index; a member id at another address is ErrInvalid
// (remove it first: silently re-pointing a live voter would cost quorum),
// and so are an id that breaks NodeIDProblem and an address another
// member has.
// Servers announced by gossip are added by the leader automatically; this
// is for operators.
func (n *Node) AddServer(ctx context.Context, id, addr string, voter bool) (uint64, error) {
	if id == "" || addr == "" {
		return 0, fmt.Errorf("%w: server id and address are required", ErrInvalid)
	}
	if p := NodeIDProblem(id); p != "" {
		return 0, fmt.Errorf("%w: server id %q: %s", ErrInvalid, id, p)
	}
	host, port, err := net.SplitHostPort(addr)
	if p, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("%w: raft address %q: want host:port with a port in 1..65535", ErrInvalid, addr)
	}
	if other, ok, err := n.configServerAt(addr); err != nil {
		return 0, err
	} else if ok && string(other.ID) != id {
		return 0, fmt.Errorf("%w: raft address %s is already server %q's; two servers cannot share one address", ErrInvalid, addr, other.ID)
	}
	if s, ok, err := n.configServer(id); err != nil {
		return 0, err
	} else if ok {
		if string(s.Address) != addr {
			return 0, fmt.Errorf("%w: server %q is already a member at %s; remove it before adding it at %s", ErrInvalid, id, s.Address, addr)
		}
		if (s.Suffrage == raft.Voter) == voter {
			return n.raft.LastIndex(), nil
		}
	}
	// An operator adding back a process removed while it ran forgets its
	// removal record (contract §8.3), so that no later reconcile keeps it
	// out once it has left the configuration another way.
	if _, held := n.fsm.Removals()[id]; held {
		if n.raft.State() != raft.Leader {
			return 0, fmt.Errorf("%w: servers are added on the leader", ErrNotLeader)
		}
		if err := n.writeRemoval(ctx, id, ""); err != nil {
			return 0, fmt.Errorf("forget the removal record of %q: %w", id, err)
		}
		n.opRemoved.Delete(id)
	}
	var f raft.IndexFuture
	if voter {
		f = n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0)
	} else {
		f = n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0)
	}
	if err := n.wait(ctx, f); err != nil {
		return 0, err
	}
	return f.Index(), nil
}

// configServer returns the server with this id in the local copy of the
// Raft configuration.
func (n *Node) configServer(id string) (raft.Server, bool, error) {
	return n.findServer(func(s raft.Server) bool { return s.ID == raft.ServerID(id) })
}

// configServerAt is the server of the current configuration at Raft
// address addr, if any.
func (n *Node) configServerAt(addr string) (raft.Server, bool, error) {
	return n.findServer(func(s raft.Server) bool { return s.Address == raft.ServerAddress(addr) })
}

// findServer is the first server of the current configuration that match
// accepts.
func (n *Node) findServer(match func(raft.Server) bool) (raft.Server, bool, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return raft.Server{}, false, fmt.Errorf("%w: read configuration: %v", ErrInvalid, err)
	}
	for _, s := range cf.Configuration().Servers {
		if match(s) {
			return s, true, nil
		}
	}
	return raft.Server{}, false, nil
}

// MaxNodeIDBytes bounds a server id (--node-id, AddServer's id): it
// travels in gossip metadata and the Raft configuration (contract §9.2).
const MaxNodeIDBytes = 128

// NodeIDProblem is the objection to id as a server id under contract
// §9.2 (at most MaxNodeIDBytes bytes, printable, no spaces), "" when
// there is none. An id that breaks it would print garbled in status and
// logs, or not at all.
func NodeIDProblem(id string) string {
	switch {
	case len(id) > MaxNodeIDBytes:
		return fmt.Sprintf("%d bytes, over the limit of %d", len(id), MaxNodeIDBytes)
	case !utf8.ValidString(id):
		return "not valid UTF-8"
	case strings.IndexFunc(id, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0:
		return "only printable characters without spaces"
	}
	return ""
}

// RemoveServer removes a server from the Raft configuration. Leader only.
// An id that is not in the configuration is ErrInvalid.
func (n *Node) RemoveServer(ctx context.Context, id string) (uint64, error) {
	if id == "" {
		return 0, fmt.Errorf("%w: server id is required", ErrInvalid)
	}
	// raft accepts the removal of an id it does not know as a no-op
	// configuration change; an operator who mistyped an id should hear so.
	if _, ok, err := n.configServer(id); err != nil {
		return 0, err
	} else if !ok {
		return 0, fmt.Errorf("%w: server %q is not in the Raft configuration", ErrInvalid, id)
	}
	// The process being removed, as gossip knows it now, is recorded in
	// this node's memory (alive or not), which the membership loop reads
	// before reconcile can see the server missing (trackRemovals); and,
	// when gossip shows it alive, through the log before the configuration
	// changes, so every node, also one that becomes leader before its own
	// membership ticks saw the server leave, knows not to add it back.
	if n.raft.State() != raft.Leader {
		// Before the record: a follower's call must change nothing.
		return 0, fmt.Errorf("%w: servers are removed on the leader", ErrNotLeader)
	}
	nonce := ""
	if m, ok := n.gossipSnapshot()[id]; ok && m.meta.Nonce != "" {
		if m.alive {
			// Only a running process is kept out (contract §8.3); one that
			// gossip calls dead may be partitioned away and is added back
			// when it returns.
			nonce = m.meta.Nonce
			if err := n.writeRemoval(ctx, id, nonce); err != nil {
				return 0, fmt.Errorf("record the removal of %q: %w", id, err)
			}
		}
		n.opRemoved.Store(id, opRemoval{nonce: m.meta.Nonce, at: time.Now()})
	}
	f := n.raft.RemoveServer(raft.ServerID(id), 0, 0)
	if err := n.wait(ctx, f); err != nil {
		if nonce != "" && n.raft.State() == raft.Leader {
			// Best effort, within its own bound (ctx may be over): a
			// record of a server still in the configuration decides
			// nothing, but would keep that process out if it later left
			// the configuration another way.
			if _, ok, _ := n.configServer(id); ok {
				fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = n.writeRemoval(fctx, id, "")
				cancel()
			}
		}
		return 0, err
	}
	return f.Index(), nil
}

// TransferLeadership hands leadership to server id at Raft address addr,
// or to the most up-to-date follower when id is "". Leader only. An id that
// is not in the configuration, or this node's own, is ErrInvalid. When the
// target does not win within Raft's election timeout (a loaded machine)
// and this node still leads, it tries again, at most transferAttempts (10)
// times in all, within ctx, each once the transfer before it has ended;
// the last attempt's error is returned. A transfer already in progress is
// waited for within ctx.
func (n *Node) TransferLeadership(ctx context.Context, id, addr string) error {
	if n.raft.State() != raft.Leader {
		return fmt.Errorf("%w: leadership transfer starts on the leader", ErrNotLeader)
	}
	if id != "" {
		srv, ok, err := n.configServer(id)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: server %q is not in the Raft configuration", ErrInvalid, id)
		}
		if id == n.cfg.NodeID {
			return fmt.Errorf("%w: server %q is this node; transfer from the leader to another server", ErrInvalid, id)
		}
		if addr == "" {
			addr = string(srv.Address)
		}
	}
	for attempt := 1; ; {
		var f raft.Future
		if id == "" {
			f = n.raft.LeadershipTransfer()
		} else {
			f = n.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr))
		}
		err := n.wait(ctx, f)
		switch {
		case err == nil:
			return nil
		case n.raft.State() != raft.Leader:
			// An earlier attempt's target may have won after all (its
			// future then fails with leadership lost).
			if n.transferredTo(ctx, id) {
				return nil
			}
			return err
		case ctx.Err() != nil:
			return err
		case errors.Is(err, ErrTransferInProgress):
			// The last attempt's transfer is still winding down (or an
			// earlier call's is under way): start when it has ended.
			select {
			case <-ctx.Done():
				return err
			case <-time.After(transferPoll):
			}
		case strings.Contains(err.Error(), "leadership transfer timeout") && attempt < transferAttempts:
			// Raft gives the target one election timeout to win; a loaded
			// target misses it and this node stays leader.
			n.log.Warn("raftnode: leadership transfer timed out; trying again", "to", id, "attempt", attempt)
			attempt++
		default:
			return err
		}
	}
}

// transferredTo reports whether the leader, once one is known (within
// ctx and transferSettle), is id, or any server but this node when id is
// "".
func (n *Node) transferredTo(ctx context.Context, id string) bool {
	deadline := time.Now().Add(transferSettle)
	for {
		if _, leader := n.raft.LeaderWithID(); leader != "" {
			return string(leader) == id || id == "" && string(leader) != n.cfg.NodeID
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(transferPoll):
		}
	}
}

// transferAttempts bounds TransferLeadership's attempts when the target
// does not take over within Raft's election timeout; transferPoll is how
// often it looks whether a transfer in progress has ended.
// transferSettle bounds the wait for a known leader after this node lost
// leadership during a transfer.
const (
	transferAttempts = 10
	transferPoll     = 20 * time.Millisecond
	transferSettle   = 2 * time.Second
)

// writeRemoval commits the removal record of server id (nonce "" forgets
// it; contract §8.3) and waits until it is applied here.
func (n *Node) writeRemoval(ctx context.Context, id, nonce string) error {
	_, err := n.submit(ctx, command.RemovalCommand(n.NewRequestID(), id, nonce))
	return err
}
