//go:build !race

package raftnode_test

const raceEnabled = false
