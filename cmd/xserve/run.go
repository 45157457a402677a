package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/runner"
	"github.com/xserve/xserve/tensor"
)

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// outputFileName maps an output name to a safe file name in the output dir.
func outputFileName(name string) string {
	s := unsafeFileChars.ReplaceAllString(name, "_")
	if s == "" || s == "." || s == ".." {
		s = "_" + s
	}
	return s + ".npy"
}

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var inputFlags multiFlag
	fs.Var(&inputFlags, "input", "input NAME=FILE.npy (repeatable, one per model input)")
	outDir := fs.String("output", "", "directory to write <output name>.npy files into (created if missing)")
	plugin := fs.String("pjrt-plugin", "", "PJRT plugin path or platform name (default: $XSERVE_PJRT_PLUGIN, then what `make pjrt` installed)")
	narrow := fs.Bool("narrow-int64", false, "lower int64 as int32 (as for TPUs)")
	cacheDir := fs.String("compile-cache", "", "compile-cache directory: load the executable from it when it holds one, else store it there")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: xserve run MODEL --input NAME=FILE.npy ... --output DIR")
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("run: want exactly one MODEL path")
	}
	if *outDir == "" {
		return errors.New("run: --output DIR is required")
	}
	client, err := openPlugin(*plugin)
	if err != nil {
		return err
	}
	defer client.Close()
	r, err := runner.New(client, runner.Options{Lower: lower.Options{NarrowInt64: *narrow}, CacheDir: *cacheDir})
	if err != nil {
		return err
	}
	m, err := r.Load(pos[0])
	if err != nil {
		return err
	}
	defer m.Close()
	named := map[string]*tensor.Tensor{}
	for _, f := range inputFlags {
		name, path, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("--input %q: want NAME=FILE.npy", f)
		}
		if !slices.Contains(m.InputNames(), name) {
			return fmt.Errorf("run: the model has no input %q (inputs: %s)", name, strings.Join(m.InputNames(), ", "))
		}
		t, err := tensor.ReadNpyFile(path)
		if err != nil {
			return fmt.Errorf("run: input %s: %w", name, err)
		}
		named[name] = t
	}
	for _, p := range m.Graph.Placeholders() {
		if named[p.Target] == nil {
			return fmt.Errorf("run: no --input for model input %q (%s)", p.Target, p.Val())
		}
	}
	inputs, err := m.OrderInputs(named)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	fmt.Fprintf(stderr, "loaded %s (version %s)\n", client, client.PluginVersion())
	outs, prog, tm, err := m.Run(ctx, inputs) // bounded outputs come back trimmed
	if err != nil {
		return err
	}
	printTimings(stderr, prog, tm)
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	names := m.OutputNames(prog)
	for i, t := range outs {
		name := names[i]
		file := filepath.Join(*outDir, outputFileName(name))
		if err := tensor.WriteNpyFile(file, t); err != nil {
			return fmt.Errorf("run: write output %s: %w", name, err)
		}
		fmt.Fprintf(stdout, "output %s: %s -> %s\n", name, t, file)
	}
	return nil
}

// printTimings says how long lowering, compiling and running took (or that
// the model ran on the host only).
func printTimings(w io.Writer, prog *lower.Program, tm runner.Timings) {
	if prog == nil {
		fmt.Fprintln(w, "ran on the host only (string operators): no XLA program")
		return
	}
	compiled := "compiled"
	if tm.Cached {
		compiled = "loaded from the compile cache"
	}
	fmt.Fprintf(w, "lowered in %s, %s in %s, executed in %s (dims %v)\n",
		tm.Lower.Round(time.Microsecond), compiled, tm.Compile.Round(time.Microsecond), tm.Run.Round(time.Microsecond), prog.Dims)
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	plugin := fs.String("pjrt-plugin", "", "PJRT plugin path or platform name")
	cpuDevices := fs.Int("cpu-devices", 0, "with the CPU plugin: the number of host devices its client has (as serve's --cpu-devices)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "xserve (development build)")
	path, err := pjrt.FindPlugin(pjrt.FindOptions{Path: *plugin})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pjrt plugin file: %s\n", path)
	if pkg := pjrt.PluginPackage(path); pkg != "" {
		fmt.Fprintf(stdout, "plugin package: %s\n", pkg)
	}
	apiVersion, err := pjrt.PluginAPIVersion(path)
	if err != nil {
		return fmt.Errorf("version: the PJRT plugin cannot be loaded: %w", err)
	}
	fmt.Fprintf(stdout, "plugin version: %s\n", apiVersion)
	client, err := pjrt.OpenWith(path, pjrt.OpenOptions{CPUDevices: *cpuDevices})
	if err != nil {
		return fmt.Errorf("version: the PJRT plugin %s loads (PJRT C API %s) but no device is usable (no accelerator here, or its driver is missing): %w", path, apiVersion, err)
	}
	defer client.Close()
	fmt.Fprintf(stdout, "pjrt plugin: %s\n", client)
	fmt.Fprintf(stdout, "devices: %d %s\n", client.Devices(), client.Platform())
	for d := range client.Devices() {
		kind, err := client.DeviceKind(d)
		if err != nil {
			kind = err.Error()
		}
		fmt.Fprintf(stdout, "device %d: %s\n", d, kind)
	}
	switch ks := client.Kernels(); {
	case len(ks) > 0:
		fmt.Fprintf(stdout, "cpu kernels: %s (%s)\n", strings.Join(ks, ", "), client.KernelsFile())
	case client.KernelsError() != nil:
		fmt.Fprintf(stdout, "cpu kernels: not loaded: %v\n", client.KernelsError())
	case client.Platform() == "cpu":
		fmt.Fprintln(stdout, "cpu kernels: none (XLA's own convolutions and dots)")
	}
	if m := client.CPUExecution(); m != "" {
		fmt.Fprintf(stdout, "cpu execution: %s (%s)\n", m, pjrt.EnvCPUExecution)
	}
	return nil
}

// openPlugin finds the PJRT plugin a --pjrt-plugin flag names (or the
// default one) and opens a client on it.
func openPlugin(flagValue string) (*pjrt.Client, error) {
	path, err := pjrt.FindPlugin(pjrt.FindOptions{Path: flagValue})
	if err != nil {
		return nil, err
	}
	return pjrt.Open(path)
}
