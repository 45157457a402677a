package textgen

// The JSON of KServe's generate extension, which the HTTP routes
// (api/openai) and the NATS generation subject (api/nats) both speak.

// GenerateRequest is the body of a generation request: the prompt and the
// sampling parameters, named as the OpenAI API names them.
type GenerateRequest struct {
	ID         string  `json:"id,omitempty"`
	TextInput  *string `json:"text_input"`
	Parameters Params  `json:"parameters"`
}

// GenerateResponse is a whole answer, or one piece of a streamed one.
type GenerateResponse struct {
	ID           string `json:"id,omitempty"`
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	TextOutput   string `json:"text_output"`
	// FinishReason ("stop" or "length") and the token counts are in the
	// last answer only.
	FinishReason    string `json:"finish_reason,omitempty"`
	PromptTokens    int    `json:"prompt_tokens,omitempty"`
	GeneratedTokens int    `json:"generated_tokens,omitempty"`
}
