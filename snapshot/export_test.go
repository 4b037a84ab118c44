package snapshot

// CheckPages exposes the page-graph check to the external tests and
// benchmarks.
var CheckPages = checkPages
