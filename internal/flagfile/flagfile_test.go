package flagfile

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// server is a flag set shaped like a server's: plain, nested and list flags.
type server struct {
	fs      *flag.FlagSet
	addr    *string
	repo    *string
	natsURL *string
	strict  *bool
	grace   *time.Duration
	origins *string
	workers *int
	nats    *bool
}

func newServer() *server {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &server{
		fs:      fs,
		addr:    fs.String("http-addr", ":8080", ""),
		repo:    fs.String("model-repo", "", ""),
		natsURL: fs.String("nats-url", "", ""),
		strict:  fs.Bool("strict-readiness", true, ""),
		grace:   fs.Duration("shutdown-timeout", 30*time.Second, ""),
		origins: fs.String("cors-origins", "", ""),
		workers: fs.Int("nats-workers", 0, ""),
		nats:    fs.Bool("nats", true, ""),
	}
}

func TestApply(t *testing.T) {
	tests := []struct {
		name, file string
		args       []string
		check      func(s *server) bool
	}{
		{"flat keys", "model-repo: ./models\nhttp-addr: 127.0.0.1:0\nstrict-readiness: false\nshutdown-timeout: 5s\n", nil,
			func(s *server) bool {
				return *s.repo == "./models" && *s.addr == "127.0.0.1:0" && !*s.strict && *s.grace == 5*time.Second
			}},
		{"nested keys join with a dash", "nats:\n  url: nats://h:4222\n  workers: 3\n", nil,
			func(s *server) bool { return *s.natsURL == "nats://h:4222" && *s.workers == 3 }},
		{"a flag named like a prefix", "nats: false\nnats-workers: 2\n", nil,
			func(s *server) bool { return !*s.nats && *s.workers == 2 }},
		{"a list is the comma-separated value", "cors-origins: [https://a.example, https://b.example]\n", nil,
			func(s *server) bool { return *s.origins == "https://a.example,https://b.example" }},
		{"the command line wins", "http-addr: :9000\nmodel-repo: ./a\n", []string{"--http-addr", ":7000"},
			func(s *server) bool { return *s.addr == ":7000" && *s.repo == "./a" }},
		{"an explicit default on the command line still wins", "strict-readiness: false\n", []string{"--strict-readiness=true"},
			func(s *server) bool { return *s.strict }},
		{"empty file", "", nil, func(s *server) bool { return *s.addr == ":8080" }},
		{"comments only", "# nothing\n", nil, func(s *server) bool { return *s.addr == ":8080" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer()
			if err := s.fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := ApplyData(s.fs, "xserve.yaml", []byte(tc.file)); err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Errorf("flags after %q with %q: addr %q repo %q nats %q strict %v grace %v origins %q workers %d",
					tc.file, tc.args, *s.addr, *s.repo, *s.natsURL, *s.strict, *s.grace, *s.origins, *s.workers)
			}
		})
	}
}

func TestApplyErrors(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"unknown key", "model-repo: x\nhttp-adr: :80\n", `config xserve.yaml:2: unknown key "http-adr" (no flag --http-adr; flags starting so: http-addr)`},
		{"unknown nested key", "nats:\n  url: x\n  urls: y\n", `config xserve.yaml:3: unknown key "nats-urls"`},
		{"bad value", "shutdown-timeout: soon\n", `config xserve.yaml:1: key "shutdown-timeout": invalid value "soon"`},
		{"bad bool", "\n\nstrict-readiness: maybe\n", `config xserve.yaml:3: key "strict-readiness": invalid value "maybe"`},
		{"mapping under a flag's name", "http-addr:\n  host: x\n", `config xserve.yaml:2: unknown key "http-addr-host"`},
		{"key twice", "http-addr: a\nhttp:\n  addr: b\n", `config xserve.yaml:3: key "http-addr" given again (first on line 1)`},
		{"not a mapping", "- a\n- b\n", "config xserve.yaml:1: want a mapping of flag names to values"},
		{"not YAML", "a: [\n", "config xserve.yaml: yaml:"},
		{"list of mappings", "cors-origins:\n  - a: b\n", `config xserve.yaml:1: key "cors-origins": want a list of plain values`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer()
			if err := s.fs.Parse(nil); err != nil {
				t.Fatal(err)
			}
			err := ApplyData(s.fs, "xserve.yaml", []byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestApplyFile(t *testing.T) {
	s := newServer()
	if err := s.fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := Apply(s.fs, filepath.Join(t.TempDir(), "none.yaml")); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("missing file: err = %v, want it to name the file", err)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", MaxBytes)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Apply(s.fs, big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: err = %v, want a size error", err)
	}
	ok := filepath.Join(t.TempDir(), "xserve.yaml")
	if err := os.WriteFile(ok, []byte("model-repo: /srv/models\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Apply(s.fs, ok); err != nil || *s.repo != "/srv/models" {
		t.Errorf("Apply = %v, model-repo %q", err, *s.repo)
	}
}
