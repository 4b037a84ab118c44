package epp

import (
	"sync"

	"github.com/inference-cache/inference-cache/openai"
)

// maxModelLabels bounds the distinct target_model_name values the
// picker's metrics carry: a request's model is the client's string, and
// every distinct label value is a series held in memory and scraped for
// the life of the process.
const maxModelLabels = 64

// otherModels is the target_model_name of every model past the first
// maxModelLabels.
const otherModels = "other"

// modelLabels hands out target_model_name values: the first
// maxModelLabels distinct models (cut to openai.Clip's 256 bytes) keep
// their names, later ones share otherModels. Safe for concurrent use.
type modelLabels struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// label is the metrics label of model.
func (l *modelLabels) label(model string) string {
	model = openai.Clip(model)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[model]; ok {
		return model
	}
	if len(l.seen) >= maxModelLabels {
		return otherModels
	}
	if l.seen == nil {
		l.seen = make(map[string]struct{}, maxModelLabels)
	}
	l.seen[model] = struct{}{}
	return model
}
