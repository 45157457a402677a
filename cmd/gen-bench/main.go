// Command gen-bench times xserve's generation loop in process for
// bench/generate.sh (python/generate/bench.py), which drives it over
// stdin/stdout so that xserve, ONNX Runtime GenAI and transformers run
// interleaved on the same prompts. The model is served by a
// serving.Manager from a repository, as `xserve serve` serves it, without
// the wire: each stream is one Generate on the version's loop.
//
//	gen-bench -repo DIR -model NAME
//
// It prints "ready" once the model is loaded (its step programs compiled:
// give the model warmup: eager), then takes one JSON command a line:
//
//	{"prompts": [[1, 2, 3], ...], "max_tokens": 128}
//
// starts every prompt at once (greedy, eos ignored) and prints one JSON
// line: each stream's time to its first token and to its end, in seconds
// from the start, and its token count. "quit" ends it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/serving/generate"
)

type command struct {
	Prompts   [][]int64 `json:"prompts"`
	MaxTokens int       `json:"max_tokens"`
}

type result struct {
	First  []float64 `json:"first"`
	End    []float64 `json:"end"`
	Tokens []int     `json:"tokens"`
	Error  string    `json:"error,omitempty"`
}

func main() {
	repoDir := flag.String("repo", "", "model repository")
	model := flag.String("model", "", "the generative model to time")
	flag.Parse()
	if err := run(*repoDir, *model); err != nil {
		fmt.Fprintln(os.Stderr, "gen-bench:", err)
		os.Exit(1)
	}
}

func run(repoDir, model string) error {
	ctx := context.Background()
	path, err := pjrt.FindPlugin(pjrt.FindOptions{})
	if err != nil {
		return err
	}
	client, err := pjrt.Open(path)
	if err != nil {
		return err
	}
	defer client.Close()
	repo, err := modelrepo.Open(repoDir)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := serving.NewManager(ctx, serving.Options{Client: client, Repository: repo, Logger: log, ControlMode: serving.ControlNone})
	if err != nil {
		return err
	}
	defer m.Shutdown(ctx)
	g, err := m.Generative(ctx, model, 0)
	if err != nil {
		return err
	}
	defer g.Release()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if in.Text() == "quit" {
			return nil
		}
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			out.Encode(result{Error: err.Error()})
			continue
		}
		out.Encode(timeStreams(ctx, g.Loop, c))
	}
	return in.Err()
}

// timeStreams runs the command's prompts at once and times each stream.
func timeStreams(ctx context.Context, loop *generate.Model, c command) result {
	n := len(c.Prompts)
	r := result{First: make([]float64, n), End: make([]float64, n), Tokens: make([]int, n)}
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, p := range c.Prompts {
		s, err := loop.Generate(ctx, generate.Request{Prompt: p, MaxTokens: c.MaxTokens, IgnoreEOS: true})
		if err != nil {
			r.Error = err.Error()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ev, err := s.Next(ctx)
				if err != nil || ev.Done {
					mu.Lock()
					r.End[i] = time.Since(start).Seconds()
					if ev.Done && ev.Err != nil {
						r.Error = ev.Err.Error()
					}
					mu.Unlock()
					return
				}
				r.Tokens[i]++
				if r.Tokens[i] == 1 {
					r.First[i] = time.Since(start).Seconds()
				}
			}
		}()
	}
	wg.Wait()
	return r
}
