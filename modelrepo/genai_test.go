package modelrepo

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// builderConfig is genai_config.json as ONNX Runtime GenAI's model builder
// (0.18.0) writes it for a 2-layer Llama, with edit applied.
func builderConfig(edit func(string) string) string {
	s := `{"model": {"bos_token_id": 0, "context_length": 256,
 "decoder": {"session_options": {"log_id": "onnxruntime-genai", "provider_options": []}, "filename": "model.onnx", "head_size": 16, "hidden_size": 64,
  "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask", "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
  "outputs": {"logits": "logits", "present_key_names": "present.%d.key", "present_value_names": "present.%d.value"},
  "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2},
 "eos_token_id": [2, 0], "pad_token_id": 0, "type": "llama", "vocab_size": 384},
 "search": {"do_sample": false, "max_length": 256, "past_present_share_buffer": true}}`
	if edit != nil {
		s = edit(s)
	}
	return s
}

// TestGenAIGenerate: genai_config.json read into a generate: section, and
// its problems named with the file and key.
func TestGenAIGenerate(t *testing.T) {
	dir := t.TempDir()
	if g, err := GenAIGenerate(dir); g != nil || err != nil {
		t.Fatalf("no genai_config.json: %+v, %v", g, err)
	}
	file := filepath.Join(dir, GenAIConfigFile)
	os.WriteFile(file, []byte(builderConfig(nil)), 0o644)
	g, err := GenAIGenerate(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantCache := []CachePair{{"past_key_values.0.key", "present.0.key"}, {"past_key_values.0.value", "present.0.value"},
		{"past_key_values.1.key", "present.1.key"}, {"past_key_values.1.value", "present.1.value"}}
	if g.MaxSeqLen != 256 || !slices.Equal(g.EOSTokenIDs, []int64{2, 0}) || g.PadTokenID != 0 || !g.CacheAtLength || g.CacheHeadDim != 16 ||
		g.Inputs.InputIDs != "input_ids" || g.Inputs.AttentionMask != "attention_mask" || g.Inputs.Positions != "" || g.Logits != "logits" ||
		!slices.Equal(g.Cache, wantCache) || g.Slots != DefaultSlots {
		t.Errorf("read %+v", g)
	}
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"other file name", `"filename": "model.onnx"`, `"filename": "decoder.onnx"`, `model.decoder.filename is "decoder.onnx"`},
		{"no layers", `"num_hidden_layers": 2`, `"num_hidden_layers": 0`, "num_hidden_layers is 0"},
		{"eos not ids", `"eos_token_id": [2, 0]`, `"eos_token_id": "</s>"`, "model.eos_token_id: want an id or a list of ids"},
		{"names without a layer", `"past_key_names": "past_key_values.%d.key"`, `"past_key_names": "past_key"`, "want patterns with %d"},
		{"not JSON", `{"model"`, `{model`, GenAIConfigFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(file, []byte(builderConfig(func(s string) string { return strings.Replace(s, tc.from, tc.to, 1) })), 0o644)
			_, err := GenAIGenerate(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), file) {
				t.Errorf("error %v, want one naming %s and saying %q", err, file, tc.want)
			}
		})
	}
}
