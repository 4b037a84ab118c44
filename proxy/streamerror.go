package proxy

import (
	"encoding/json"
	"net/http"

	"github.com/inference-cache/inference-cache/openai"
)

// writeStreamError ends a Server-Sent Events stream that failed mid-way
// as vLLM's OpenAI server ends one: an event whose data is the error
// body ({"error": {"message", "type", "param", "code"}}), then the
// "data: [DONE]" event (vllm/entrypoints/openai/serving_chat.py, the
// except branch of chat_completion_stream_generator, at vLLM commit
// 003fe5932dc9; the body is serving_engine.py's
// create_streaming_error_response over ErrorResponse(error=ErrorInfo)). The caller then aborts the response,
// so that a client reading the bytes alone also sees a broken transfer.
func writeStreamError(w http.ResponseWriter, err *openai.Error) {
	body, _ := json.Marshal(openai.NewErrorResponse(err))
	buf := make([]byte, 0, len(body)+32)
	buf = append(buf, "data: "...)
	buf = append(buf, body...)
	buf = append(buf, "\n\ndata: [DONE]\n\n"...)
	_, _ = w.Write(buf)
}
