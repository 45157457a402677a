package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/ardanlabs/jinja"
)

// File names of a model directory that Load reads.
const (
	// TokenizerFile is Hugging Face tokenizers' serialized tokenizer.
	TokenizerFile = "tokenizer.json"
	// ConfigFile is transformers' tokenizer_config.json (special tokens,
	// chat template).
	ConfigFile = "tokenizer_config.json"
	// ChatTemplateFile holds the chat template where transformers >= 4.43
	// saves it.
	ChatTemplateFile = "chat_template.jinja"
	// LibraryName is the shared library tokenizer/ffi builds.
	LibraryName = "libxserve_tokenizers.so"
	// MaxFileSize bounds the files Load reads.
	MaxFileSize = 256 << 20
)

// ErrLibraryNotFound: no tokenizers library was found (make
// tokenizers-lib builds it).
var ErrLibraryNotFound = errors.New("tokenizer: the tokenizers library was not found")

// FindLibrary returns the path of the tokenizers library: path when given,
// else $XSERVE_TOKENIZERS_LIB, else LibraryName in .cache/tokenizers under
// root (the repository root; "" is the working directory) or its parents,
// beside the executable, or in ../lib from it.
func FindLibrary(path, root string) (string, error) {
	if path == "" {
		path = os.Getenv("XSERVE_TOKENIZERS_LIB")
	}
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("%w: %w", ErrLibraryNotFound, err)
		}
		return path, nil
	}
	var places []string
	if root == "" {
		root, _ = os.Getwd()
	}
	for d := root; d != ""; {
		places = append(places, filepath.Join(d, ".cache", "tokenizers", LibraryName))
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		places = append(places, filepath.Join(dir, LibraryName), filepath.Join(dir, "..", "lib", LibraryName))
	}
	for _, p := range places {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (build it with `make tokenizers-lib`, or set XSERVE_TOKENIZERS_LIB); looked in %s", ErrLibraryNotFound, strings.Join(places, ", "))
}

// Tokenizer is a model's tokenizer: tokenizer.json run by the reference
// implementation (the tokenizers crate), the special tokens of
// tokenizer_config.json and its chat template. It is safe for concurrent
// use.
type Tokenizer struct {
	lib  *library
	h    unsafe.Pointer
	file string

	// BOS and EOS are the beginning and end of sequence tokens ("" when
	// none), and EOSIDs their ids with any others the config ends on.
	BOS, EOS string
	EOSIDs   []int64
	chat     *jinja.Template // nil: no chat template

	once sync.Once
	mu   sync.RWMutex // held for reading while h is in use, for writing by Close
}

// Load reads the tokenizer of a model directory: dir/file (file ""
// means tokenizer.json), tokenizer_config.json and chat_template.jinja
// when present. lib is the library's path (FindLibrary).
func Load(lib, dir, file string) (*Tokenizer, error) {
	if file == "" {
		file = TokenizerFile
	}
	path := filepath.Join(dir, file)
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	l, err := openLibrary(lib)
	if err != nil {
		return nil, err
	}
	h, err := l.parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t := &Tokenizer{lib: l, h: h, file: path}
	if err := t.readConfig(dir); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("tokenizer: %s is larger than %d bytes", path, MaxFileSize)
	}
	return data, nil
}

// tokenizerConfig is what Load reads of tokenizer_config.json.
type tokenizerConfig struct {
	BOS          json.RawMessage `json:"bos_token"`
	EOS          json.RawMessage `json:"eos_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
}

// tokenString reads a special token given as "<s>" or {"content": "<s>"}.
func tokenString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.Content
	}
	return ""
}

// chatTemplate reads chat_template as a string or as a list of named
// templates (the "default" one).
func chatTemplate(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if json.Unmarshal(raw, &named) == nil {
		for _, n := range named {
			if n.Name == "default" {
				return n.Template
			}
		}
	}
	return ""
}

func (t *Tokenizer) readConfig(dir string) error {
	var cfg tokenizerConfig
	path := filepath.Join(dir, ConfigFile)
	if data, err := readFile(path); err == nil {
		if err := json.Unmarshal(data, &cfg); err != nil {
			return fmt.Errorf("tokenizer: %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	t.BOS, t.EOS = tokenString(cfg.BOS), tokenString(cfg.EOS)
	if t.EOS != "" {
		id, ok := t.TokenID(t.EOS)
		if !ok {
			return fmt.Errorf("tokenizer: %s: eos_token %q is not in the vocabulary of %s", path, t.EOS, t.file)
		}
		t.EOSIDs = []int64{id}
	}
	src, key := chatTemplate(cfg.ChatTemplate), path+": chat_template"
	tpath := filepath.Join(dir, ChatTemplateFile)
	if data, err := readFile(tpath); err == nil {
		src, key = string(data), tpath
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if src != "" {
		tmpl, err := jinja.Compile(src)
		if err != nil {
			return fmt.Errorf("tokenizer: %s: %w", key, err)
		}
		t.chat = tmpl
	}
	return nil
}

// File is the tokenizer file's path.
func (t *Tokenizer) File() string { return t.file }

// errClosed is the error of a method called after Close.
var errClosed = errors.New("tokenizer: closed")

// handle returns the tokenizer's handle with t.mu held for reading (nil
// once closed); the caller calls done.
func (t *Tokenizer) handle() (h unsafe.Pointer, done func()) {
	t.mu.RLock()
	return t.h, t.mu.RUnlock
}

// VocabSize is the number of tokens, added tokens included (0 once
// closed).
func (t *Tokenizer) VocabSize() int {
	h, done := t.handle()
	defer done()
	if h == nil {
		return 0
	}
	return t.lib.vocabSize(h, true)
}

// MaxID is the largest token id, added tokens included.
func (t *Tokenizer) MaxID() int64 {
	h, done := t.handle()
	defer done()
	if h == nil {
		return -1
	}
	return t.lib.maxID(h)
}

// Encode returns the ids of text; addSpecial adds the special tokens the
// tokenizer's post-processor adds (a BOS, for one).
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int64, error) {
	h, done := t.handle()
	defer done()
	if h == nil {
		return nil, errClosed
	}
	return t.lib.encode(h, text, addSpecial)
}

// Decode returns the text of ids, without the special tokens when
// skipSpecial.
func (t *Tokenizer) Decode(ids []int64, skipSpecial bool) (string, error) {
	h, done := t.handle()
	defer done()
	if h == nil {
		return "", errClosed
	}
	return t.lib.decode(h, ids, skipSpecial)
}

// TokenID returns the id of a token.
func (t *Tokenizer) TokenID(token string) (int64, bool) {
	h, done := t.handle()
	defer done()
	if h == nil {
		return -1, false
	}
	return t.lib.tokenID(h, token)
}

// Close frees the tokenizer; it is safe to call twice.
func (t *Tokenizer) Close() error {
	t.once.Do(func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.lib.free(t.h)
		t.h = nil
	})
	return nil
}
