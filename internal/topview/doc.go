// Package topview is the live view of a cluster (`inference-cache top`,
// and the frame `inference-cache dev` keeps on a terminal, contract
// §12.3, §12.4): it polls Status on every node, folds each poll into
// lookups per second by reason code, the leader and how long writes were
// unavailable around its last change, and the pickers sharing their load
// (contract §5.11), and prints that as a frame redrawn in place, a plain
// line, or JSON.
package topview
