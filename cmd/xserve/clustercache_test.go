package main

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsapi "github.com/xserve/xserve/api/nats"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// zooFixtures are the zoo models of the cluster tests: real torchvision
// and transformer architectures at reduced size (testdata/zoo), exported by
// torch.onnx, with their buckets compiled at load.
var zooFixtures = []struct{ name, config string }{
	{"resnet18", "buckets:\n  batch: [1, 4]\nwarmup: eager\n"},
	{"mobilenet_v2", "buckets:\n  batch: [1, 4]\nwarmup: eager\n"},
	{"bert", "buckets:\n  batch: [1, 4]\n  sequence: [16]\nwarmup: eager\n"},
}

// zooRepo makes a repository of the zooFixtures' ONNX files.
func zooRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, m := range zooFixtures {
		model, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata", "zoo", m.name, "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, m.name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, m.name, "1", "model.onnx"), model, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, m.name, "config.yaml"), []byte(m.config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// metricSum is the sum of the samples of a metric family (name{...} or
// name) whose labels contain every one of labels, in a /metrics body.
func metricSum(body, name string, labels ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		sp := strings.LastIndexByte(rest, ' ')
		match := sp >= 0
		for _, l := range labels {
			match = match && strings.Contains(rest[:sp], l)
		}
		if match {
			v, _ := strconv.ParseFloat(rest[sp+1:], 64)
			sum += v
		}
	}
	return sum
}

// zooInput reads a zoo fixture's batch-1 inputs and PyTorch's outputs.
func zooCase(t *testing.T, model string, inputs, outputs []string) ([]serving.NamedTensor, []*tensor.Tensor) {
	t.Helper()
	var in []serving.NamedTensor
	for _, name := range inputs {
		x, err := tensor.ReadNpyFile(filepath.Join(repoRoot(t), "testdata", "zoo", model, "b1.in."+name+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, serving.NamedTensor{Name: name, Tensor: x})
	}
	var out []*tensor.Tensor
	for _, name := range outputs {
		x, err := tensor.ReadNpyFile(filepath.Join(repoRoot(t), "testdata", "zoo", model, "b1.out."+name+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, x)
	}
	return in, out
}

// checkZooAnswers sends each zoo model's batch-1 input over NATS and
// compares the answer with PyTorch eager's.
func checkZooAnswers(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The replica is ready (startXserve), so its NATS endpoints are live.
	c, err := natsapi.NewClient(nc, natsapi.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		model           string
		inputs, outputs []string
	}{
		{"resnet18", []string{"image"}, []string{"logits"}},
		{"mobilenet_v2", []string{"image"}, []string{"logits"}},
		{"bert", []string{"input_ids", "attention_mask"}, []string{"last_hidden_state", "pooler_output"}},
	} {
		in, want := zooCase(t, tc.model, tc.inputs, tc.outputs)
		res, err := c.Infer(context.Background(), tc.model, in, natsapi.InferOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.model, err)
		}
		for i, w := range want {
			got := res.Outputs[i].Tensor.Float64s()
			for j, v := range w.Float64s() {
				if math.Abs(got[j]-v) > 1e-4*(1+math.Abs(v)) {
					t.Fatalf("%s %s[%d] = %v, PyTorch says %v", tc.model, tc.outputs[i], j, got[j], v)
				}
			}
		}
	}
}

// TestClusterCacheFreshReplica: `xserve compile --publish` fills the
// cluster compile cache (a JetStream object store on a real nats-server)
// with the zoo models' buckets; a fresh replica (empty local cache) with
// --cluster-cache then serves them without compiling anything, answering
// as PyTorch does. It logs the replica's time to ready.
func TestClusterCacheFreshReplica(t *testing.T) {
	ns := startNATSServer(t)
	url := ns.ClientURL()
	repo := zooRepo(t)
	// The binary the replicas run: lowered StableHLO is keyed by the
	// server's build too.
	cmd := exec.Command(xserveBinary(t), "compile", "--model-repo", repo, "--compile-cache", t.TempDir(), "--publish", "--nats-url", url)
	cmd.Dir = repoRoot(t)
	raw, err := cmd.CombinedOutput()
	out := string(raw)
	if err != nil {
		t.Fatalf("compile --publish: %v\n%s", err, out)
	}
	// 7 buckets (bert's probe compiles sequence 15 exactly too): a
	// StableHLO and an executable entry each.
	if want := "14 entries published, 0 were there already, 0 failed, 0 dropped"; !strings.Contains(out, want) {
		t.Errorf("compile --publish: no %q in\n%s", want, out)
	}

	p := startXserve(t, repo, t.TempDir(), "--nats-url", url, "--cluster-cache")
	t.Logf("fresh replica ready in %v (process start to /v2/health/ready 200), %d models, 7 buckets", p.ready.Round(time.Millisecond), len(zooFixtures))
	metrics := string(call(t, "GET", p.url+"/metrics", nil).body)
	if n := metricSum(metrics, "xserve_compilations_total"); n != 0 {
		t.Errorf("the fresh replica compiled %v executables:\n%s", n, grepLines(metrics, "xserve_compilations_total"))
	}
	if n := metricSum(metrics, "xserve_cluster_cache_lookups_total", `result="hit"`); n != 14 {
		t.Errorf("cluster cache hits %v, want 14:\n%s", n, grepLines(metrics, "xserve_cluster_cache"))
	}
	// Nothing is lowered again: bert's entries carry the weight constant
	// folding made while lowering (embedding_1_folded), not in the model.
	if n := metricSum(metrics, "xserve_compile_cache_total", `kind="stablehlo"`, `result="miss"`); n != 0 {
		t.Errorf("StableHLO cache misses %v, want 0:\n%s", n, grepLines(metrics, "xserve_compile_cache"))
	}
	if n := metricSum(metrics, "xserve_compile_cache_total", `kind="executable"`, `result="miss"`); n != 0 {
		t.Errorf("executable cache misses %v, want 0:\n%s", n, grepLines(metrics, "xserve_compile_cache"))
	}
	checkZooAnswers(t, url)
	p.stop(t)
}

// TestClusterCachePublishes: a replica that compiles publishes each
// entry within seconds; the next fresh replica on that bucket compiles
// nothing; a replica on the embedded NATS server publishes to its own
// object store too.
func TestClusterCachePublishes(t *testing.T) {
	ns := startNATSServer(t)
	url := ns.ClientURL()
	repo := eagerRepo(t) // tinycnn, 4 buckets compiled at load
	flags := []string{"--nats-url", url, "--cluster-cache", "--cluster-cache-bucket", "publishes"}
	first := startXserve(t, repo, t.TempDir(), flags...)
	var metrics string
	deadline := time.Now().Add(time.Minute)
	for {
		metrics = string(call(t, "GET", first.url+"/metrics", nil).body)
		if metricSum(metrics, "xserve_cluster_cache_publications_total", `result="published"`) == 8 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := metricSum(metrics, "xserve_compilations_total"); n != 4 {
		t.Errorf("first replica compiled %v buckets, want 4", n)
	}
	count, sum := metricSum(metrics, "xserve_cluster_cache_publish_seconds_count"), metricSum(metrics, "xserve_cluster_cache_publish_seconds_sum")
	if count != 8 {
		t.Fatalf("published %v entries, want 8:\n%s", count, grepLines(metrics, "xserve_cluster_cache"))
	}
	t.Logf("8 entries published %.1f ms after they were stored locally (mean)", 1000*sum/count)
	if le5 := metricSum(metrics, "xserve_cluster_cache_publish_seconds_bucket", `le="5"`); le5 != 8 {
		t.Errorf("%v of 8 entries published within 5 s", le5)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	obs, err := js.ObjectStore(context.Background(), "publishes")
	if err != nil {
		t.Fatal(err)
	}
	if infos, err := obs.List(context.Background()); err != nil || len(infos) != 8 {
		t.Errorf("bucket holds %d objects (%v), want 8", len(infos), err)
	}

	fresh := startXserve(t, repo, t.TempDir(), flags...)
	metrics = string(call(t, "GET", fresh.url+"/metrics", nil).body)
	if n := metricSum(metrics, "xserve_compilations_total"); n != 0 {
		t.Errorf("fresh replica compiled %v buckets, want 0", n)
	}
	s := loadSample(t)
	img, want := s.batch(3)
	checkV1(t, call(t, "POST", fresh.url+"/v1/infer", v1Request("tinycnn", img, "float32", false)), want)
	first.stop(t)
	fresh.stop(t)

	// The embedded NATS server has JetStream: --cluster-cache works there
	// too (one replica's object store; others join with --nats-url).
	embedded := startXserve(t, repo, t.TempDir(), "--nats-listen", "127.0.0.1:0", "--cluster-cache")
	deadline = time.Now().Add(time.Minute)
	for metricSum(metrics, "xserve_cluster_cache_publications_total", `result="published"`) != 8 && time.Now().Before(deadline) {
		metrics = string(call(t, "GET", embedded.url+"/metrics", nil).body)
		time.Sleep(20 * time.Millisecond)
	}
	if n := metricSum(metrics, "xserve_cluster_cache_publications_total", `result="published"`); n != 8 {
		t.Errorf("replica on the embedded server published %v entries, want 8:\n%s", n, grepLines(metrics, "xserve_cluster_cache"))
	}
	embedded.stop(t)

	// Bad flags get clear errors before anything loads.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--model-repo", repo, "--nats=false", "--cluster-cache"}, "--cluster-cache needs NATS"},
		{[]string{"compile", "--model-repo", repo, "--publish"}, "--publish needs --nats-url"},
		{[]string{"serve", "--model-repo", repo, "--devices", "0,0"}, "device 0 listed twice"},
		{[]string{"serve", "--model-repo", repo, "--model-load-policy", "sometimes"}, `model load policy "sometimes": want eager or lazy`},
		{[]string{"serve", "--model-repo", repo, "--model-load-policy", "lazy", "--model-memory-budget", "gpu=1GiB"}, "want DEVICE=SIZE"},
	} {
		if _, _, err := xserve(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("xserve %v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, _, err := xserve(t, "serve", "--model-repo", repo, "--nats-url", url, "--cluster-cache", "--cluster-cache-bucket", "no.dots", "--http-addr", "127.0.0.1:0", "--grpc-addr", ""); err == nil || !regexp.MustCompile(`Options.Bucket is "no.dots"`).MatchString(err.Error()) {
		t.Errorf("bad bucket name: %v", err)
	}
}
