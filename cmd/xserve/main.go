// Command xserve is the xserve inference server and its tools.
//
//	xserve serve --model-repo DIR [--http-addr :8080 ...]   (or: xserve --model-repo DIR ...)
//	xserve nats-infer --model M --input NAME=FILE.npy ... [--nats-url URL] [--durable]
//	xserve inspect MODEL [--stablehlo --shape NAME=1x3x224x224 | --dim SYM=N]
//	xserve run MODEL --input NAME=FILE.npy ... --output DIR
//	xserve compile --model-repo DIR --compile-cache DIR [--pjrt-plugin P]
//	xserve version
//	xserve health [--url http://127.0.0.1:8080/v2/health/ready]
//
// Run `xserve help` or `xserve COMMAND -h` for the flags of each command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const usage = `xserve: an XLA inference server for ONNX and torch.export models

Usage:
  xserve serve --model-repo DIR [flags]   serve a model repository over HTTP, gRPC and NATS (also: xserve --model-repo DIR)
  xserve nats-infer --model M --input NAME=FILE.npy [flags]   send one request over NATS, print or write the outputs
  xserve inspect MODEL [flags]   print the imported FX graph (and, with --stablehlo, the program for a shape)
  xserve run MODEL [flags]       run a model once on .npy inputs, write .npy outputs
  xserve compile --model-repo DIR --compile-cache DIR   compile every model, version and bucket ahead of time
  xserve version                 print the version and the PJRT plugin xserve would load
  xserve health [--url URL]      exit 0 when the local server is ready (the image's HEALTHCHECK)

Run "xserve COMMAND -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "xserve:", err)
		os.Exit(1)
	}
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "inspect":
		return runInspect(ctx, args[1:], stdout, stderr)
	case "nats-infer":
		return runNATSInfer(ctx, args[1:], stdout, stderr)
	case "run":
		return runRun(ctx, args[1:], stdout, stderr)
	case "version":
		return runVersion(args[1:], stdout, stderr)
	case "compile":
		return runCompile(ctx, args[1:], stdout, stderr)
	case "health":
		return runHealth(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	if strings.HasPrefix(args[0], "-") { // flags without a command: serve
		return runServe(ctx, args, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// parseInterleaved parses flags that may come before or after positional
// arguments ("inspect model.onnx --stablehlo") and returns the positionals.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// multiFlag collects a repeated flag's values.
type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
