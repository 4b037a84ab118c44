package raftnode

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// Logging adapters: hashicorp/raft and memberlist log through their own
// interfaces; both are routed into Config.Logger as structured records.

// hclog adapts cfg.Logger for hashicorp/raft: each raft line becomes one
// slog record at raft's own level (an [ERROR] from raft is an ERROR
// record, not an INFO line with the level in its text), with raft's
// key/value pairs as attributes.
func (n *Node) hclog() hclog.Logger {
	return n.interceptLogger("raft", n.cfg.RaftLogLevel)
}

// memberlistLogger adapts cfg.Logger for memberlist, which logs through a
// *log.Logger with the level in the text ("[ERR] memberlist: ..."): hclog
// infers each line's level from that prefix, so a gossip failure such as
// "no installed keys could decrypt the message" is a WARN/ERROR record at
// the default log level, not hidden at DEBUG.
func (n *Node) memberlistLogger() *log.Logger {
	return n.interceptLogger("memberlist", slog.LevelDebug).StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
}

// interceptLogger is an hclog.Logger named name whose records at or above
// min go to cfg.Logger (which applies its own level too).
func (n *Node) interceptLogger(name string, min slog.Level) hclog.InterceptLogger {
	// The base logger writes nowhere; its level only answers IsDebug-style
	// questions and drops what the sink would drop anyway. The sink does
	// the writing.
	lvl := hclog.Warn
	switch {
	case min <= slog.LevelDebug:
		lvl = hclog.Debug
	case min <= slog.LevelInfo:
		lvl = hclog.Info
	case min >= slog.LevelError:
		lvl = hclog.Error
	}
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: name, Level: lvl, Output: io.Discard})
	il.RegisterSink(slogSink{log: n.log, min: min})
	return il
}

// slogSink forwards hclog records at or above min to a slog.Logger.
type slogSink struct {
	log *slog.Logger
	min slog.Level
}

func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...interface{}) {
	var l slog.Level
	switch level {
	case hclog.Trace, hclog.Debug:
		l = slog.LevelDebug
	case hclog.Info, hclog.NoLevel:
		l = slog.LevelInfo
	case hclog.Warn:
		l = slog.LevelWarn
	default:
		l = slog.LevelError
	}
	if l < s.min {
		return
	}
	for i, a := range args {
		// raft passes some values as hclog.Fmt("%+v", v): format them here,
		// as hclog's own writers do.
		if f, ok := a.(hclog.Format); ok && len(f) > 0 {
			if format, ok := f[0].(string); ok {
				args[i] = fmt.Sprintf(format, f[1:]...)
			}
		}
	}
	s.log.Log(context.Background(), l, msg, append([]any{"component", name}, args...)...)
}
