//go:build !race

package tokenizer

// raceEnabled is set when the race detector is on; slow tests shrink.
const raceEnabled = false
