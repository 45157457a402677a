package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrNoChatTemplate: the model has no chat template.
var ErrNoChatTemplate = errors.New("tokenizer: the model has no chat template (tokenizer_config.json chat_template or chat_template.jinja)")

// Message is one message of a conversation.
type Message struct {
	Role    string
	Content string
}

// HasChatTemplate reports whether the model has a chat template.
func (t *Tokenizer) HasChatTemplate() bool { return t.chat != nil }

// Chat renders messages with the model's chat template, as transformers'
// apply_chat_template(messages, add_generation_prompt=...,
// tokenize=False): the template gets messages (role and content),
// add_generation_prompt, bos_token and eos_token. The prompt is encoded
// without adding special tokens (the template writes them).
func (t *Tokenizer) Chat(messages []Message, addGenerationPrompt bool) (string, error) {
	if t.chat == nil {
		return "", ErrNoChatTemplate
	}
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	out, err := t.chat.Render(map[string]any{
		"messages":              msgs,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.BOS,
		"eos_token":             t.EOS,
	})
	if err != nil {
		return "", fmt.Errorf("tokenizer: chat template: %w", err)
	}
	return out, nil
}

// Detokenizer turns a stream of token ids into text deltas: each Add
// returns the text the new token completes (empty while a character's
// bytes are split over several tokens), so that the deltas join to the
// decoded sequence. It decodes a window of recent tokens, as tokenizers'
// decoders need some left context (a leading space marker, byte fallback).
type Detokenizer struct {
	t      *Tokenizer
	ids    []int64
	prefix int // the window's start
	read   int // ids[:read] were sent
}

// NewDetokenizer starts a detokenizer after the prompt's ids (whose text
// is not returned), skipping special tokens.
func (t *Tokenizer) NewDetokenizer(prompt []int64) *Detokenizer {
	keep := min(len(prompt), 4)
	ids := append([]int64(nil), prompt[len(prompt)-keep:]...)
	return &Detokenizer{t: t, ids: ids, read: keep}
}

// Add appends a token and returns the new text it completes.
func (d *Detokenizer) Add(id int64) (string, error) {
	d.ids = append(d.ids, id)
	return d.delta(false)
}

// Flush returns the text still held back (an incomplete character at the
// end of the sequence).
func (d *Detokenizer) Flush() (string, error) { return d.delta(true) }

func (d *Detokenizer) delta(final bool) (string, error) {
	prev, err := d.t.Decode(d.ids[d.prefix:d.read], true)
	if err != nil {
		return "", err
	}
	text, err := d.t.Decode(d.ids[d.prefix:], true)
	if err != nil {
		return "", err
	}
	if len(text) <= len(prev) || (!final && strings.HasSuffix(text, string(utf8.RuneError))) {
		return "", nil
	}
	d.prefix, d.read = d.read, len(d.ids)
	return text[len(prev):], nil
}
