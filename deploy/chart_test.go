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

// TestDashboardMetrics: every metric the dashboard queries is one xserve
// exports (its name appears in the Go sources).
func TestDashboardMetrics(t *testing.T) {
	dash, err := os.ReadFile("grafana/xserve.json")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, dir := range []string{"../serving", "../api/http", "../api/nats"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	names := regexp.MustCompile(`xserve_[a-z_]+`).FindAllString(string(dash), -1)
	if len(names) < 10 {
		t.Fatalf("dashboard queries only %v", names)
	}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if base == "xserve_requests_per_second" {
			continue
		}
		if !regexp.MustCompile(regexp.QuoteMeta(base) + `\b`).MatchString(src.String()) {
			t.Errorf("the dashboard queries %s, which xserve does not export", n)
		}
	}
}
