package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/xserve/xserve/tensor"
)

// Protocol is a request format of the HTTP target.
type Protocol string

// The HTTP target's protocols.
const (
	// ProtocolV1JSON posts xserve's JSON form to /v1/infer:
	// {"model": M, "inputs": {NAME: {"dtype": "float32", "shape": [...], "data": [...]}}}.
	ProtocolV1JSON Protocol = "v1json"
	// ProtocolV2JSON posts the Open Inference Protocol's JSON form to
	// /v2/models/M/infer: {"inputs": [{"name", "shape", "datatype", "data"}]}.
	ProtocolV2JSON Protocol = "v2json"
	// ProtocolV2Binary posts to /v2/models/M/infer with the binary tensor
	// extension: a JSON header whose inputs say "binary_data_size", then the
	// raw little-endian tensor bytes; the header's length is in the
	// Inference-Header-Content-Length header. Outputs are asked for in
	// binary too.
	ProtocolV2Binary Protocol = "v2binary"
)

// ParseProtocol parses "v1json", "v2json" or "v2binary".
func ParseProtocol(s string) (Protocol, error) {
	switch p := Protocol(strings.ToLower(s)); p {
	case ProtocolV1JSON, ProtocolV2JSON, ProtocolV2Binary:
		return p, nil
	}
	return "", fmt.Errorf("%w: protocol %q: want v1json, v2json or v2binary", ErrOptions, s)
}

// HeaderContentLength is the Open Inference Protocol binary extension's
// header giving the length of the JSON header that starts the body.
const HeaderContentLength = "Inference-Header-Content-Length"

// HTTPOptions configures an HTTPTarget. Zero values mean the defaults.
type HTTPOptions struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:8080". Required.
	URL string
	// Model is the model to infer with. Required.
	Model string
	// Version is the model version; empty for the server's choice. v2 posts
	// to /v2/models/M/versions/V/infer; v1 sends it as "version".
	Version string
	// Protocol is the request format; default ProtocolV1JSON.
	Protocol Protocol
	// Compression compresses request bodies: "", "gzip" or "zstd". Bodies
	// are compressed once, before the run.
	Compression string
	// AcceptEncoding asks for compressed responses: "", "gzip" or "zstd".
	AcceptEncoding string
	// Outputs names the outputs to ask for; nil asks for all.
	Outputs []string
	// Validate decodes every successful response and checks that it has
	// outputs whose data matches their shape and dtype; a response that does
	// not fails with ErrInvalidResponse.
	Validate bool
	// ExpectOutputs, when set, also checks each named output's shape
	// (-1 matches any size). It implies Validate.
	ExpectOutputs map[string][]int64
	// Conns is the number of keep-alive connections kept open: set it to the
	// run's concurrency (or MaxInFlight). Default 64.
	Conns int
	// Timeout bounds each request, from sending to reading the whole
	// response. Default 30s.
	Timeout time.Duration
	// MaxResponseBytes bounds a response body that is read to be validated
	// (after decompression). Default 256 MiB.
	MaxResponseBytes int64
	// Header holds extra request headers.
	Header http.Header
	// AllowRemote lets the target connect to addresses other than loopback
	// (127.0.0.0/8, ::1). Without it, both the URL and every connection the
	// target dials are checked.
	AllowRemote bool
}

func (o *HTTPOptions) setDefaults() {
	if o.Protocol == "" {
		o.Protocol = ProtocolV1JSON
	}
	if o.Conns == 0 {
		o.Conns = 64
	}
	responseDefaults(&o.Timeout, &o.MaxResponseBytes, &o.Validate, o.ExpectOutputs)
}

func (o *HTTPOptions) validate() error {
	if _, err := ParseProtocol(string(o.Protocol)); err != nil {
		return err
	}
	if o.Model == "" {
		return fmt.Errorf("%w: HTTPOptions.Model is empty", ErrOptions)
	}
	for _, c := range []struct{ field, v string }{{"Compression", o.Compression}, {"AcceptEncoding", o.AcceptEncoding}} {
		if c.v != "" && c.v != "gzip" && c.v != "zstd" {
			return fmt.Errorf("%w: HTTPOptions.%s %q: want \"\", \"gzip\" or \"zstd\"", ErrOptions, c.field, c.v)
		}
	}
	if o.Conns < 0 || o.Timeout < 0 || o.MaxResponseBytes < 0 {
		return fmt.Errorf("%w: HTTPOptions Conns %d, Timeout %v and MaxResponseBytes %d must not be negative", ErrOptions, o.Conns, o.Timeout, o.MaxResponseBytes)
	}
	return nil
}

// HTTPTarget sends inference requests to an xserve HTTP server. It is a
// Target and a Preparer, safe for concurrent use; Close it when done.
type HTTPTarget struct {
	opts   HTTPOptions
	url    string
	client *http.Client
	zenc   *zstd.Encoder
	zdec   *zstd.Decoder
	closed sync.Once
}

// NewHTTPTarget checks opts (including, unless AllowRemote, that the URL is
// a loopback one) and returns a target with its own connection pool.
func NewHTTPTarget(ctx context.Context, opts HTTPOptions) (*HTTPTarget, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	base, err := url.Parse(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: URL %q: %v", ErrOptions, opts.URL, err)
	}
	if base.Scheme != "http" && base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("%w: URL %q: want http://HOST:PORT or https://HOST:PORT", ErrOptions, opts.URL)
	}
	if !opts.AllowRemote {
		if err := CheckLoopbackURL(ctx, opts.URL); err != nil {
			return nil, err
		}
	}
	path, raw := "/v1/infer", "/v1/infer"
	if opts.Protocol != ProtocolV1JSON {
		path, raw = "/v2/models/"+opts.Model, "/v2/models/"+url.PathEscape(opts.Model)
		if opts.Version != "" {
			path, raw = path+"/versions/"+opts.Version, raw+"/versions/"+url.PathEscape(opts.Version)
		}
		path, raw = path+"/infer", raw+"/infer"
	}
	prefix := strings.TrimSuffix(base.EscapedPath(), "/")
	base.Path = strings.TrimSuffix(base.Path, "/") + path
	base.RawPath = prefix + raw
	base.RawQuery, base.Fragment = "", ""

	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if !opts.AllowRemote {
		dialer.Control = loopbackOnly
	}
	tr := &http.Transport{
		Proxy:               nil, // never through a proxy: the load goes where the URL says
		DialContext:         dialer.DialContext,
		MaxIdleConns:        opts.Conns,
		MaxIdleConnsPerHost: opts.Conns,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 5 * time.Second,
		DisableCompression:  true, // Accept-Encoding only when asked
	}
	t := &HTTPTarget{
		opts: opts,
		url:  base.String(),
		client: &http.Client{
			Transport:     tr,
			Timeout:       opts.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	if opts.Compression == "zstd" {
		if t.zenc, err = zstd.NewWriter(nil); err != nil {
			return nil, fmt.Errorf("loadtest: zstd: %w", err)
		}
	}
	if opts.AcceptEncoding == "zstd" {
		if t.zdec, err = zstd.NewReader(nil, zstd.WithDecoderMaxMemory(uint64(opts.MaxResponseBytes))); err != nil {
			return nil, fmt.Errorf("loadtest: zstd: %w", err)
		}
	}
	return t, nil
}

// URL returns the URL the target posts to.
func (t *HTTPTarget) URL() string { return t.url }

// String describes the target, e.g.
// "http v1json POST http://127.0.0.1:8080/v1/infer (model tinycnn)".
func (t *HTTPTarget) String() string {
	s := fmt.Sprintf("http %s POST %s (model %s", t.opts.Protocol, t.url, t.opts.Model)
	if t.opts.Version != "" {
		s += " version " + t.opts.Version
	}
	s += ")"
	if t.opts.Compression != "" {
		s += ", request " + t.opts.Compression
	}
	if t.opts.AcceptEncoding != "" {
		s += ", response " + t.opts.AcceptEncoding
	}
	if t.opts.Validate {
		s += ", validated"
	}
	return s
}

// Close closes the idle connections and releases the codecs. It is safe to
// call more than once; the target must not be used after it.
func (t *HTTPTarget) Close() error {
	t.closed.Do(func() {
		t.client.CloseIdleConnections()
		if t.zenc != nil {
			t.zenc.Close()
		}
		if t.zdec != nil {
			t.zdec.Close()
		}
	})
	return nil
}

// httpPayload is a request encoded for the wire.
type httpPayload struct {
	body        []byte
	contentType string
	headerLen   int // v2binary: length of the JSON header (uncompressed)
}

// Prepare encodes req once, in the target's protocol and compression.
func (t *HTTPTarget) Prepare(req *Request) error {
	p, err := t.encode(req.Inputs)
	if err != nil {
		return err
	}
	req.Payload = p
	return nil
}

// Encode returns the request body the target sends for inputs, before
// compression, and its content type. For ProtocolV2Binary headerLen is the
// length of the JSON header.
func (t *HTTPTarget) Encode(inputs Sample) (body []byte, contentType string, headerLen int, err error) {
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	switch t.opts.Protocol {
	case ProtocolV1JSON:
		body, err = t.encodeV1(names, inputs)
		return body, "application/json", 0, err
	case ProtocolV2JSON:
		body, err = t.encodeV2JSON(names, inputs)
		return body, "application/json", 0, err
	default:
		body, headerLen, err = t.encodeV2Binary(names, inputs)
		return body, "application/octet-stream", headerLen, err
	}
}

func (t *HTTPTarget) encode(inputs Sample) (*httpPayload, error) {
	body, ct, hl, err := t.Encode(inputs)
	if err != nil {
		return nil, err
	}
	p := &httpPayload{body: body, contentType: ct, headerLen: hl}
	switch t.opts.Compression {
	case "gzip":
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		if _, err := w.Write(body); err != nil {
			return nil, fmt.Errorf("loadtest: gzip: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("loadtest: gzip: %w", err)
		}
		p.body = b.Bytes()
	case "zstd":
		p.body = t.zenc.EncodeAll(body, nil)
	}
	return p, nil
}

func (t *HTTPTarget) encodeV1(names []string, inputs Sample) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"model":`)
	writeJSONString(&b, t.opts.Model)
	if t.opts.Version != "" {
		b.WriteString(`,"version":`)
		writeJSONString(&b, t.opts.Version)
	}
	b.WriteString(`,"inputs":{`)
	for i, name := range names {
		in := inputs[name]
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, name)
		b.WriteString(`:{"dtype":`)
		writeJSONString(&b, in.DType.String())
		b.WriteString(`,"shape":`)
		writeShape(&b, in.Shape)
		b.WriteString(`,"data":`)
		if err := writeData(&b, in); err != nil {
			return nil, fmt.Errorf("%w: input %s: %v", ErrInput, name, err)
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	if len(t.opts.Outputs) > 0 {
		b.WriteString(`,"outputs":`)
		out, _ := json.Marshal(t.opts.Outputs)
		b.Write(out)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (t *HTTPTarget) encodeV2JSON(names []string, inputs Sample) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"inputs":[`)
	for i, name := range names {
		in := inputs[name]
		dt, err := v2DataType(in.DType)
		if err != nil {
			return nil, fmt.Errorf("%w: input %s: %v", ErrInput, name, err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":`)
		writeJSONString(&b, name)
		b.WriteString(`,"shape":`)
		writeShape(&b, in.Shape)
		b.WriteString(`,"datatype":"` + dt + `","data":`)
		if err := writeData(&b, in); err != nil {
			return nil, fmt.Errorf("%w: input %s: %v", ErrInput, name, err)
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	if len(t.opts.Outputs) > 0 {
		b.WriteString(`,"outputs":[`)
		for i, o := range t.opts.Outputs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"name":`)
			writeJSONString(&b, o)
			b.WriteByte('}')
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// v2 binary extension request header types.
type (
	v2BinInput struct {
		Name       string       `json:"name"`
		Shape      []int64      `json:"shape"`
		DataType   string       `json:"datatype"`
		Parameters v2BinInParam `json:"parameters"`
	}
	v2BinInParam struct {
		BinaryDataSize int `json:"binary_data_size"`
	}
	v2BinOutput struct {
		Name       string        `json:"name"`
		Parameters v2BinOutParam `json:"parameters"`
	}
	v2BinOutParam struct {
		BinaryData bool `json:"binary_data"`
	}
	v2BinRequest struct {
		Inputs     []v2BinInput    `json:"inputs"`
		Outputs    []v2BinOutput   `json:"outputs,omitempty"`
		Parameters *v2BinReqParams `json:"parameters,omitempty"`
	}
	v2BinReqParams struct {
		BinaryDataOutput bool `json:"binary_data_output"`
	}
)

func (t *HTTPTarget) encodeV2Binary(names []string, inputs Sample) ([]byte, int, error) {
	var req v2BinRequest
	size := 0
	for _, name := range names {
		in := inputs[name]
		dt, err := v2DataType(in.DType)
		if err != nil || in.DType == tensor.String || in.DType.IsComplex() {
			return nil, 0, fmt.Errorf("%w: input %s: cannot send %s in binary", ErrInput, name, in.DType)
		}
		req.Inputs = append(req.Inputs, v2BinInput{Name: name, Shape: in.Shape, DataType: dt, Parameters: v2BinInParam{BinaryDataSize: len(in.Data)}})
		size += len(in.Data)
	}
	for _, o := range t.opts.Outputs {
		req.Outputs = append(req.Outputs, v2BinOutput{Name: o, Parameters: v2BinOutParam{BinaryData: true}})
	}
	if len(req.Outputs) == 0 {
		req.Parameters = &v2BinReqParams{BinaryDataOutput: true}
	}
	header, err := json.Marshal(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrInput, err)
	}
	body := make([]byte, 0, len(header)+size)
	body = append(body, header...)
	for _, name := range names {
		body = append(body, inputs[name].Data...)
	}
	return body, len(header), nil
}

// v2DataType maps a dtype to its Open Inference Protocol datatype name.
func v2DataType(d tensor.DType) (string, error) {
	switch d {
	case tensor.Bool:
		return "BOOL", nil
	case tensor.Float16:
		return "FP16", nil
	case tensor.BFloat16:
		return "BF16", nil
	case tensor.Float32:
		return "FP32", nil
	case tensor.Float64:
		return "FP64", nil
	case tensor.String:
		return "BYTES", nil
	case tensor.Int8, tensor.Int16, tensor.Int32, tensor.Int64, tensor.Uint8, tensor.Uint16, tensor.Uint32, tensor.Uint64:
		return strings.ToUpper(d.String()), nil
	}
	return "", fmt.Errorf("the Open Inference Protocol has no datatype for %s", d)
}

func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s)
	b.Write(q)
}

func writeShape(b *bytes.Buffer, shape []int64) {
	b.WriteByte('[')
	for i, d := range shape {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	b.WriteByte(']')
}

// writeData writes t's elements as a flat JSON array.
func writeData(b *bytes.Buffer, t *tensor.Tensor) error {
	if t.DType == tensor.String || t.DType.IsComplex() || t.DType == tensor.Invalid {
		return fmt.Errorf("cannot send %s tensors as JSON numbers", t.DType)
	}
	n := t.NumElements()
	if int64(len(t.Data)) != n*int64(t.DType.Size()) {
		return fmt.Errorf("%s holds %d bytes, want %d", t, len(t.Data), n*int64(t.DType.Size()))
	}
	buf := b.AvailableBuffer()
	buf = append(buf, '[')
	for i := range n {
		if i > 0 {
			buf = append(buf, ',')
		}
		switch {
		case t.DType == tensor.Bool:
			buf = strconv.AppendBool(buf, t.Data[i] != 0)
		case t.DType == tensor.Uint64:
			buf = strconv.AppendUint(buf, uint64(t.Int64At(i)), 10)
		case t.DType.IsInt():
			buf = strconv.AppendInt(buf, t.Int64At(i), 10)
		default:
			v := t.Float64At(i)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("element %d is %v, which JSON cannot carry; use -protocol v2binary", i, v)
			}
			bits := 32
			if t.DType == tensor.Float64 {
				bits = 64
			}
			buf = strconv.AppendFloat(buf, v, 'g', -1, bits)
		}
	}
	buf = append(buf, ']')
	b.Write(buf)
	return nil
}

// Do sends req and reads the whole response. Statuses other than 200 fail
// with a *StatusError; with Validate set, so do malformed responses (with
// ErrInvalidResponse).
func (t *HTTPTarget) Do(ctx context.Context, req *Request) (*Result, error) {
	p, ok := req.Payload.(*httpPayload)
	if !ok {
		var err error
		if p, err = t.encode(req.Inputs); err != nil {
			return nil, err
		}
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(p.body))
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	for k, v := range t.opts.Header {
		hr.Header[k] = v
	}
	hr.Header.Set("Content-Type", p.contentType)
	if t.opts.Compression != "" {
		hr.Header.Set("Content-Encoding", t.opts.Compression)
	}
	if t.opts.Protocol == ProtocolV2Binary {
		hr.Header.Set(HeaderContentLength, strconv.Itoa(p.headerLen))
	}
	if t.opts.AcceptEncoding != "" {
		hr.Header.Set("Accept-Encoding", t.opts.AcceptEncoding)
	}
	resp, err := t.client.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	res := &Result{Status: resp.StatusCode, BytesSent: int64(len(p.body))}
	if resp.StatusCode != http.StatusOK {
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, t.opts.MaxResponseBytes))
		res.BytesReceived = int64(len(head)) + n
		return res, &StatusError{Protocol: "http", Code: resp.StatusCode, Message: errorMessage(head)}
	}
	if !t.opts.Validate {
		n, err := io.Copy(io.Discard, resp.Body)
		res.BytesReceived = n
		return res, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, t.opts.MaxResponseBytes+1))
	res.BytesReceived = int64(len(body))
	if err != nil {
		return res, err
	}
	if int64(len(body)) > t.opts.MaxResponseBytes {
		return res, fmt.Errorf("%w: body larger than %d bytes", ErrInvalidResponse, t.opts.MaxResponseBytes)
	}
	if body, err = t.decompress(resp.Header.Get("Content-Encoding"), body); err != nil {
		return res, err
	}
	headerLen := -1
	if h := resp.Header.Get(HeaderContentLength); h != "" {
		if headerLen, err = strconv.Atoi(h); err != nil || headerLen < 0 || headerLen > len(body) {
			return res, fmt.Errorf("%w: %s %q does not fit a %d-byte body", ErrInvalidResponse, HeaderContentLength, h, len(body))
		}
	}
	if err := validateResponse(body, headerLen, t.opts.ExpectOutputs); err != nil {
		return res, err
	}
	return res, nil
}

// errorMessage extracts {"error": "..."} from an error body, or returns the
// body's start.
func errorMessage(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func (t *HTTPTarget) decompress(enc string, body []byte) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(enc)) {
	case "", "identity":
		return body, nil
	case "gzip":
		r, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", ErrInvalidResponse, err)
		}
		out, err := io.ReadAll(io.LimitReader(r, t.opts.MaxResponseBytes+1))
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", ErrInvalidResponse, err)
		}
		if int64(len(out)) > t.opts.MaxResponseBytes {
			return nil, fmt.Errorf("%w: body decompresses to more than %d bytes", ErrInvalidResponse, t.opts.MaxResponseBytes)
		}
		return out, nil
	case "zstd":
		if t.zdec == nil {
			return nil, fmt.Errorf("%w: zstd body that was not asked for", ErrInvalidResponse)
		}
		out, err := t.zdec.DecodeAll(body, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrInvalidResponse, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown Content-Encoding %q", ErrInvalidResponse, enc)
}

// responseOutput is one output as the v1 and v2 JSON forms describe it.
type responseOutput struct {
	Name       string          `json:"name"`
	DType      string          `json:"dtype"`
	DataType   string          `json:"datatype"`
	Shape      []int64         `json:"shape"`
	Data       json.RawMessage `json:"data"`
	Parameters struct {
		BinaryDataSize *int64 `json:"binary_data_size"`
	} `json:"parameters"`
}

// validateResponse checks a successful response: a JSON object (the first
// headerLen bytes when headerLen >= 0, followed by binary output data) whose
// "outputs" is a non-empty object by name (v1) or list (v2) of outputs, each
// with a shape its data fits; and, with expect, the named outputs' shapes.
func validateResponse(body []byte, headerLen int, expect map[string][]int64) error {
	header, binary := body, []byte(nil)
	if headerLen >= 0 {
		header, binary = body[:headerLen], body[headerLen:]
	}
	var top struct {
		Outputs json.RawMessage `json:"outputs"`
	}
	if err := json.Unmarshal(header, &top); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidResponse, err)
	}
	outs, err := responseOutputs(top.Outputs)
	if err != nil {
		return err
	}
	seen := map[string][]int64{}
	var offset int64
	for _, o := range outs {
		seen[o.Name] = o.Shape
		size, err := o.check(headerLen, binary, offset)
		if err != nil {
			return err
		}
		offset += size
	}
	if headerLen >= 0 && offset != int64(len(binary)) {
		return fmt.Errorf("%w: %d bytes after the header, outputs account for %d", ErrInvalidResponse, len(binary), offset)
	}
	for name, want := range expect {
		got, ok := seen[name]
		if !ok {
			return fmt.Errorf("%w: no output %q", ErrInvalidResponse, name)
		}
		if !shapeMatches(got, want) {
			return fmt.Errorf("%w: output %q has shape %v, want %v", ErrInvalidResponse, name, got, want)
		}
	}
	return nil
}

// responseOutputs reads a response's "outputs": an object by name (v1,
// returned sorted by name) or a list (v2), not empty.
func responseOutputs(outputs json.RawMessage) ([]responseOutput, error) {
	var outs []responseOutput
	raw := bytes.TrimSpace(outputs)
	switch {
	case len(raw) > 0 && raw[0] == '{':
		var m map[string]responseOutput
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("%w: outputs: %v", ErrInvalidResponse, err)
		}
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			o := m[n]
			o.Name = n
			outs = append(outs, o)
		}
	case len(raw) > 0 && raw[0] == '[':
		if err := json.Unmarshal(raw, &outs); err != nil {
			return nil, fmt.Errorf("%w: outputs: %v", ErrInvalidResponse, err)
		}
	default:
		return nil, fmt.Errorf("%w: no \"outputs\" object or list", ErrInvalidResponse)
	}
	if len(outs) == 0 {
		return nil, fmt.Errorf("%w: no outputs", ErrInvalidResponse)
	}
	return outs, nil
}

// check checks that o's data fits its shape: its JSON data, or its
// binary_data_size bytes of binary (the bytes after the header, headerLen
// < 0 when there are none) from offset; it returns the binary bytes o
// takes.
func (o responseOutput) check(headerLen int, binary []byte, offset int64) (int64, error) {
	n := tensor.NumElements(o.Shape)
	if o.Shape == nil || n < 0 {
		return 0, fmt.Errorf("%w: output %q: missing or bad shape %v", ErrInvalidResponse, o.Name, o.Shape)
	}
	name := o.DType
	if name == "" {
		name = o.DataType
	}
	dt, dtErr := tensor.ParseDType(name)
	switch {
	case o.Parameters.BinaryDataSize != nil:
		size := *o.Parameters.BinaryDataSize
		if headerLen < 0 || size < 0 || offset+size > int64(len(binary)) {
			return 0, fmt.Errorf("%w: output %q: binary_data_size %d does not fit the %d bytes after the header", ErrInvalidResponse, o.Name, size, len(binary)-int(offset))
		}
		if dtErr == nil && dt != tensor.String && size != n*int64(dt.Size()) {
			return 0, fmt.Errorf("%w: output %q: %d bytes for %s%v, want %d", ErrInvalidResponse, o.Name, size, dt, o.Shape, n*int64(dt.Size()))
		}
		return size, nil
	case len(o.Data) > 0:
		count, err := countElements(o.Data)
		if err != nil {
			return 0, fmt.Errorf("%w: output %q: data: %v", ErrInvalidResponse, o.Name, err)
		}
		if count != n {
			return 0, fmt.Errorf("%w: output %q: %d data elements for shape %v, want %d", ErrInvalidResponse, o.Name, count, o.Shape, n)
		}
		return 0, nil
	}
	return 0, fmt.Errorf("%w: output %q has neither data nor binary_data_size", ErrInvalidResponse, o.Name)
}

// countElements counts the scalars in a (possibly nested) JSON array, or 1
// for a lone scalar.
func countElements(raw json.RawMessage) (int64, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var n int64
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
		switch tok.(type) {
		case json.Delim:
		default:
			n++
		}
	}
}

func shapeMatches(got, want []int64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if want[i] >= 0 && got[i] != want[i] {
			return false
		}
	}
	return true
}
