package openai

import (
	"encoding/json"
	"fmt"

	"github.com/xserve/xserve/api/textgen"
)

// The request and response bodies of OpenAI's API, as far as xserve
// serves them (https://platform.openai.com/docs/api-reference). Unknown
// request fields are ignored, as OpenAI-compatible servers do; fields that
// would change the answer and that xserve does not implement are refused
// (see unsupported).

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
	Logprobs *int            `json:"logprobs"`
	BestOf   *int            `json:"best_of"`
	samplingFields
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []ChatMessage   `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            bool            `json:"logprobs"`
	Tools               json.RawMessage `json:"tools"`
	ResponseFormat      *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	samplingFields
}

// samplingFields are the fields both requests share: the sampling
// parameters (and vLLM's extensions), and how to answer.
type samplingFields struct {
	textgen.Params
	Stream        bool           `json:"stream"`
	StreamOptions *StreamOptions `json:"stream_options"`
	User          string         `json:"user"`
}

// StreamOptions are the options of a streamed answer.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatMessage is one message of a conversation. Content is a string or a
// list of parts, of which xserve takes the text ones.
type ChatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text returns the message's content as text.
func (m ChatMessage) text() (string, error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor a list of parts")
	}
	var out string
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part of type %q: only text parts are supported", p.Type)
		}
		out += p.Text
	}
	return out, nil
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// CompletionChoice is one choice of a completion (or of a streamed chunk).
type CompletionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// Completion is the answer of /v1/completions, or one chunk of its stream.
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

// AssistantMessage is a chat answer's message, or a chunk's delta.
type AssistantMessage struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// ChatChoice is one choice of a chat completion.
type ChatChoice struct {
	Index        int               `json:"index"`
	Message      *AssistantMessage `json:"message,omitempty"`
	Delta        *AssistantMessage `json:"delta,omitempty"`
	Logprobs     any               `json:"logprobs"`
	FinishReason *string           `json:"finish_reason"`
}

// ChatCompletion is the answer of /v1/chat/completions, or one chunk of
// its stream (Object "chat.completion.chunk").
type ChatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

// Model is one entry of /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is the answer of /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// ErrorBody is OpenAI's error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}
