package zoo

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/pjrt"
)

// fixtureDir holds the committed small variants (make zoo-fixtures).
const fixtureDir = "../../testdata/zoo"

// zooModels are the models python/zoo/export.py exports; every one must
// have a committed fixture.
var zooModels = []string{
	"alexnet", "bert", "mnasnet1_0", "mobilenet_v2", "resnet18", "resnet50",
	"resnext50_32x4d", "squeezenet1_1", "vgg16", "vit_b_16",
}

// maxFixtureBytes bounds testdata/zoo (make zoo-fixtures prints its size).
const maxFixtureBytes = 40 << 20

func openClient(t *testing.T) *pjrt.Client {
	t.Helper()
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: "../.."})
	if err != nil {
		t.Fatalf("no PJRT plugin (run make pjrt): %v", err)
	}
	return openPlugin(t, path)
}

// openCompatClient opens the oldest CPU plugin we test on
// (pjrt.CompatCPUPlugin).
func openCompatClient(t *testing.T) *pjrt.Client {
	t.Helper()
	path, err := pjrt.CompatCPUPlugin("../..")
	if err != nil {
		t.Fatal(err)
	}
	return openPlugin(t, path)
}

func openPlugin(t *testing.T, path string) *pjrt.Client {
	t.Helper()
	c, err := pjrt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestZoo runs every committed fixture in both formats on the XLA CPU
// plugin; each must match PyTorch eager for every reference batch size.
func TestZoo(t *testing.T) { checkZoo(t, openClient(t)) }

// TestZooCompat is TestZoo on the oldest CPU plugin we test on (PJRT C
// API 0.81, StableHLO 1.13.3), of the CUDA and TPU plugins' vintage: the
// programs we emit must parse, compile and match there too.
func TestZooCompat(t *testing.T) {
	client := openCompatClient(t)
	if v := client.PluginVersion(); !strings.HasPrefix(v, "0.81 ") || !strings.Contains(v, "stablehlo_current_version=1.13.3") {
		t.Fatalf("the compat plugin reports %q, want PJRT C API 0.81 with StableHLO 1.13.3", v)
	}
	checkZoo(t, client)
}

func checkZoo(t *testing.T, client *pjrt.Client) {
	results, err := Check(context.Background(), fixtureDir, client)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	WriteTable(&table, results)
	t.Logf("testdata/zoo on %s:\n%s", client, table.String())

	byName := map[string]Result{}
	for _, r := range results {
		byName[r.Name()] = r
	}
	for _, model := range zooModels {
		m, err := ReadManifest(filepath.Join(fixtureDir, model))
		if err != nil {
			t.Errorf("%s: %v", model, err)
			continue
		}
		batches := map[int64]bool{}
		for _, c := range m.Cases {
			batches[c.Batch] = true
		}
		if len(batches) < 2 {
			t.Errorf("%s: the fixture has reference cases for batch sizes %v, want two sizes", model, batches)
		}
		for _, format := range Formats {
			t.Run(model+"/"+format, func(t *testing.T) {
				r, ok := byName[model+"/"+format]
				if !ok {
					t.Fatalf("no result for %s/%s", model, format)
				}
				if !r.Passed {
					t.Fatalf("failed at %s: %v", r.Stage, r.Err)
				}
				if len(r.Buckets) != len(m.Cases) {
					t.Fatalf("ran %d buckets, the manifest has %d cases", len(r.Buckets), len(m.Cases))
				}
				for _, b := range r.Buckets {
					if !b.Passed {
						t.Errorf("batch %d did not pass", b.Batch)
					}
				}
				t.Logf("max abs error %.3g (tolerance %.3g), import %s", r.MaxError, r.Tolerance, r.Import)
			})
		}
	}
	for name := range byName {
		if !slices.Contains(zooModels, strings.Split(name, "/")[0]) {
			t.Errorf("testdata/zoo has %s, which is not in zooModels (add it there)", name)
		}
	}
}

// TestFixtureSize keeps the committed fixtures small.
func TestFixtureSize(t *testing.T) {
	var total int64
	err := filepath.WalkDir(fixtureDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("testdata/zoo: %.2f MB", float64(total)/1e6)
	if total > maxFixtureBytes {
		t.Errorf("testdata/zoo is %d bytes, over the %d limit: shrink the --small variants in python/zoo/zoo_models.py", total, maxFixtureBytes)
	}
}
