package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/modelrepo"
)

// Uploader is a Backend that can also load a model from uploaded files, as
// Triton's repository load request with "file:" and "config" parameters
// does. Upload stores the files in the repository and loads the model; a bad
// path or config wraps serving.ErrInvalidInput. *serving.Manager has it.
type Uploader interface {
	Upload(ctx context.Context, model string, up modelrepo.Upload) error
}

// loadRequest reads the optional body of POST
// /v2/repository/models/{m}/load: nil when it uploads nothing, else the
// upload its parameters carry ("file:<version>/<file>": base64 bytes,
// "config": the model config as a JSON string or object).
func (s *Server) loadRequest(c *fiber.Ctx) (*modelrepo.Upload, error) {
	body, err := s.body(c)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	var req struct {
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := payload.UnmarshalJSON(body, &req, "the request", false); err != nil {
		return nil, err
	}
	var up modelrepo.Upload
	for k, raw := range req.Parameters {
		switch {
		case k == "config":
			cfg, err := configParam(raw)
			if err != nil {
				return nil, err
			}
			up.Config = cfg
		case strings.HasPrefix(k, "file:"):
			var text string
			if err := json.Unmarshal(raw, &text); err != nil {
				return nil, badRequest("parameters.%s: want the file's bytes as a base64 string", k)
			}
			data, err := base64.StdEncoding.DecodeString(text)
			if err != nil {
				return nil, badRequest("parameters.%s: not base64: %v", k, err)
			}
			if up.Files == nil {
				up.Files = map[string][]byte{}
			}
			up.Files[strings.TrimPrefix(k, "file:")] = data
		}
	}
	if up.Files == nil && up.Config == nil {
		return nil, nil
	}
	if _, ok := s.backend.(Uploader); !ok {
		return nil, badRequest("parameters: loading a model from uploaded files or config is not supported by this server; change the model repository instead")
	}
	return &up, nil
}

// configParam is the "config" parameter's text: Triton sends the config as
// a JSON string; an object is taken as it is. Either is valid config.yaml.
func configParam(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		return raw, nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return nil, badRequest("parameters.config: want the model config as a JSON string or object")
	}
	return []byte(text), nil
}
