// Command bench-runner times xserve's Executable.Run in process for
// bench/peers.py, which drives it over stdin/stdout so that xserve, ONNX
// Runtime and OpenVINO run interleaved on the same inputs. Commands, one a
// line:
//
//	load KEY MODEL NAME=FILE.npy ...   import, lower and compile MODEL for those inputs; prints "ok"
//	time KEY N                         runs KEY N times; prints the N latencies in ns
//	quit
//
// Any error is printed as "error: ..." and ends the command, not the process.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

type loaded struct {
	exe    *serving.Executable
	inputs []*tensor.Tensor
}

func main() {
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: "."})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	client, err := pjrt.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer client.Close()
	w := serving.NewWeights(client)
	defer w.Close()
	models := map[string]*loaded{}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		var err error
		switch {
		case f[0] == "quit":
			out.Flush()
			return
		case f[0] == "load" && len(f) >= 3:
			var m *loaded
			if m, err = load(client, w, f[2], f[3:]); err == nil {
				models[f[1]] = m
				fmt.Fprintln(out, "ok")
			}
		case f[0] == "time" && len(f) == 3:
			err = timeRuns(out, models[f[1]], f[2])
		default:
			err = fmt.Errorf("unknown command %q", in.Text())
		}
		if err != nil {
			fmt.Fprintln(out, "error:", strings.ReplaceAll(err.Error(), "\n", " "))
		}
		out.Flush()
	}
}

// load compiles model for the inputs in the NAME=FILE.npy specs.
func load(c *pjrt.Client, w *serving.Weights, model string, specs []string) (*loaded, error) {
	g, err := importer.Load(model)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, s := range specs {
		name, file, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("input %q: want NAME=FILE.npy", s)
		}
		files[name] = file
	}
	var inputs []*tensor.Tensor
	for _, p := range g.Placeholders() {
		file, ok := files[p.Target]
		if !ok {
			return nil, fmt.Errorf("no input file for %s", p.Target)
		}
		t, err := tensor.ReadNpyFile(file)
		if err != nil {
			return nil, err
		}
		inputs = append(inputs, t)
	}
	dims, err := g.BindDims(inputs)
	if err != nil {
		return nil, err
	}
	prog, err := lower.New(lower.Options{Platform: c.Platform(), Kernels: c.Kernels()}).Lower(g, dims)
	if err != nil {
		return nil, err
	}
	exe, err := serving.Compile(context.Background(), c, prog, w)
	if err != nil {
		return nil, err
	}
	if _, err := exe.Run(context.Background(), inputs); err != nil { // warm-up
		return nil, err
	}
	return &loaded{exe: exe, inputs: inputs}, nil
}

// timeRuns runs m n times and prints each latency in ns.
func timeRuns(out *bufio.Writer, m *loaded, n string) error {
	if m == nil {
		return fmt.Errorf("no such model loaded")
	}
	count, err := strconv.Atoi(n)
	if err != nil {
		return err
	}
	ctx := context.Background()
	lat := make([]string, count)
	for i := range count {
		start := time.Now()
		if _, err := m.exe.Run(ctx, m.inputs); err != nil {
			return err
		}
		lat[i] = strconv.FormatInt(time.Since(start).Nanoseconds(), 10)
	}
	fmt.Fprintln(out, strings.Join(lat, " "))
	return nil
}
