// Package deploy holds the Helm chart, the plain Kubernetes manifests and
// the Grafana dashboard; its tests lint and render the chart with Helm's own
// packages (a pinned Go module) and check what comes out.
package deploy

import (
	"flag"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the plain manifests in k8s/ from the chart")

const chartDir = "helm/xserve"

// values reads a values file of the chart ("" for none).
func values(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, file))
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// render is `helm template xserve helm/xserve` with the given values.
func render(t *testing.T, vals map[string]any) (string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(&action.Configuration{})
	install.DryRun = true
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = "xserve"
	install.Namespace = "default"
	install.IncludeCRDs = true
	rel, err := install.Run(ch, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// objects splits a rendered manifest into objects keyed "Kind/name".
func objects(t *testing.T, manifest string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range strings.Split(manifest, "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		meta := o["metadata"].(map[string]any)
		out[o["kind"].(string)+"/"+meta["name"].(string)] = o
	}
	return out
}

// get walks a decoded object by keys and list indexes.
func get(t *testing.T, o any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := o.(map[string]any)
			if !ok {
				t.Fatalf("at %v: %T is not a map", path, o)
			}
			o = m[k]
		case int:
			l, ok := o.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("at %v: no item %d in %v", path, k, o)
			}
			o = l[k]
		}
	}
	return o
}

func strs(o any) []string {
	var out []string
	for _, v := range o.([]any) {
		out = append(out, v.(string))
	}
	return out
}

// container returns the pod spec's (init) container of that name.
func container(t *testing.T, dep map[string]any, list, name string) map[string]any {
	t.Helper()
	cs, _ := get(t, dep, "spec", "template", "spec", list).([]any)
	for _, c := range cs {
		if c.(map[string]any)["name"] == name {
			return c.(map[string]any)
		}
	}
	t.Fatalf("no %s %q in the Deployment", list, name)
	return nil
}

func TestLint(t *testing.T) {
	for _, file := range []string{"", "values-tpu.yaml", "values-cuda.yaml"} {
		lint := action.NewLint()
		lint.Strict = true
		res := lint.Run([]string{chartDir}, values(t, file))
		for _, m := range res.Messages {
			t.Logf("helm lint %s: %s", file, m)
		}
		if len(res.Errors) > 0 {
			t.Errorf("helm lint --strict with %q: %v", file, res.Errors)
		}
	}
}

func TestTemplateDefault(t *testing.T) {
	manifest, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, manifest)
	for _, want := range []string{"Deployment/xserve", "Service/xserve", "HorizontalPodAutoscaler/xserve", "ConfigMap/xserve-dashboard"} {
		if objs[want] == nil {
			t.Errorf("rendered chart lacks %s (has %v)", want, slices.Sorted(maps.Keys(objs)))
		}
	}
	dep := objs["Deployment/xserve"]
	c := container(t, dep, "containers", "xserve")
	for probe, path := range map[string]string{"startupProbe": "/v2/health/ready", "readinessProbe": "/v2/health/ready", "livenessProbe": "/v2/health/live"} {
		if got := get(t, c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path %v, want %s", probe, got, path)
		}
	}
	args := strs(c["args"])
	if got := strs(c["command"]); !slices.Equal(got, []string{"xserve", "serve"}) {
		t.Errorf("command %v", got)
	}
	for _, want := range []string{"--model-repo=/models", "--compile-cache=/var/cache/xserve/compile", "--nats-listen=0.0.0.0:4222",
		"--strict-readiness=true", "--shutdown-delay=5s", "--shutdown-timeout=30s", "--poll-interval=30s"} {
		if !slices.Contains(args, want) {
			t.Errorf("xserve args %v lack %s", args, want)
		}
	}
	if got := get(t, dep, "spec", "template", "spec", "terminationGracePeriodSeconds"); got != float64(45) {
		t.Errorf("terminationGracePeriodSeconds %v, want 45 (delay 5 + timeout 30 + 10)", got)
	}
	if get(t, c, "resources", "requests", "cpu") == nil || get(t, c, "resources", "limits", "memory") == nil {
		t.Errorf("no resources: %v", c["resources"])
	}
	if get(t, dep, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true {
		t.Errorf("pod not runAsNonRoot")
	}
	// The models come from the init container, the cache is compiled before start.
	if got := strs(container(t, dep, "initContainers", "compile")["args"]); !slices.Equal(got, []string{"compile", "--model-repo=/models", "--compile-cache=/var/cache/xserve/compile"}) {
		t.Errorf("compile init container args %v", got)
	}
	container(t, dep, "initContainers", "fetch-models")
	if get(t, objs["HorizontalPodAutoscaler/xserve"], "spec", "scaleTargetRef", "name") != "xserve" {
		t.Errorf("HPA does not target the Deployment")
	}
	dash, err := os.ReadFile("grafana/xserve.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, objs["ConfigMap/xserve-dashboard"], "data", "xserve.json"); got != strings.TrimRight(string(dash), "\n") {
		t.Errorf("the chart's dashboard differs from grafana/xserve.json: copy it to %s/dashboards/", chartDir)
	}
}

func TestTemplateTPUAndNATS(t *testing.T) {
	vals := values(t, "values-tpu.yaml")
	vals["nats"] = map[string]any{"url": "nats://nats.nats.svc:4222", "durable": true, "tokenSecret": "nats-token"}
	vals["autoscaling"].(map[string]any)["requestsPerSecond"] = map[string]any{"enabled": true, "metricName": "xserve_requests_per_second", "averageValue": "20"}
	manifest, err := render(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, manifest)
	dep := objs["Deployment/xserve"]
	if got := get(t, dep, "spec", "template", "spec", "nodeSelector", "cloud.google.com/gke-tpu-accelerator"); got != "tpu-v5-lite-podslice" {
		t.Errorf("TPU nodeSelector: %v", got)
	}
	if got := get(t, dep, "spec", "template", "spec", "tolerations", 0, "key"); got != "google.com/tpu" {
		t.Errorf("TPU toleration: %v", got)
	}
	c := container(t, dep, "containers", "xserve")
	if got := get(t, c, "resources", "limits", "google.com/tpu"); got != float64(1) {
		t.Errorf("TPU limit %v", got)
	}
	args := strs(c["args"])
	for _, want := range []string{"--nats-url=nats://nats.nats.svc:4222", "--nats-durable", "--narrow-int64"} {
		if !slices.Contains(args, want) {
			t.Errorf("xserve args %v lack %s", args, want)
		}
	}
	if !slices.Contains(strs(container(t, dep, "initContainers", "compile")["args"]), "--narrow-int64") {
		t.Errorf("the compile init container must lower as the server does (--narrow-int64)")
	}
	if slices.Contains(args, "--nats-listen=0.0.0.0:4222") || strings.Contains(manifest, "containerPort: 4222") {
		t.Errorf("with nats.url the pod still exposes the embedded NATS port")
	}
	if get(t, c, "env", 0, "name") != "XSERVE_NATS_TOKEN" {
		t.Errorf("no XSERVE_NATS_TOKEN from the secret: %v", c["env"])
	}
	if get(t, objs["HorizontalPodAutoscaler/xserve"], "spec", "metrics", 1, "pods", "metric", "name") != "xserve_requests_per_second" {
		t.Errorf("HPA lacks the request-rate metric")
	}
}

func TestTemplateRejectsBadModelSource(t *testing.T) {
	for name, models := range map[string]map[string]any{
		"none": {"initContainer": map[string]any{"enabled": false}},
		"two":  {"existingClaim": "models", "hostPath": "/srv/models"},
	} {
		_, err := render(t, map[string]any{"models": models})
		if err == nil || !strings.Contains(err.Error(), "set exactly one of existingClaim, hostPath or initContainer.enabled") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestPlainManifests: k8s/*.yaml are the chart rendered with fixed values
// (go test ./deploy -run PlainManifests -update rewrites them).
func TestPlainManifests(t *testing.T) {
	for file, vals := range map[string]string{"k8s/xserve.yaml": "", "k8s/xserve-tpu.yaml": "values-tpu.yaml"} {
		v := values(t, vals)
		v["grafanaDashboard"] = map[string]any{"enabled": false} // it is in grafana/
		manifest, err := render(t, v)
		if err != nil {
			t.Fatal(err)
		}
		manifest = "# Rendered from deploy/helm/xserve (values " + orDefault(vals) + ", grafanaDashboard.enabled=false)\n" +
			"# by `go test -run PlainManifests -update` in deploy/. Edit the chart, not this file.\n" +
			"# The Grafana dashboard is deploy/grafana/xserve.json.\n" + manifest
		if *update {
			if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != manifest {
			t.Errorf("%s is not the chart's rendering: run go test -run PlainManifests -update in deploy/", file)
		}
	}
}

func orDefault(s string) string {
	if s == "" {
		return "values.yaml"
	}
	return s
}

// exportedSource returns the Go sources that name xserve's metrics.
func exportedSource(t *testing.T) string {
	t.Helper()
	return goSources(t, "../serving", "../api/http", "../api/nats", "../clustercache")
}

// goSources returns the Go sources of dirs, tests aside.
func goSources(t *testing.T, dirs ...string) string {
	t.Helper()
	var src strings.Builder
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	return src.String()
}

// checkExported fails for each xserve_ metric named in text that xserve
// does not export (its name is not in the Go sources); skip names
// metrics that adapters make, not xserve.
func checkExported(t *testing.T, what, text string, skip ...string) []string {
	t.Helper()
	src := exportedSource(t)
	names := regexp.MustCompile(`xserve_[a-z_]+`).FindAllString(text, -1)
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if slices.Contains(skip, base) {
			continue
		}
		if !regexp.MustCompile(`"` + regexp.QuoteMeta(base) + `"`).MatchString(src) {
			t.Errorf("%s names %s, which xserve does not export", what, n)
		}
	}
	return names
}

// TestDashboardMetrics: every metric the dashboard queries is one xserve
// exports (its name appears in the Go sources).
func TestDashboardMetrics(t *testing.T) {
	dash, err := os.ReadFile("grafana/xserve.json")
	if err != nil {
		t.Fatal(err)
	}
	if names := checkExported(t, "the dashboard", string(dash), "xserve_requests_per_second"); len(names) < 10 {
		t.Fatalf("dashboard queries only %v", names)
	}
}

// autoscalingValues turns on the queue metrics of the chart's HPA.
func autoscalingValues(t *testing.T) map[string]any {
	t.Helper()
	vals := values(t, "values.yaml")
	a := vals["autoscaling"].(map[string]any)
	a["queueDepth"].(map[string]any)["enabled"] = true
	a["queueTime"].(map[string]any)["enabled"] = true
	return vals
}

// kedaValues turns KEDA on, on a NATS cluster with durable requests.
func kedaValues(t *testing.T) map[string]any {
	t.Helper()
	vals := values(t, "values.yaml")
	vals["nats"] = map[string]any{"url": "nats://nats.nats.svc:4222", "durable": true}
	k := vals["keda"].(map[string]any)
	k["enabled"] = true
	k["prometheus"].(map[string]any)["enabled"] = true
	return vals
}

// TestTemplateQueueAutoscaling: with autoscaling.queueDepth and queueTime,
// the HPA scales on CPU and on the per-pod queue metrics that
// deploy/prometheus-adapter's rules serve, from what xserve exports.
func TestTemplateQueueAutoscaling(t *testing.T) {
	manifest, err := render(t, autoscalingValues(t))
	if err != nil {
		t.Fatal(err)
	}
	hpa := objects(t, manifest)["HorizontalPodAutoscaler/xserve"]
	if hpa == nil {
		t.Fatal("no HPA")
	}
	want := map[string]string{"xserve_queue_depth": "8", "xserve_queue_seconds": "50m"}
	metrics := get(t, hpa, "spec", "metrics").([]any)
	if len(metrics) != 3 || get(t, metrics[0], "resource", "name") != "cpu" {
		t.Fatalf("HPA metrics %v, want cpu and the two queue metrics", metrics)
	}
	for _, m := range metrics[1:] {
		name := get(t, m, "pods", "metric", "name").(string)
		if get(t, m, "type") != "Pods" || get(t, m, "pods", "target", "type") != "AverageValue" || get(t, m, "pods", "target", "averageValue") != want[name] {
			t.Errorf("HPA metric %v, want a per-pod average of %s %s", m, name, want[name])
		}
		delete(want, name)
	}
	if len(want) > 0 {
		t.Errorf("HPA lacks %v", want)
	}

	// Every per-pod metric the chart can ask for is a rule of the
	// adapter's values, and the rules read series xserve exports.
	raw, err := os.ReadFile("prometheus-adapter/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var adapter struct {
		Rules struct {
			Custom []struct {
				SeriesQuery  string              `json:"seriesQuery"`
				MetricsQuery string              `json:"metricsQuery"`
				Name         struct{ As string } `json:"name"`
			} `json:"custom"`
		} `json:"rules"`
	}
	if err := yaml.Unmarshal(raw, &adapter); err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, r := range adapter.Rules.Custom {
		served[r.Name.As] = true
		checkExported(t, "prometheus-adapter rule "+r.Name.As, r.SeriesQuery+" "+r.MetricsQuery)
	}
	a := values(t, "values.yaml")["autoscaling"].(map[string]any)
	for _, k := range []string{"requestsPerSecond", "queueDepth", "queueTime"} {
		if name := a[k].(map[string]any)["metricName"].(string); !served[name] {
			t.Errorf("autoscaling.%s.metricName %s has no rule in prometheus-adapter/values.yaml (rules: %v)", k, name, served)
		}
	}

	// No metric at all is refused.
	vals := values(t, "values.yaml")
	vals["autoscaling"].(map[string]any)["targetCPUUtilizationPercentage"] = 0
	if _, err := render(t, vals); err == nil || !strings.Contains(err.Error(), "enable at least one metric") {
		t.Errorf("HPA without a metric: %v", err)
	}
}

// TestTemplateKEDA: with keda.enabled the chart renders a KEDA ScaledObject
// on the Deployment (and no HPA of its own): the nats-jetstream trigger on
// xserve's stream and durable consumer, scaling from zero as soon as one
// durable request waits, and the queue depth through Prometheus.
func TestTemplateKEDA(t *testing.T) {
	vals := kedaValues(t)
	lint := action.NewLint()
	lint.Strict = true
	if res := lint.Run([]string{chartDir}, vals); len(res.Errors) > 0 {
		t.Errorf("helm lint --strict with KEDA: %v", res.Errors)
	}
	manifest, err := render(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, manifest)
	so := objs["ScaledObject/xserve"]
	if so == nil {
		t.Fatalf("no ScaledObject (rendered %v)", slices.Sorted(maps.Keys(objs)))
	}
	if objs["HorizontalPodAutoscaler/xserve"] != nil {
		t.Error("the chart's HPA is rendered beside KEDA's")
	}
	if get(t, so, "apiVersion") != "keda.sh/v1alpha1" || get(t, so, "spec", "scaleTargetRef", "name") != "xserve" {
		t.Errorf("ScaledObject does not target the Deployment: %v", so["spec"])
	}
	if get(t, so, "spec", "minReplicaCount") != float64(0) {
		t.Errorf("minReplicaCount %v, want 0 (scale to zero)", get(t, so, "spec", "minReplicaCount"))
	}
	if get(t, objs["Deployment/xserve"], "spec", "replicas") != nil {
		t.Error("the Deployment fixes replicas while KEDA scales it")
	}
	// The stream and consumer are the ones the replicas create.
	opts, err := os.ReadFile("../api/nats/options.go")
	if err != nil {
		t.Fatal(err)
	}
	js := get(t, so, "spec", "triggers", 0).(map[string]any)
	if js["type"] != "nats-jetstream" {
		t.Fatalf("first trigger %v, want nats-jetstream", js)
	}
	for key, def := range map[string]string{"stream": "DefaultStream", "consumer": "DefaultConsumer"} {
		v := get(t, js, "metadata", key).(string)
		if !regexp.MustCompile(def + `\s*=\s*"` + regexp.QuoteMeta(v) + `"`).Match(opts) {
			t.Errorf("trigger %s %q is not natsapi.%s", key, v, def)
		}
	}
	if get(t, js, "metadata", "activationLagThreshold") != "0" || get(t, js, "metadata", "natsServerMonitoringEndpoint") == "" {
		t.Errorf("jetstream trigger metadata %v", js["metadata"])
	}
	prom := get(t, so, "spec", "triggers", 1).(map[string]any)
	query := get(t, prom, "metadata", "query").(string)
	if prom["type"] != "prometheus" || !strings.Contains(query, `namespace="default"`) || !strings.Contains(query, `pod=~"xserve-.*"`) {
		t.Errorf("prometheus trigger %v", prom)
	}
	checkExported(t, "the KEDA prometheus trigger", query)

	// KEDA on the lag needs the durable requests of a NATS cluster.
	vals["nats"] = map[string]any{"url": "", "durable": false}
	if _, err := render(t, vals); err == nil || !strings.Contains(err.Error(), "set nats.url and nats.durable") {
		t.Errorf("KEDA without durable NATS: %v", err)
	}
}

// TestTemplateClusterAndLazy: nats.streamReplicas, nats.clusterCache and
// models.loadPolicy become the flags `xserve serve` has for them; a cluster
// cache without a NATS cluster and an unknown load policy are refused.
func TestTemplateClusterAndLazy(t *testing.T) {
	vals := kedaValues(t)
	n := vals["nats"].(map[string]any)
	n["streamReplicas"] = 3
	n["clusterCache"] = map[string]any{"enabled": true, "bucket": "shared_cache", "replicas": 3}
	m := vals["models"].(map[string]any)
	m["loadPolicy"], m["memoryBudget"] = "lazy", "8GiB"
	manifest, err := render(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	args := strs(container(t, objects(t, manifest)["Deployment/xserve"], "containers", "xserve")["args"])
	for _, want := range []string{"--nats-durable", "--nats-stream-replicas=3", "--cluster-cache", "--cluster-cache-bucket=shared_cache",
		"--cluster-cache-replicas=3", "--model-load-policy=lazy", "--model-memory-budget=8GiB"} {
		if !slices.Contains(args, want) {
			t.Errorf("xserve args %v lack %s", args, want)
		}
	}
	// Every flag the chart passes is one `xserve serve` defines.
	src := goSources(t, "../cmd/xserve")
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.Contains(src, `"`+name+`"`) {
			t.Errorf("the chart passes %s, which xserve does not define", a)
		}
	}

	n["url"] = ""
	vals["keda"].(map[string]any)["enabled"] = false
	if _, err := render(t, vals); err == nil || !strings.Contains(err.Error(), "nats.clusterCache needs nats.url") {
		t.Errorf("cluster cache without a NATS cluster: %v", err)
	}
	vals = values(t, "values.yaml")
	vals["models"].(map[string]any)["loadPolicy"] = "sometimes"
	if _, err := render(t, vals); err == nil || !strings.Contains(err.Error(), `models.loadPolicy "sometimes"`) {
		t.Errorf("unknown load policy: %v", err)
	}
}
