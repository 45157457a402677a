package conformance

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// RequiredOps are the operators every one of whose node cases must pass.
var RequiredOps = []string{
	"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp",
	"Log", "Erf", "Tanh", "Sigmoid", "Relu", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Softmax", "LogSoftmax",
	"BatchNormalization", "LayerNormalization", "MaxPool", "AveragePool", "GlobalAveragePool", "Reshape",
	"Flatten", "Transpose", "Concat", "Split", "Slice", "Gather", "Squeeze", "Unsqueeze", "Expand", "Shape",
	"ConstantOfShape", "Constant", "Cast", "Where", "Equal", "Less", "Greater", "Not", "ReduceMean", "ReduceSum",
	"ReduceMax", "Pad", "Resize", "Identity", "Dropout", "Gelu",
}

// PrimaryOp names the operator a node case tests: the longest operator name
// (among allOps, lower-cased) that prefixes the case name after "test_".
// "test_batchnorm_epsilon" -> BatchNormalization is found through the ops of
// the case itself when no name matches.
func PrimaryOp(r Result, allOps map[string]string) string {
	name := strings.TrimPrefix(r.Name, "test_")
	best := ""
	for low, op := range allOps {
		if (name == low || strings.HasPrefix(name, low+"_")) && len(low) > len(strings.ToLower(best)) {
			best = op
		}
	}
	if best == "" && len(r.Ops) == 1 {
		best = r.Ops[0]
	}
	return best
}

// Summary counts results by status.
func Summary(results []Result) (passed, failed, skipped int) {
	for _, r := range results {
		switch r.Status {
		case Passed:
			passed++
		case Failed:
			failed++
		case Skipped:
			skipped++
		}
	}
	return
}

// SummaryLine is the closing line of a run.
func SummaryLine(results []Result) string {
	p, f, s := Summary(results)
	return fmt.Sprintf("conformance: %d passed, %d failed, %d skipped", p, f, s)
}

// RequiredReport returns, per required operator, its node cases' outcomes.
func RequiredReport(results []Result) map[string][]Result {
	allOps := map[string]string{}
	for _, r := range results {
		for _, op := range r.Ops {
			allOps[strings.ToLower(op)] = op
		}
	}
	for _, op := range RequiredOps {
		allOps[strings.ToLower(op)] = op
	}
	// Names that do not follow the op's spelling.
	alias := map[string]string{"batchnorm": "BatchNormalization", "layer_normalization": "LayerNormalization"}
	for k, v := range alias {
		allOps[k] = v
	}
	req := map[string]bool{}
	for _, op := range RequiredOps {
		req[op] = true
	}
	out := map[string][]Result{}
	for _, r := range results {
		if r.Suite != "node" {
			continue
		}
		if op := PrimaryOp(r, allOps); req[op] {
			out[op] = append(out[op], r)
		}
	}
	return out
}

func cell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

// Uncovered returns the targets (of all) that no passing case lowered.
func Uncovered(all []string, results []Result) []string {
	used := map[string]bool{}
	for _, r := range results {
		if r.Status == Passed {
			for _, t := range r.Targets {
				used[t] = true
			}
		}
	}
	var out []string
	for _, t := range all {
		if !used[t] {
			out = append(out, t)
		}
	}
	return out
}

// WriteMarkdown writes the per-case table that docs/onnx-conformance.md
// holds. rules are the lowering rules' targets, to list those no passing
// case exercised.
func WriteMarkdown(w io.Writer, results []Result, header string, rules []string) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# ONNX backend conformance\n\n%s\n\n`%s`\n\n", header, SummaryLine(results))
	fmt.Fprintf(bw, "## Required operators\n\nEvery node case whose name starts with the operator must pass.\n\n")
	fmt.Fprintf(bw, "| operator | cases | passed | failed | skipped |\n|---|---|---|---|---|\n")
	rep := RequiredReport(results)
	for _, op := range RequiredOps {
		p, f, s := Summary(rep[op])
		fmt.Fprintf(bw, "| %s | %d | %d | %d | %d |\n", op, len(rep[op]), p, f, s)
	}
	unc := Uncovered(rules, results)
	fmt.Fprintf(bw, "\n## Lowering rules not exercised by a passing case\n\n%d of %d rules are exercised by passing cases; these are covered only by their unit tests in lower/*_test.go (most serve torch.export graphs):\n\n", len(rules)-len(unc), len(rules))
	for _, t := range unc {
		fmt.Fprintf(bw, "`%s` ", t)
	}
	fmt.Fprintf(bw, "\n\n## Cases\n\n| case | status | operators | detail |\n|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(bw, "| %s | %s | %s | %s |\n", r.ID(), r.Status, cell(strings.Join(r.Ops, " ")), cell(r.Detail))
	}
	return bw.Flush()
}

// ReadStatuses parses the case table of a markdown file written by
// WriteMarkdown into case ID -> status.
func ReadStatuses(path string) (map[string]Status, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]Status{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		cols := strings.Split(line, "|")
		if len(cols) < 4 {
			continue
		}
		id, st := strings.TrimSpace(cols[1]), Status(strings.TrimSpace(cols[2]))
		if strings.Contains(id, "/test_") && (st == Passed || st == Failed || st == Skipped) {
			out[id] = st
		}
	}
	return out, sc.Err()
}

// Regressions lists the cases that passed in before but not in results.
func Regressions(before map[string]Status, results []Result) []string {
	var out []string
	for _, r := range results {
		if before[r.ID()] == Passed && r.Status != Passed {
			out = append(out, fmt.Sprintf("%s: %s: %s", r.ID(), r.Status, r.Detail))
		}
	}
	sort.Strings(out)
	return out
}
