//go:build race

package raftnode_test

// raceEnabled skips the tests whose timing bounds (a 250 ms ShareLoad call
// moving megabytes) the race detector, ~10x slower, cannot meet.
const raceEnabled = true
