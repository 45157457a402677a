package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	natsapi "github.com/xserve/xserve/api/nats"
)

// What no error message may show a client: an absolute path (what the
// client sent aside) or a Go package prefix.
var (
	absPathRE = regexp.MustCompile(`(^|[\s"'(=\[])/[A-Za-z0-9_.]`)
	pkgRE     = regexp.MustCompile(`(^|: |\()(httpapi|grpcapi|natsapi|payload|serving|engine|runner|batching|modelrepo|importer|onnx|fx|fxgraph|lower|stablehlo|pjrt|tensor|auth|triton|grpc|nats): `)
)

// checkPublic fails when msg shows an absolute path or a package prefix
// other than in sent, the strings the client sent.
func checkPublic(t *testing.T, where, msg string, sent ...string) {
	t.Helper()
	rest := msg
	for _, s := range sent {
		rest = strings.ReplaceAll(rest, s, "SENT")
	}
	if absPathRE.MatchString(rest) {
		t.Errorf("%s: an absolute path in %q", where, msg)
	}
	if pkgRE.MatchString(rest) {
		t.Errorf("%s: a package prefix in %q", where, msg)
	}
}

// grpcCodeOf is the gRPC code a protocol-wide HTTP status maps to.
func grpcCodeOf(code int) codes.Code {
	switch code {
	case 400:
		return codes.InvalidArgument
	case 404:
		return codes.NotFound
	case 413:
		return codes.ResourceExhausted
	case 429, 503:
		return codes.Unavailable
	}
	return codes.Internal
}

// brokenRepo is tinycnn's repository plus a model whose file is garbage
// and one whose config does not parse.
func brokenRepo(t *testing.T) string {
	repo := tinycnnRepo(t)
	for path, data := range map[string]string{
		"broken/1/model.onnx":    "not an ONNX model",
		"badconfig/1/model.onnx": "not an ONNX model either",
		"badconfig/config.yaml":  "buckets: [unclosed\n",
	} {
		p := filepath.Join(repo, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return repo
}

// everyProtocol is a running xserve and a client of each protocol.
type everyProtocol struct {
	p    *xserveProc
	grpc pb.GRPCInferenceServiceClient
	nats *nats.Conn
}

func startEveryProtocol(t *testing.T, repo string) *everyProtocol {
	t.Helper()
	p := launchXserve(t, repo, t.TempDir(), "--nats-listen", "127.0.0.1:0")
	waitStatus(t, p.url+"/v2/models/tinycnn/ready", http.StatusOK, 3*time.Minute)
	conn, err := grpc.NewClient(p.grpcAddr(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	url, seed := p.embeddedNATS(t)
	nc, err := natsapi.Connect(context.Background(), url, natsapi.ConnOptions{NkeyFile: seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &everyProtocol{p: p, grpc: pb.NewGRPCInferenceServiceClient(conn), nats: nc}
}

// embeddedNATS waits for the embedded NATS server's URL and client seed
// file in the log.
func (p *xserveProc) embeddedNATS(t *testing.T) (url, seed string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		u, s := embeddedURLE.FindStringSubmatch(p.log.String()), clientNkeyRE.FindStringSubmatch(p.log.String())
		if u != nil && s != nil {
			return u[1], s[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no embedded NATS URL or client seed in the log:\n%s", p.log)
	return "", ""
}

// errorMessage is the "error" of a JSON error body.
func errorMessage(t *testing.T, body []byte) string {
	t.Helper()
	var e struct{ Error string }
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Fatalf("not an error body: %q (%v)", body, err)
	}
	return e.Error
}

// TestErrorsOnEveryProtocol: one table of failing requests, each sent over
// HTTP, gRPC and NATS to a real server whose repository holds, beside
// tinycnn, a model whose file is garbage and one whose config does not
// parse. Every protocol answers each with the same status and a message
// that names what was wrong, keeps the model name as the client sent it
// (an absolute path too), and shows no absolute path of the server's and
// no Go package prefix; so do the repository index's reasons and HTTP's
// own 404 and 405.
func TestErrorsOnEveryProtocol(t *testing.T) {
	ep := startEveryProtocol(t, brokenRepo(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const depth = 2_000_000
	deepJSON := `{"model": "tinycnn", "parameters": {"p": ` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}, "inputs": {}}`
	var groups []byte
	for range depth {
		groups = protowire.AppendTag(groups, 99, protowire.StartGroupType)
	}
	for range depth {
		groups = protowire.AppendTag(groups, 99, protowire.EndGroupType)
	}
	for _, tc := range []struct {
		name, model, dtype string
		shape              []int64
		deep               bool
		code               int
		want, wantGRPC     string // wantGRPC: when gRPC's message differs
	}{
		{name: "unknown model", model: "nosuch", code: 404, want: `"nosuch"`},
		{name: "absolute model name", model: "/srv/models/tinycnn", code: 404, want: `"/srv/models/tinycnn"`},
		{name: "garbage model file", model: "broken", code: 503, want: "broken/1/model.onnx"},
		{name: "config that does not parse", model: "badconfig", code: 503, want: "badconfig/config.yaml"},
		{name: "wrong dtype", model: "tinycnn", dtype: "INT64", code: 400, want: "float32"},
		{name: "wrong shape", model: "tinycnn", shape: []int64{1, 3, 31, 31}, code: 400, want: "31"},
		{name: "2M-deep body", model: "tinycnn", deep: true, code: 400, want: "(MaxJSONDepth)", wantGRPC: "not a valid ModelInferRequest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.dtype == "" {
				tc.dtype = "FP32"
			}
			if tc.shape == nil {
				tc.shape = []int64{1, 3, 32, 32}
			}
			n := int64(1)
			for _, d := range tc.shape {
				n *= d
			}
			data := "[" + strings.TrimSuffix(strings.Repeat("0,", int(n)), ",") + "]"
			body := []byte(fmt.Sprintf(`{"model": %q, "inputs": {"image": {"dtype": %q, "shape": %s, "data": %s}}}`, tc.model, tc.dtype, shapeJSON(tc.shape), data))
			if tc.deep {
				body = []byte(deepJSON)
			}
			wantGRPC := tc.want
			if tc.wantGRPC != "" {
				wantGRPC = tc.wantGRPC
			}

			r := call(t, "POST", ep.p.url+"/v1/infer", body, "Content-Type", "application/json")
			msg := errorMessage(t, r.body)
			if r.code != tc.code || !strings.Contains(msg, tc.want) {
				t.Errorf("HTTP: %d %q, want %d with %q", r.code, msg, tc.code, tc.want)
			}
			checkPublic(t, "HTTP", msg, tc.model)

			req := &pb.ModelInferRequest{ModelName: tc.model,
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "image", Datatype: tc.dtype, Shape: tc.shape}},
				RawInputContents: [][]byte{make([]byte, n*4)}}
			if tc.dtype == "INT64" {
				req.RawInputContents[0] = make([]byte, n*8)
			}
			if tc.deep {
				req.ProtoReflect().SetUnknown(protoreflect.RawFields(groups))
			}
			_, err := ep.grpc.ModelInfer(ctx, req)
			st := status.Convert(err)
			if st.Code() != grpcCodeOf(tc.code) || !strings.Contains(st.Message(), wantGRPC) {
				t.Errorf("gRPC: %v %q, want %v with %q", st.Code(), st.Message(), grpcCodeOf(tc.code), wantGRPC)
			}
			checkPublic(t, "gRPC", st.Message(), tc.model)

			reply, err := ep.nats.RequestMsgWithContext(ctx, &nats.Msg{Subject: "xserve.v1.infer", Data: body, Header: nats.Header{}})
			if err != nil {
				t.Fatalf("NATS: %v", err)
			}
			msg = errorMessage(t, reply.Data)
			if code := reply.Header.Get(natsapi.HeaderError); code != fmt.Sprint(tc.code) || !strings.Contains(msg, tc.want) {
				t.Errorf("NATS: %s %q, want %d with %q", code, msg, tc.code, tc.want)
			}
			checkPublic(t, "NATS", msg, tc.model)
			checkPublic(t, "NATS header", reply.Header.Get(natsapi.HeaderErrorMessage), tc.model)
		})
	}

	// The repository index: the same reasons over HTTP and gRPC, public.
	var index []struct{ Name, Reason string }
	if err := json.Unmarshal(call(t, "POST", ep.p.url+"/v2/repository/index", nil).body, &index); err != nil {
		t.Fatal(err)
	}
	gindex, err := ep.grpc.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, m := range gindex.Models {
		reasons[m.Name] = m.Reason
		checkPublic(t, "gRPC index "+m.Name, m.Reason)
	}
	for _, m := range index {
		checkPublic(t, "HTTP index "+m.Name, m.Reason)
		if reasons[m.Name] != m.Reason {
			t.Errorf("index %s: HTTP says %q, gRPC %q", m.Name, m.Reason, reasons[m.Name])
		}
	}
	if !strings.Contains(reasons["broken"], "broken/1/model.onnx") || !strings.Contains(reasons["badconfig"], "badconfig/config.yaml") {
		t.Errorf("index reasons: %q", reasons)
	}
	// HTTP's own errors.
	for _, c := range []struct{ method, path string }{{"GET", "/nope"}, {"DELETE", "/v1/infer"}} {
		r := call(t, c.method, ep.p.url+c.path, nil)
		checkPublic(t, "HTTP "+c.method+" "+c.path, errorMessage(t, r.body), c.path)
	}
}

// TestReadinessOnEveryProtocol: with a model that failed to load in the
// repository, HTTP's /v2/health/ready, gRPC's ServerReady and the NATS
// health subject all say the server is not ready, HTTP and NATS with the
// same reason, while tinycnn serves.
func TestReadinessOnEveryProtocol(t *testing.T) {
	ep := startEveryProtocol(t, brokenRepo(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := call(t, "GET", ep.p.url+"/v2/health/ready", nil)
	httpMsg := errorMessage(t, r.body)
	if r.code != 503 || !strings.Contains(httpMsg, `model "badconfig" is UNAVAILABLE`) {
		t.Errorf("HTTP /v2/health/ready: %d %q", r.code, httpMsg)
	}
	checkPublic(t, "HTTP ready", httpMsg)
	if res, err := ep.grpc.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || res.Ready {
		t.Errorf("gRPC ServerReady: %v %v, want not ready", res, err)
	}
	reply, err := ep.nats.RequestWithContext(ctx, "xserve.v1.health", nil)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get(natsapi.HeaderError); code != "503" || errorMessage(t, reply.Data) != httpMsg {
		t.Errorf("NATS health: %s %q, want 503 %q", code, reply.Data, httpMsg)
	}
	// tinycnn is ready on its own, on every protocol.
	if res, err := ep.grpc.ModelReady(ctx, &pb.ModelReadyRequest{Name: "tinycnn"}); err != nil || !res.Ready {
		t.Errorf("gRPC ModelReady(tinycnn): %v %v", res, err)
	}
	if r := call(t, "GET", ep.p.url+"/v2/models/"+url.PathEscape("tinycnn")+"/ready", nil); r.code != 200 {
		t.Errorf("HTTP tinycnn ready: %d", r.code)
	}
}
