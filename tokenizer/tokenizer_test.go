package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The tokenizers and references come from `make gen-models`
// (python/generate/make_models.py): tokenizers trained by Hugging Face
// tokenizers (Python), with the ids and texts it gives, and a model
// directory saved by transformers with its chat template.

func genDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("../.cache/gen")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "tokenizers", "cases.json")); err != nil {
		t.Fatalf("%v\n\nthe test tokenizers are missing: run `make gen-models` (make test does)", err)
	}
	return d
}

func lib(t *testing.T) string {
	t.Helper()
	p, err := FindLibrary("", "..")
	if err != nil {
		t.Fatalf("%v\n\nrun `make tokenizers-lib` (make test does)", err)
	}
	return p
}

func load(t *testing.T, dir string) *Tokenizer {
	t.Helper()
	tok, err := Load(lib(t), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tok.Close() })
	return tok
}

// TestMatchesTokenizers: BPE (byte-level, and with byte fallback), WordPiece
// and Unigram tokenizer.json files give the ids and texts Hugging Face
// tokenizers gives.
func TestMatchesTokenizers(t *testing.T) {
	dir := genDir(t)
	data, err := os.ReadFile(filepath.Join(dir, "tokenizers", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases map[string][]struct {
		Text    string  `json:"text"`
		IDs     []int64 `json:"ids"`
		Decoded string  `json:"decoded"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"bpe_bytelevel", "bpe_llama", "wordpiece", "unigram"} {
		t.Run(kind, func(t *testing.T) {
			tok := load(t, filepath.Join(dir, "tokenizers", kind))
			if len(cases[kind]) == 0 {
				t.Fatal("no cases")
			}
			if n, hi := tok.VocabSize(), tok.MaxID(); hi != int64(n-1) {
				t.Errorf("largest id %d, vocabulary of %d", hi, n)
			}
			for _, c := range cases[kind] {
				ids, err := tok.Encode(c.Text, true)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(ids, c.IDs) && !(len(ids) == 0 && len(c.IDs) == 0) {
					t.Errorf("Encode(%q) = %v, tokenizers gives %v", c.Text, ids, c.IDs)
				}
				text, err := tok.Decode(c.IDs, true)
				if err != nil {
					t.Fatal(err)
				}
				if text != c.Decoded {
					t.Errorf("Decode(%v) = %q, tokenizers gives %q", c.IDs, text, c.Decoded)
				}
			}
		})
	}
}

// TestChatTemplate: the chat template of a saved model renders as
// transformers' apply_chat_template, and its text encodes to the same ids.
func TestChatTemplate(t *testing.T) {
	dir := genDir(t)
	data, err := os.ReadFile(filepath.Join(dir, "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var refs struct {
		Chat struct {
			Messages []struct{ Role, Content string } `json:"messages"`
			Text     string                           `json:"text"`
			IDs      []int64                          `json:"ids"`
		} `json:"chat"`
	}
	if err := json.Unmarshal(data, &refs); err != nil {
		t.Fatal(err)
	}
	tok := load(t, filepath.Join(dir, "hf", "llama"))
	var msgs []Message
	for _, m := range refs.Chat.Messages {
		msgs = append(msgs, Message{Role: m.Role, Content: m.Content})
	}
	text, err := tok.Chat(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	if text != refs.Chat.Text {
		t.Fatalf("Chat = %q, transformers renders %q", text, refs.Chat.Text)
	}
	ids, err := tok.Encode(text, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, refs.Chat.IDs) {
		t.Errorf("the chat prompt encodes to %v, transformers %v", ids, refs.Chat.IDs)
	}
	if tok.EOS != "<|im_end|>" || len(tok.EOSIDs) != 1 {
		t.Errorf("eos %q %v, want <|im_end|> and its id", tok.EOS, tok.EOSIDs)
	}
}

// TestDetokenizer: the deltas of a token stream join to the decoded text,
// also across characters split over byte tokens.
func TestDetokenizer(t *testing.T) {
	dir := genDir(t)
	for _, kind := range []string{"bpe_bytelevel", "bpe_llama", "unigram"} {
		t.Run(kind, func(t *testing.T) {
			tok := load(t, filepath.Join(dir, "tokenizers", kind))
			text := "Ünïcödé ☃ and 日本語: the quick brown fox jumps over the lazy dog 1234."
			ids, err := tok.Encode(text, false)
			if err != nil {
				t.Fatal(err)
			}
			prompt, gen := ids[:3], ids[3:]
			d := tok.NewDetokenizer(prompt)
			var b strings.Builder
			for _, id := range gen {
				s, err := d.Add(id)
				if err != nil {
					t.Fatal(err)
				}
				if strings.ContainsRune(s, '\uFFFD') {
					t.Errorf("delta %q holds a partial character", s)
				}
				b.WriteString(s)
			}
			rest, err := d.Flush()
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(rest)
			all, _ := tok.Decode(ids, true)
			head, _ := tok.Decode(prompt, true)
			if got := head + b.String(); got != all && strings.TrimSpace(got) != strings.TrimSpace(all) {
				t.Errorf("deltas join to %q, the sequence decodes to %q", got, all)
			}
		})
	}
}

// TestLoadErrors: a missing or malformed tokenizer.json names the file.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(lib(t), dir, ""); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, TokenizerFile)) {
		t.Errorf("missing file: %v", err)
	}
	os.WriteFile(filepath.Join(dir, TokenizerFile), []byte(`{"model": {"type": "BPE", "vocab": 3}}`), 0o644)
	if _, err := Load(lib(t), dir, ""); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, TokenizerFile)) {
		t.Errorf("malformed file: %v", err)
	}
	if _, err := FindLibrary(filepath.Join(dir, "nope.so"), ""); err == nil {
		t.Error("a missing library was found")
	}
}
