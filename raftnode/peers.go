package raftnode

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// peersFile, in the data directory, keeps the gRPC address each server
// last advertised over gossip. A node restarted while gossip cannot reach
// the others (a gossip-only partition, a firewall on the gossip port)
// still knows where to forward writes: the leader's id comes from Raft,
// its gRPC address from here.
const peersFile = "peers.json"

// peerAddrs is the persisted id → gRPC address map. Writes to the file
// happen off the gossip callback, at most one at a time, last value wins.
type peerAddrs struct {
	path string
	mu   sync.Mutex
	grpc map[string]string
	save chan struct{} // a write is wanted
}

// loadPeerAddrs reads dir's peers file (missing or unreadable = empty:
// gossip fills it again).
func loadPeerAddrs(dir string) *peerAddrs {
	p := &peerAddrs{path: filepath.Join(dir, peersFile), grpc: map[string]string{}, save: make(chan struct{}, 1)}
	if b, err := os.ReadFile(p.path); err == nil {
		_ = json.Unmarshal(b, &p.grpc)
	}
	return p
}

// get returns id's last known gRPC address ("" = none).
func (p *peerAddrs) get(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.grpc[id]
}

// set records id's address and asks for a write when it changed.
func (p *peerAddrs) set(id, addr string) {
	if addr == "" {
		return
	}
	p.mu.Lock()
	changed := p.grpc[id] != addr
	p.grpc[id] = addr
	p.mu.Unlock()
	if changed {
		select {
		case p.save <- struct{}{}:
		default:
		}
	}
}

// saver writes the file whenever set asked for it, until stop closes; a
// failed write is retried at the next change (the map is a hint only). A
// change still unwritten when stop closes is written before it returns:
// the node about to stop may be restarted where gossip cannot reach the
// others, and then this file is all it knows of their addresses.
func (p *peerAddrs) saver(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			p.flush()
			return
		case <-p.save:
		}
		p.write()
		// Coalesce bursts (a whole cluster joining) into few writes.
		select {
		case <-stop:
			p.flush()
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// flush writes the file if a change is waiting for it.
func (p *peerAddrs) flush() {
	select {
	case <-p.save:
		p.write()
	default:
	}
}

// write replaces the file with the map.
func (p *peerAddrs) write() {
	p.mu.Lock()
	b, _ := json.Marshal(p.grpc)
	p.mu.Unlock()
	tmp := p.path + ".tmp"
	if os.WriteFile(tmp, b, 0o644) == nil {
		_ = os.Rename(tmp, p.path)
	}
}
