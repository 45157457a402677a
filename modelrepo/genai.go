package modelrepo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// GenAIConfigFile is the file ONNX Runtime GenAI's model builder writes
// beside its model: the decoder's inputs, outputs and cache names, eos and
// pad ids, and the context length.
const GenAIConfigFile = "genai_config.json"

// genaiConfig is the part of genai_config.json a generative model needs.
type genaiConfig struct {
	Model struct {
		Type          string          `json:"type"`
		ContextLength int             `json:"context_length"`
		EOSTokenID    json.RawMessage `json:"eos_token_id"`
		PadTokenID    *int64          `json:"pad_token_id"`
		Decoder       struct {
			Filename  string `json:"filename"`
			HeadSize  int64  `json:"head_size"`
			NumLayers int    `json:"num_hidden_layers"`
			Inputs    struct {
				InputIDs       string `json:"input_ids"`
				AttentionMask  string `json:"attention_mask"`
				PositionIDs    string `json:"position_ids"`
				PastKeyNames   string `json:"past_key_names"`
				PastValueNames string `json:"past_value_names"`
			} `json:"inputs"`
			Outputs struct {
				Logits            string `json:"logits"`
				PresentKeyNames   string `json:"present_key_names"`
				PresentValueNames string `json:"present_value_names"`
			} `json:"outputs"`
		} `json:"decoder"`
	} `json:"model"`
}

// GenAIGenerate reads the genai_config.json of version directory dir into
// a generate: section: the decoder's input, output and cache names,
// context_length as max_seq_len, eos and pad ids, the head size, and the
// cache written at each sequence's length (the builder's
// GroupQueryAttention). The other keys take their defaults. It returns
// nil, nil when dir has no genai_config.json.
func GenAIGenerate(dir string) (*GenerateConfig, error) {
	file := filepath.Join(dir, GenAIConfigFile)
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("modelrepo: %w", err)
	}
	var c genaiConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("modelrepo: %s: %w", file, err)
	}
	m, d := c.Model, c.Model.Decoder
	if d.Filename != "" && d.Filename != "model.onnx" {
		return nil, fmt.Errorf("modelrepo: %s: model.decoder.filename is %q: the version directory's model file must be model.onnx", file, d.Filename)
	}
	if d.NumLayers <= 0 {
		return nil, fmt.Errorf("modelrepo: %s: model.decoder.num_hidden_layers is %d, want the decoder's layer count", file, d.NumLayers)
	}
	g := &GenerateConfig{
		MaxSeqLen:     min(m.ContextLength, MaxGenerateSeqLen),
		Inputs:        GenerateInputs{InputIDs: d.Inputs.InputIDs, Positions: d.Inputs.PositionIDs, AttentionMask: d.Inputs.AttentionMask},
		Logits:        d.Outputs.Logits,
		CacheAtLength: true,
		CacheHeadDim:  d.HeadSize,
	}
	if m.PadTokenID != nil {
		g.PadTokenID = *m.PadTokenID
	}
	if g.EOSTokenIDs, err = genaiIDs(m.EOSTokenID); err != nil {
		return nil, fmt.Errorf("modelrepo: %s: model.eos_token_id: %w", file, err)
	}
	pairs := [][2]string{{d.Inputs.PastKeyNames, d.Outputs.PresentKeyNames}, {d.Inputs.PastValueNames, d.Outputs.PresentValueNames}}
	for layer := range d.NumLayers {
		for _, p := range pairs {
			if !strings.Contains(p[0], "%d") || !strings.Contains(p[1], "%d") {
				return nil, fmt.Errorf("modelrepo: %s: model.decoder past/present names %q, %q: want patterns with %%d", file, p[0], p[1])
			}
			g.Cache = append(g.Cache, CachePair{Input: fmt.Sprintf(p[0], layer), Output: fmt.Sprintf(p[1], layer)})
		}
	}
	g.setDefaults()
	return g, nil
}

// genaiIDs reads an id or a list of ids (absent: none).
func genaiIDs(raw json.RawMessage) ([]int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int64
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int64{one}, nil
	}
	var list []int64
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("want an id or a list of ids, got %s", raw)
	}
	return list, nil
}
