package tokenizer

import (
	"encoding/json"
	"fmt"
)

// frame is what a post-processor adds around the ids of a single sequence
// when special tokens are requested.
type frame struct {
	prefix, suffix []uint32
}

// wrap returns inner surrounded by f: f.prefix + inner.prefix … and so on.
func (f frame) wrap(inner frame) frame {
	return frame{
		prefix: append(append([]uint32(nil), f.prefix...), inner.prefix...),
		suffix: append(append([]uint32(nil), inner.suffix...), f.suffix...),
	}
}

// buildPostProcessor reads the "post_processor" object of tokenizer.json.
// Only single-sequence behaviour matters here (there is no pair input).
func buildPostProcessor(raw json.RawMessage, where string) (frame, error) {
	if isNull(raw) {
		return frame{}, nil
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return frame{}, fmt.Errorf("%w: %s: post_processor: %v", ErrMalformed, where, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s post-processor: %s", ErrMalformed, where, head.Type, fmt.Sprintf(format, args...))
	}
	switch head.Type {
	case "ByteLevel":
		// Only adjusts offsets; ids are unchanged.
		return frame{}, nil
	case "TemplateProcessing":
		return buildTemplate(raw, where, bad)
	case "BertProcessing", "RobertaProcessing":
		var c struct {
			Sep []json.RawMessage `json:"sep"`
			Cls []json.RawMessage `json:"cls"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return frame{}, bad("%v", err)
		}
		var sep, cls uint32
		if len(c.Sep) != 2 || len(c.Cls) != 2 || json.Unmarshal(c.Sep[1], &sep) != nil || json.Unmarshal(c.Cls[1], &cls) != nil {
			return frame{}, bad("sep and cls must be [token, id]")
		}
		return frame{prefix: []uint32{cls}, suffix: []uint32{sep}}, nil
	case "Sequence":
		var c struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return frame{}, bad("%v", err)
		}
		var f frame
		for _, p := range c.Processors {
			g, err := buildPostProcessor(p, where)
			if err != nil {
				return frame{}, err
			}
			f = g.wrap(f)
		}
		return f, nil
	default:
		return frame{}, fmt.Errorf("%w: %s: post-processor type %q", ErrUnsupported, where, head.Type)
	}
}

// buildTemplate reads a TemplateProcessing post-processor's single
// template: the special tokens before sequence A are the frame's prefix,
// those after it its suffix. bad makes the error for a malformed object.
func buildTemplate(raw json.RawMessage, where string, bad func(format string, args ...any) error) (frame, error) {
	var c struct {
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []uint32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return frame{}, bad("%v", err)
	}
	var f frame
	seenA := false
	for _, piece := range c.Single {
		switch {
		case piece.Sequence != nil:
			if piece.Sequence.ID != "A" || seenA {
				return frame{}, fmt.Errorf("%w: %s: TemplateProcessing single template uses sequence %q", ErrUnsupported, where, piece.Sequence.ID)
			}
			seenA = true
		case piece.SpecialToken != nil:
			st, ok := c.SpecialTokens[piece.SpecialToken.ID]
			if !ok {
				return frame{}, bad("special token %q has no ids", piece.SpecialToken.ID)
			}
			if seenA {
				f.suffix = append(f.suffix, st.IDs...)
			} else {
				f.prefix = append(f.prefix, st.IDs...)
			}
		default:
			return frame{}, bad("template piece is neither SpecialToken nor Sequence")
		}
	}
	if !seenA {
		return frame{}, bad("single template has no sequence A")
	}
	return f, nil
}
