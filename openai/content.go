package openai

// PartKind is what a content part of a chat message holds, as vLLM's
// chat_utils parses it (MM_PARSER_MAP).
type PartKind int

// Part kinds.
const (
	// PartInvalid is a part a checked message does not hold.
	PartInvalid PartKind = iota
	// PartText is a string part or a text, input_text, output_text,
	// refusal or thinking part: text.
	PartText
	// PartToolReference is a tool_reference part: its name.
	PartToolReference
	// PartMedia is an image, audio, video or embeddings part (with its
	// type, or without one but with a media field such as image_url):
	// the text does not represent it.
	PartMedia
)

var (
	// textPartKeys name the field holding the text of each text-like
	// part type.
	textPartKeys = map[string]string{
		"text": "text", "input_text": "text", "output_text": "text",
		"refusal": "refusal", "thinking": "thinking", "tool_reference": "name",
	}
	mediaPartTypes = map[string]bool{
		"image_url": true, "input_image": true, "image_embeds": true, "image_pil": true,
		"audio_url": true, "input_audio": true, "audio_embeds": true,
		"video_url": true, "prompt_embeds": true,
	}
	// mediaPartKeys are the fields that make a part without "type" a
	// media part for vLLM.
	mediaPartKeys = []string{"image_url", "image_pil", "image_embeds", "audio_embeds",
		"prompt_embeds", "audio_url", "input_audio", "video_url"}
)

// Part reads one content part of a message of a decoded Request: a
// string, or an object of a known type. text is the part's text (the
// name of a tool_reference); PartInvalid for a part Decode refuses.
func Part(p any) (kind PartKind, text string) {
	switch x := p.(type) {
	case string:
		return PartText, x
	case *Object:
		tv, _ := x.Get("type")
		if tv == nil {
			for _, k := range mediaPartKeys {
				if _, ok := x.Get(k); ok {
					return PartMedia, ""
				}
			}
			return PartInvalid, ""
		}
		typ, _ := tv.(string)
		if mediaPartTypes[typ] {
			return PartMedia, ""
		}
		key, ok := textPartKeys[typ]
		if !ok {
			return PartInvalid, ""
		}
		v, _ := x.Get(key)
		s, ok := v.(string)
		switch {
		case !ok:
			return PartInvalid, ""
		case typ == "tool_reference":
			return PartToolReference, s
		}
		return PartText, s
	}
	return PartInvalid, ""
}

// MessageText is a message's content as text, as vLLM flattens it for a
// template that takes string content: a string as is, the text of the
// text parts (and tool references' names) joined with "\n", "" for null.
// multimodal reports a media part, which the text does not represent.
func MessageText(msg *Object) (text string, multimodal bool) {
	c, _ := msg.Get("content")
	switch c := c.(type) {
	case string:
		return c, false
	case []any:
		var b []byte
		n := 0
		for _, p := range c {
			kind, s := Part(p)
			if kind == PartMedia {
				multimodal = true
			}
			if kind != PartText && kind != PartToolReference {
				continue
			}
			if n > 0 {
				b = append(b, '\n')
			}
			b = append(b, s...)
			n++
		}
		return string(b), multimodal
	}
	return "", false
}
