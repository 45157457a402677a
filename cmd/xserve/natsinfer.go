package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	natsapi "github.com/xserve/xserve/api/nats"
	"github.com/xserve/xserve/api/textgen"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// runNATSInfer is `xserve nats-infer`: one inference request over NATS, to
// whichever replica of the queue group takes it (or, with --durable,
// through the JetStream work queue), with the outputs printed or written as
// .npy files.
func runNATSInfer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nats-infer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var inputFlags multiFlag
	fs.Var(&inputFlags, "input", "input NAME=FILE.npy (repeatable, one per model input)")
	url := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server or cluster (comma-separated URLs)")
	model := fs.String("model", "", "model name (required)")
	version := fs.Int64("version", 0, "model version (default: the latest)")
	outDir := fs.String("output", "", "directory to write <output name>.npy files into (default: print the outputs)")
	durable := fs.Bool("durable", false, "send through the JetStream work queue (needs replicas running with --nats-durable)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the reply, per attempt")
	retries := fs.Int("retries", 1, "retries after a timeout or a retryable error (429, 503, 504), with the same request id")
	id := fs.String("id", "", "request id (default: a fresh unique one)")
	useJSON := fs.Bool("json", false, "send JSON data instead of the binary tensor extension")
	compress := fs.String("compress", "", "compress the request: gzip or zstd")
	acceptEnc := fs.String("accept-encoding", "", "ask for a compressed reply: gzip or zstd")
	prefix := fs.String("prefix", natsapi.DefaultPrefix, "subject prefix of the replicas")
	creds := fs.String("creds", "", "NATS credentials file")
	token := fs.String("token", "", "NATS authentication token (default: $XSERVE_NATS_TOKEN)")
	nkey := fs.String("nkey", "", "NKey seed file (default: $XSERVE_NATS_NKEY, else for a loopback --nats-url the client.nk of the embedded server on its port, $XSERVE_CACHE/nats/PORT/client.nk)")
	tlsCert := fs.String("tls-cert", "", "client certificate (PEM)")
	tlsKey := fs.String("tls-key", "", "key of --tls-cert (PEM)")
	tlsCA := fs.String("tls-ca", "", "CA bundle (PEM) of the server's certificate")
	generate := fs.String("generate", "", "generate text from this prompt (a generative model), printing it as it comes, instead of an inference")
	params := fs.String("params", "", `with --generate: the sampling parameters as JSON, by their OpenAI names ('{"max_tokens": 64, "temperature": 0}')`)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: xserve nats-infer --model M --input NAME=FILE.npy ... [--nats-url nats://127.0.0.1:4222] [--durable] [--timeout 5s] [--output DIR]")
		fmt.Fprintln(stderr, "       xserve nats-infer --model M --generate PROMPT [--params JSON] [--durable] [--timeout 5m]")
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fs.Usage()
		return fmt.Errorf("nats-infer: unexpected arguments %q", pos)
	}
	if *model == "" {
		fs.Usage()
		return errors.New("nats-infer: --model is required")
	}
	if len(inputFlags) == 0 && *generate == "" {
		return errors.New("nats-infer: give the inputs with --input NAME=FILE.npy (or a prompt with --generate)")
	}
	if *retries < 0 || *timeout <= 0 {
		return errors.New("nats-infer: --retries must be >= 0 and --timeout > 0")
	}
	inputs, err := readNATSInputs(inputFlags)
	if err != nil {
		return err
	}
	*token, *nkey = natsCredentials(*url, *creds, *token, *nkey)

	cctx, cancel := context.WithTimeout(ctx, *timeout)
	nc, err := natsapi.Connect(cctx, *url, natsapi.ConnOptions{
		Name: "xserve nats-infer", CredsFile: *creds, Token: *token, NkeyFile: *nkey,
		TLSCert: *tlsCert, TLSKey: *tlsKey, TLSCA: *tlsCA,
		Logger: newQuietLogger(stderr),
	})
	cancel()
	if err != nil {
		return err
	}
	defer nc.Close()
	client, err := natsapi.NewClient(nc, natsapi.ClientOptions{Prefix: *prefix, Durable: *durable})
	if err != nil {
		return err
	}
	defer client.Close()
	if *generate != "" {
		return natsGenerate(ctx, client, *model, *version, *generate, *params, *timeout, stdout, stderr)
	}
	if *id == "" {
		*id = nuid.Next()
	}
	opts := natsapi.InferOptions{Version: *version, ID: *id, JSON: *useJSON, Compression: *compress, AcceptEncoding: *acceptEnc}
	r := natsRequest{client: client, model: *model, inputs: inputs, opts: opts, durable: *durable, timeout: *timeout, retries: *retries}
	res, err := r.send(ctx, stderr)
	if err != nil {
		return err
	}
	return writeNATSOutputs(stdout, res, *outDir)
}

// readNATSInputs reads the --input NAME=FILE.npy files, sorted by name.
func readNATSInputs(flags []string) ([]serving.NamedTensor, error) {
	var inputs []serving.NamedTensor
	seen := map[string]bool{}
	for _, f := range flags {
		name, path, ok := strings.Cut(f, "=")
		if !ok || name == "" || path == "" {
			return nil, fmt.Errorf("nats-infer: --input %q: want NAME=FILE.npy", f)
		}
		if seen[name] {
			return nil, fmt.Errorf("nats-infer: --input %s given twice", name)
		}
		seen[name] = true
		t, err := tensor.ReadNpyFile(path)
		if err != nil {
			return nil, fmt.Errorf("nats-infer: input %s: %w", name, err)
		}
		inputs = append(inputs, serving.NamedTensor{Name: name, Tensor: t})
	}
	sort.Slice(inputs, func(i, j int) bool { return inputs[i].Name < inputs[j].Name })
	return inputs, nil
}

// natsCredentials fills the token and NKey seed the flags left empty from
// the environment, then (with no credentials at all) the embedded server's
// client seed for a loopback url.
func natsCredentials(url, creds, token, nkey string) (string, string) {
	if token == "" {
		token = os.Getenv("XSERVE_NATS_TOKEN")
	}
	if nkey == "" {
		nkey = os.Getenv("XSERVE_NATS_NKEY")
	}
	if nkey == "" && creds == "" && token == "" {
		nkey = embeddedClientSeed(url)
	}
	return token, nkey
}

// natsRequest is one nats-infer request and how it is retried.
type natsRequest struct {
	client  *natsapi.Client
	model   string
	inputs  []serving.NamedTensor
	opts    natsapi.InferOptions
	durable bool
	timeout time.Duration
	retries int
}

// send sends the request, retrying a timeout or a temporary error (after
// the reply's Retry-After, else 100ms) up to r.retries times with the same
// request id, and reports the answering replica on stderr.
func (r natsRequest) send(ctx context.Context, stderr io.Writer) (*natsapi.Result, error) {
	for attempt := 0; ; attempt++ {
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, r.timeout)
		res, err := r.client.Infer(actx, r.model, r.inputs, r.opts)
		cancel()
		if err == nil {
			fmt.Fprintf(stderr, "answered by replica %s in %s (request %s", res.Replica, time.Since(start).Round(time.Microsecond), r.opts.ID)
			if r.durable {
				fmt.Fprintf(stderr, ", delivery %d", res.Delivery)
			}
			fmt.Fprintln(stderr, ")")
			return res, nil
		}
		var re *natsapi.ReplyError
		retryable := errors.Is(err, natsapi.ErrTimeout) || errors.As(err, &re) && re.Temporary()
		if !retryable || attempt >= r.retries || ctx.Err() != nil {
			return nil, err
		}
		wait := 100 * time.Millisecond
		if re != nil && re.RetryAfter > 0 {
			wait = re.RetryAfter
		}
		fmt.Fprintf(stderr, "nats-infer: %v; retrying in %v\n", err, wait)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// writeNATSOutputs prints the outputs, or writes them as .npy files into
// outDir.
func writeNATSOutputs(stdout io.Writer, res *natsapi.Result, outDir string) error {
	fmt.Fprintf(stdout, "model %s version %d\n", res.ModelName, res.ModelVersion)
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return err
		}
	}
	for _, o := range res.Outputs {
		if outDir == "" {
			fmt.Fprintf(stdout, "output %s: %s %s\n", o.Name, o.Tensor, valuesString(o.Tensor))
			continue
		}
		file := filepath.Join(outDir, outputFileName(o.Name))
		if err := tensor.WriteNpyFile(file, o.Tensor); err != nil {
			return fmt.Errorf("nats-infer: write output %s: %w", o.Name, err)
		}
		fmt.Fprintf(stdout, "output %s: %s -> %s\n", o.Name, o.Tensor, file)
	}
	return nil
}

// valuesString prints a small tensor's values, or says how many there are.
func valuesString(t *tensor.Tensor) string {
	n := t.NumElements()
	if n > 64 || t.DType == tensor.String || t.DType.IsComplex() {
		return fmt.Sprintf("(%d values; use --output DIR)", n)
	}
	vals := make([]string, n)
	for i := range n {
		if t.DType.IsFloat() {
			vals[i] = fmt.Sprintf("%.6g", t.Float64At(i))
		} else {
			vals[i] = fmt.Sprint(t.Int64At(i))
		}
	}
	return "[" + strings.Join(vals, " ") + "]"
}

// newQuietLogger logs warnings and errors (connection retries) to w.
func newQuietLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// embeddedClientSeed is the client seed that `xserve serve` writes for the
// embedded NATS server listening on url's port (without --nats-store), when
// url is one loopback URL and the file exists; else "".
func embeddedClientSeed(url string) string {
	u, err := neturl.Parse(url)
	if err != nil || strings.Contains(url, ",") {
		return ""
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "4222"
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return ""
	}
	p := filepath.Join(defaultCacheDir(), "nats", port, "client.nk")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// natsGenerate streams a text generation to stdout as it comes, then says
// how it ended on stderr.
func natsGenerate(ctx context.Context, client *natsapi.Client, model string, version int64, prompt, params string, timeout time.Duration, stdout, stderr io.Writer) error {
	var p textgen.Params
	if params != "" {
		if err := json.Unmarshal([]byte(params), &p); err != nil {
			return fmt.Errorf("nats-infer: --params is not a JSON object of sampling parameters: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	end, err := client.Generate(ctx, model, version, prompt, &p, func(text string) { fmt.Fprint(stdout, text) })
	fmt.Fprintln(stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "model %s version %s: %d prompt tokens, %d generated in %s, finish_reason %s\n",
		end.ModelName, end.ModelVersion, end.PromptTokens, end.GeneratedTokens, time.Since(start).Round(time.Millisecond), end.FinishReason)
	return nil
}
