package api

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/provisional"
	"github.com/inference-cache/inference-cache/raftnode"
)

// StatusFromError maps an error of a write or admin call to a gRPC status
// error (contract §8, 9). It is the one table from the errors of this package,
// the policy package and raftnode to gRPC codes:
//
//	a gRPC status error              → unchanged
//	raftnode.ErrNotLeader, ErrNoLeader,
//	ErrTransferInProgress, ErrForward,
//	ErrShutdown                      → UNAVAILABLE (retry, any node)
//	raftnode.ErrLeadershipLost       → UNAVAILABLE (outcome unknown: retry
//	                                   with the same request id)
//	raftnode.ErrTimeout,
//	context.DeadlineExceeded         → DEADLINE_EXCEEDED
//	context.Canceled                 → CANCELED
//	*RequestError, *policy.FieldError,
//	raftnode.ErrInvalid, ErrRejected,
//	pickerload.ErrInvalid,
//	provisional.ErrInvalid           → INVALID_ARGUMENT
//	pickerload.ErrFull,
//	provisional.ErrFull              → RESOURCE_EXHAUSTED (the node
//	                                   holds its limit of picker load or
//	                                   of provisional residencies)
//	anything else                    → INTERNAL
//
// The message is err's text. nil stays nil.
func StatusFromError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}

// codeOf is the code StatusFromError gives err (not nil).
func codeOf(err error) codes.Code {
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	switch {
	case errors.Is(err, raftnode.ErrNotLeader), errors.Is(err, raftnode.ErrNoLeader),
		errors.Is(err, raftnode.ErrTransferInProgress), errors.Is(err, raftnode.ErrForward),
		errors.Is(err, raftnode.ErrShutdown), errors.Is(err, raftnode.ErrLeadershipLost):
		return codes.Unavailable
	case errors.Is(err, raftnode.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, pickerload.ErrFull), errors.Is(err, provisional.ErrFull):
		return codes.ResourceExhausted
	case refusedWhole(err):
		return codes.InvalidArgument
	}
	return codes.Internal
}

// refusedWhole reports whether err refuses a write for what the request
// holds (a limit, a rule, a command the state machine refused): nothing
// of it was committed and sending it again is refused again.
func refusedWhole(err error) bool {
	var re *RequestError
	var fe *policy.FieldError
	return errors.As(err, &re) || errors.As(err, &fe) ||
		errors.Is(err, raftnode.ErrInvalid) || errors.Is(err, raftnode.ErrRejected) ||
		errors.Is(err, pickerload.ErrInvalid) || errors.Is(err, provisional.ErrInvalid)
}

// refusal is how IngestStream tells a request refused whole from a
// failure, by the error's type, not by its gRPC form: refused is true for
// what StatusFromError answers INVALID_ARGUMENT (refusedWhole, or a
// status error of that code from a Backend), and reason is the error's
// text (a status error's message).
func refusal(err error) (reason string, refused bool) {
	reason = err.Error()
	if s, ok := status.FromError(err); ok {
		reason = s.Message()
	}
	return reason, codeOf(err) == codes.InvalidArgument
}
