package raftnode

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Heartbeat answers count per leadership: before this node first leads
// nothing is known; on becoming leader every peer counts as answering
// then (an answer from an earlier term must not make it look silent for
// that long); an answer after that is its own.
func TestCommitWatch_AnswersCountFromLeadership(t *testing.T) {
	var w commitWatch
	if _, ok := w.lastAnswer("n2"); ok {
		t.Fatal("an answer known before this node ever led")
	}
	old := time.Now().Add(-time.Minute)
	w.answered.Store(raft.ServerID("n2"), old.UnixNano())
	lead := time.Now()
	w.restartAnswers(lead)
	if got, ok := w.lastAnswer("n2"); !ok || !got.Equal(time.Unix(0, lead.UnixNano())) {
		t.Fatalf("after becoming leader: last answer %v, %v; want the leadership start %v", got, ok, lead)
	}
	if got, ok := w.lastAnswer("n3"); !ok || !got.Equal(time.Unix(0, lead.UnixNano())) {
		t.Fatalf("a peer never heard from: %v, %v; want the leadership start", got, ok)
	}
	later := lead.Add(time.Second)
	w.answered.Store(raft.ServerID("n2"), later.UnixNano())
	if got, _ := w.lastAnswer("n2"); !got.Equal(time.Unix(0, later.UnixNano())) {
		t.Fatalf("answer after leadership: %v, want %v", got, later)
	}
}
