// Command zoo-check checks xserve against an exported model zoo: every model
// under -dir in every format (.onnx, .pt2) is imported, lowered and compiled
// per reference batch size, run on a PJRT plugin and compared with PyTorch's
// reference outputs (see package harness/zoo).
//
//	zoo-check [-dir zoo] [-models resnet18,bert] [-formats onnx,pt2] [-o table.md] [-pjrt-plugin PATH]
//
// It prints a markdown table (model, format, import ms, lower+compile ms per
// bucket, max error, status) and the full error of every failure, and exits
// 1 if any model fails in any format. make zoo-check runs it on zoo/.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/xserve/xserve/harness/zoo"
	"github.com/xserve/xserve/pjrt"
)

func main() {
	dir := flag.String("dir", "zoo", "zoo directory (one subdirectory with a manifest.json per model)")
	models := flag.String("models", "", "comma-separated models to check (default all)")
	formats := flag.String("formats", "", "comma-separated formats to check: onnx, pt2 (default both)")
	out := flag.String("o", "", "also write the table and failures to this markdown file")
	plugin := flag.String("pjrt-plugin", "", "PJRT plugin path or platform (default: found like xserve does)")
	quiet := flag.Bool("q", false, "do not print progress to stderr")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, *dir, split(*models), split(*formats), *out, *plugin, *quiet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "zoo-check:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func run(ctx context.Context, dir string, models, formats []string, out, plugin string, quiet bool) (bool, error) {
	path, err := pjrt.FindPlugin(pjrt.FindOptions{Path: plugin})
	if err != nil {
		return false, err
	}
	client, err := pjrt.Open(path)
	if err != nil {
		return false, err
	}
	defer client.Close()
	c := &zoo.Checker{Client: client, Models: models, Formats: formats}
	start := time.Now()
	if !quiet {
		fmt.Fprintf(os.Stderr, "checking %s on %s\n", dir, client)
		c.Progress = func(r zoo.Result) {
			status := fmt.Sprintf("pass, max abs error %.2g", r.MaxError)
			if !r.Passed {
				status = fmt.Sprintf("FAIL (%s)", r.Stage)
			}
			fmt.Fprintf(os.Stderr, "  [%4s] %-16s %-4s %s\n", time.Since(start).Round(time.Second), r.Model, r.Format, status)
		}
	}
	results, err := c.Check(ctx, dir)
	if err != nil {
		return false, err
	}
	w := io.Writer(os.Stdout)
	var f *os.File
	if out != "" {
		if f, err = os.Create(out); err != nil {
			return false, err
		}
		w = io.MultiWriter(os.Stdout, f)
	}
	fmt.Fprintf(w, "Model zoo check of `%s` on %s (%s).\n\n", dir, client.Platform(), client.PluginVersion())
	if err := zoo.WriteTable(w, results); err != nil {
		return false, err
	}
	if err := zoo.WriteFailures(w, results); err != nil {
		return false, err
	}
	if f != nil {
		if err := f.Close(); err != nil {
			return false, err
		}
	}
	return len(zoo.Failed(results)) == 0, nil
}
