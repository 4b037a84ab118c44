package raftnode

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

// RaftTLS carries Raft RPCs over TLS (contract §9.7). Build both configs with
// package tlsconfig so certificate rotation needs no restart.
type RaftTLS struct {
	// Server is the listener's config. It must require and verify client
	// certificates (tls.RequireAndVerifyClientCert, directly or through
	// GetConfigForClient): the Raft port has no other authentication, and
	// anyone who can speak to it can append to the log.
	Server *tls.Config
	// Client dials peers; it presents this node's certificate and verifies
	// the peer's (against the dialed host, or its ServerName when set).
	Client *tls.Config
}

// raftHandshakeTimeout bounds the TLS handshake of an incoming Raft
// connection, so a peer that connects and stays silent holds a goroutine
// for at most this long.
const raftHandshakeTimeout = 10 * time.Second

// tlsStream is a raft.StreamLayer over TLS.
type tlsStream struct {
	net.Listener
	adv    net.Addr
	server *tls.Config
	client *tls.Config
}

// Accept wraps the next TCP connection in TLS; the handshake runs (with
// raftHandshakeTimeout) on its first read or write, on raft's per-connection
// goroutine, so a slow peer never blocks the accept loop.
func (s *tlsStream) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: tls.Server(c, s.server)}, nil
}

// Addr is the advertised address (what peers dial).
func (s *tlsStream) Addr() net.Addr { return s.adv }

// Dial opens a TLS connection to a peer and completes the handshake
// within timeout.
func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	td := &tls.Dialer{NetDialer: d, Config: s.client}
	return td.DialContext(ctx, "tcp", string(address))
}

// handshakeConn runs a server-side TLS handshake once, under a deadline,
// before the first read or write.
type handshakeConn struct {
	*tls.Conn
	once sync.Once
	err  error
}

func (c *handshakeConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), raftHandshakeTimeout)
		defer cancel()
		c.err = c.Conn.HandshakeContext(ctx)
	})
	return c.err
}

func (c *handshakeConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *handshakeConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// newTLSTransport is raft.NewTCPTransportWithConfig over a TLS stream
// layer: it binds bind, advertises adv, and uses ntc for everything else.
func newTLSTransport(bind string, adv net.Addr, t *RaftTLS, ntc *raft.NetworkTransportConfig) (*raft.NetworkTransport, error) {
	if t.Server == nil || t.Client == nil {
		return nil, fmt.Errorf("%w: RaftTLS needs both a server and a client config", ErrInvalid)
	}
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if adv == nil {
		adv = l.Addr()
	}
	if a, ok := adv.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		l.Close()
		return nil, fmt.Errorf("%w: raft advertise address %v is not advertisable", ErrInvalid, adv)
	}
	ntc.Stream = &tlsStream{Listener: l, adv: adv, server: t.Server, client: t.Client}
	return raft.NewNetworkTransportWithConfig(ntc), nil
}

// gossipEncryption turns on memberlist encryption with cfg.GossipKeys:
// the first key encrypts, every key decrypts, and unencrypted gossip is
// refused in both directions.
func (n *Node) gossipEncryption(mc *memberlist.Config) error {
	if len(n.cfg.GossipKeys) == 0 {
		return nil
	}
	kr, err := memberlist.NewKeyring(n.cfg.GossipKeys, n.cfg.GossipKeys[0])
	if err != nil {
		return fmt.Errorf("%w: gossip keys: %v", ErrInvalid, err)
	}
	mc.Keyring = kr
	n.mlKeyring = kr
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	return nil
}

// SetGossipKeys replaces the memberlist keyring's keys at runtime, without a
// restart: keys[0] becomes the primary (encrypting) key, every listed key
// decrypts, and keys no longer listed are dropped. A rolling key change is
// three calls on every server, each after all servers took the previous
// one: add the new key second, make it first, drop the old one. Each key is
// 16, 24 or 32 bytes. Errors (wrapping ErrInvalid, the keyring unchanged)
// when keys is empty or malformed, or when the node started without gossip
// encryption (turning it on needs a restart of every server: a node that
// encrypts cannot gossip with one that does not).
func (n *Node) SetGossipKeys(keys [][]byte) error {
	if n.mlKeyring == nil {
		return fmt.Errorf("%w: gossip encryption is off on this node (started without gossip keys); it can only be turned on at start", ErrInvalid)
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: gossip keys: none given; a primary key is required", ErrInvalid)
	}
	// Validate all keys first so a bad one leaves the keyring as it was.
	if _, err := memberlist.NewKeyring(keys, keys[0]); err != nil {
		return fmt.Errorf("%w: gossip keys: %v", ErrInvalid, err)
	}
	kr := n.mlKeyring
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil {
			return fmt.Errorf("%w: gossip keys: %v", ErrInvalid, err)
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return fmt.Errorf("%w: gossip keys: %v", ErrInvalid, err)
	}
	for _, old := range kr.GetKeys() {
		keep := false
		for _, k := range keys {
			if bytes.Equal(k, old) {
				keep = true
				break
			}
		}
		if !keep {
			if err := kr.RemoveKey(old); err != nil {
				return fmt.Errorf("%w: gossip keys: %v", ErrInvalid, err)
			}
		}
	}
	return nil
}
