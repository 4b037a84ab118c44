// Package proccluster runs a cluster of real `inference-cache server`
// processes and waits on what they report over gRPC. The dev command's
// supervisor, the end-to-end tests and the chaos harness start their
// servers through it; the compose test, whose servers are containers,
// shares only its waits.
//
// A Proc keeps its command line for its whole life, so Start after a Kill
// or Stop restarts the same server on the same addresses and data
// directory, which is what a crash-and-restart test needs. Faults are
// signals: Kill (SIGKILL), Stop (SIGTERM, bounded, then SIGKILL), Pause
// and Resume (SIGSTOP and SIGCONT). How a process ended is an Exit.
//
// The waits (WaitLeader, WaitServing, WaitDigests) take Members, a node id
// and a gRPC connection each, so they do not care what runs the server.
package proccluster
