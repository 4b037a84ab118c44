//go:build !linux

package raftnode_test

// firstTouchCost is measured on Linux only.
func firstTouchCost() string { return "not measured on this OS" }
