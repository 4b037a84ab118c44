// Package freeport picks loopback ports for tests and local clusters that
// start servers in other processes (or other raft instances) which bind
// the port themselves.
//
// A port taken from the kernel with "listen on :0" comes from the
// ephemeral range, the same range the kernel hands to outgoing
// connections; between closing the probe and the server binding it,
// another test package's dial can take it ("address already in use").
// This package picks from below the ephemeral range instead, where only
// explicit binds land, and checks the port is free for both TCP and UDP
// (memberlist gossip binds both).
package freeport
