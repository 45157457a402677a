package zoo

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteTable writes results as a markdown table: model, format, import ms,
// lower+compile ms and run ms per bucket (b<batch size>), max abs error (and
// the tolerance it was held to), status; then a line counting the passes.
func WriteTable(w io.Writer, results []Result) error {
	var b strings.Builder
	b.WriteString("| model | format | import ms | lower+compile ms per bucket | run ms per bucket | max abs error (tolerance) | status |\n")
	b.WriteString("|---|---|--:|---|---|---|---|\n")
	passed := 0
	for _, r := range results {
		if r.Passed {
			passed++
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", cell(r.Model), r.Format, importCell(r),
			bucketsCell(r.Buckets, Bucket.LowerCompile), bucketsCell(r.Buckets, func(b Bucket) time.Duration { return b.Run }),
			errorCell(r), cell(statusCell(r)))
	}
	fmt.Fprintf(&b, "\n%d of %d model/format pairs passed.\n", passed, len(results))
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteFailures writes every failed result with its stage and full error,
// as markdown; nothing when all passed.
func WriteFailures(w io.Writer, results []Result) error {
	failed := Failed(results)
	if len(failed) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\n## Failures\n")
	for _, r := range failed {
		fmt.Fprintf(&b, "\n### %s (%s)\n\n```text\n%s\n```\n", r.Name(), r.Stage, strings.TrimRight(errText(r), "\n"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func errText(r Result) string {
	if r.Err == nil {
		return "(no error recorded)"
	}
	return r.Err.Error()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }

func importCell(r Result) string {
	if r.Import == 0 && r.Stage == StageExport {
		return "–"
	}
	return ms(r.Import)
}

func bucketsCell(bs []Bucket, d func(Bucket) time.Duration) string {
	var parts []string
	for _, b := range bs {
		if v := d(b); v > 0 {
			parts = append(parts, fmt.Sprintf("b%d: %s", b.Batch, ms(v)))
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, ", ")
}

func errorCell(r Result) string {
	compared := false
	for _, b := range r.Buckets {
		if b.Passed || (r.Stage == StageCompare) {
			compared = true
		}
	}
	if !compared {
		return "–"
	}
	return fmt.Sprintf("%.2g (%.2g)", r.MaxError, r.Tolerance)
}

func statusCell(r Result) string {
	if r.Passed {
		return "pass"
	}
	msg := errText(r)
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	const max = 160
	if r := []rune(msg); len(r) > max {
		msg = string(r[:max]) + "…"
	}
	return fmt.Sprintf("FAIL (%s): %s", r.Stage, msg)
}

// cell escapes text for a markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
