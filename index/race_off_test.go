//go:build !race

package index

// raceEnabled sizes randomized tests down under the race detector, which
// makes the index's allocations and lock operations ~10× slower.
const raceEnabled = false
