// Command atenops reads operator targets as torch.export writes them
// ("aten.relu_.default"), one a line, and prints those the fx importer does
// not support, one a line. python/survey_check.py uses it to list every
// unsupported operator of a surveyed model, not only the first.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/xserve/xserve/importer/fx"
)

func main() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		t := strings.TrimSpace(sc.Text())
		if t != "" && !fx.Supports(t) {
			fmt.Println(t)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "atenops:", err)
		os.Exit(1)
	}
}
