package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// checkEvery is how many units of work (bytes of pre-tokenized text, or
// steps of the merge loop) EncodeContext does between two looks at its
// context and deadline. A unit costs from a few ns (cached words) to a
// few hundred (the merge loop of a megabyte-long word), so a stop is
// noticed within a fraction of a millisecond, and the check (a clock read
// and an atomic load) is lost in the work it paces.
const checkEvery = 4096

// limits bound one encode call: a token cap and a context whose end (or
// deadline) stops the work. The zero value bounds nothing.
type limits struct {
	ctx       context.Context // nil: never stops
	deadline  time.Time       // ctx's deadline, compared with the clock directly
	hasDL     bool
	maxTokens int // 0: no cap
	maxWord   int // bytes of one BPE word; 0: no bound
	work      int // units spent since the last check
	err       error
}

func newLimits(ctx context.Context, maxTokens int) limits {
	l := limits{maxTokens: maxTokens}
	if ctx != nil && ctx.Done() != nil {
		l.ctx = ctx
		l.deadline, l.hasDL = ctx.Deadline()
	}
	return l
}

// spend records n units of work and reports whether the call must stop
// (l.err is then set). The context is looked at once per checkEvery
// units. The deadline is read from the clock rather than waiting for the
// context's timer, which a loaded machine may fire late.
func (l *limits) spend(n int) bool {
	if l == nil || l.ctx == nil {
		return l.stopped()
	}
	if l.err != nil {
		return true
	}
	l.work += n
	if l.work < checkEvery {
		return false
	}
	l.work = 0
	return l.check()
}

// check looks at the context and the deadline now.
func (l *limits) check() bool {
	if l == nil || l.err != nil || l.ctx == nil {
		return l.stopped()
	}
	err := l.ctx.Err()
	if err == nil && l.hasDL && !time.Now().Before(l.deadline) {
		err = context.DeadlineExceeded
	}
	if err != nil {
		l.err = fmt.Errorf("%w: %w", ErrStopped, err)
		return true
	}
	return false
}

// wordTooLong reports whether a BPE word of n bytes exceeds the word
// bound, setting l.err to ErrWordTooLong.
func (l *limits) wordTooLong(n int) bool {
	if l != nil && l.maxWord > 0 && n > l.maxWord {
		if l.err == nil {
			l.err = fmt.Errorf("%w: a word of %d bytes, the limit is %d", ErrWordTooLong, n, l.maxWord)
		}
		return true
	}
	return false
}

// fail is encode's result once l.err is set: no ids, except after
// ErrWordTooLong, where ids (the text before the long word) are a
// prefix of Encode's.
func (l *limits) fail(ids []uint32) ([]uint32, error) {
	if errors.Is(l.err, ErrWordTooLong) {
		return ids, l.err
	}
	return nil, l.err
}

// stopped reports whether the call must stop; a nil l never does.
func (l *limits) stopped() bool { return l != nil && l.err != nil }

// over reports whether n ids exceed the token cap, setting l.err.
func (l *limits) over(n int) bool {
	if l != nil && l.maxTokens > 0 && n > l.maxTokens {
		if l.err == nil {
			l.err = fmt.Errorf("%w: more than %d", ErrTooManyTokens, l.maxTokens)
		}
		return true
	}
	return false
}
