// Package onnxtestdata finds the ONNX backend test data: the node, simple,
// pytorch-converted and pytorch-operator cases that ship inside the onnx
// Python wheel (onnx/backend/test/data), so that the conformance suite
// moves with the onnx release python/requirements.txt pins.
package onnxtestdata

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

// EnvDir, when set, names the test data directory, overriding the search.
const EnvDir = "XSERVE_ONNX_TESTDATA"

// rel is the data directory inside a site-packages directory.
var rel = filepath.Join("onnx", "backend", "test", "data")

// Dir returns the ONNX backend test data directory: $XSERVE_ONNX_TESTDATA
// when set, else the onnx wheel's data in the site-packages of the .venv
// in the current directory or the nearest parent that has one (`make venv`
// installs it there). The error says where it looked and how to install it.
func Dir() (string, error) {
	if v := os.Getenv(EnvDir); v != "" {
		if _, err := os.Stat(filepath.Join(v, "node")); err != nil {
			return "", fmt.Errorf("onnxtestdata: $%s=%s has no node/ cases: %w", EnvDir, v, err)
		}
		return v, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("onnxtestdata: %w", err)
	}
	var looked []string
	for dir := wd; ; dir = filepath.Dir(dir) {
		pattern := filepath.Join(dir, ".venv", "lib", "python3*", "site-packages", rel)
		looked = append(looked, pattern)
		if m, _ := filepath.Glob(filepath.Join(pattern, "node")); len(m) > 0 {
			sort.Strings(m)
			return filepath.Dir(m[len(m)-1]), nil
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return "", fmt.Errorf("onnxtestdata: no onnx wheel test data in %v: run `make venv` (python/requirements.txt pins onnx) or set $%s", looked, EnvDir)
}

// Case returns the directory of one case, such as "node/test_nonzero_example",
// under Dir.
func Case(name string) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

var versionRE = regexp.MustCompile(`(?m)^version\s*=\s*"([^"]+)"`)

// Version returns the onnx release whose wheel holds the data directory dir
// (read from onnx/version.py three levels up), or an error when dir is not
// inside an onnx package.
func Version(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "..", "..", "..", "version.py"))
	if err != nil {
		return "", fmt.Errorf("onnxtestdata: %w", err)
	}
	m := versionRE.FindSubmatch(b)
	if m == nil {
		return "", errors.New("onnxtestdata: no version in onnx/version.py")
	}
	return string(m[1]), nil
}
