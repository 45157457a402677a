// Command capigen generates package pjrt's binding of the PJRT C API from
// the header it builds against (pjrt/internal/capi/pjrt_c_api.h), as go-xla
// generates its own:
//
//   - capi_gen.h, capi_gen.c: for each function of the PJRT_Api table, a C
//     function xs_<name>(api, args) that sets args->struct_size and calls the
//     plugin's entry, or returns a sentinel error naming the function when
//     the plugin's table (an older API version) lacks it. cgo cannot call C
//     function pointers; these are what Go and the package's C call.
//   - enums_gen.go: the names of the header's enums (error codes, buffer
//     types, ...) by value, and the header's API version.
//
// Run by go generate in package pjrt:
//
//	go run ./internal/capigen -header internal/capi/pjrt_c_api.h -out .
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// function is one entry of the PJRT_Api table.
type function struct {
	Name string // PJRT_Client_Create
	Void bool   // returns void, not PJRT_Error*
}

// enum is one enum typedef of the header: its name and its values' names
// (without the enum's prefix) by value.
type enum struct {
	Name   string
	Values map[int]string
}

var (
	apiFieldRE  = regexp.MustCompile(`_PJRT_API_STRUCT_FIELD\((PJRT_\w+)\);`)
	typedefRE   = regexp.MustCompile(`(?s)typedef\s+(PJRT_Error\s*\*|void)\s*(PJRT_\w+)\s*\(\s*(PJRT_\w+)\s*\*\s*\w+\s*\)\s*;`)
	traitsRE    = regexp.MustCompile(`PJRT_DEFINE_STRUCT_TRAITS\(\s*(PJRT_\w+)\s*,`)
	enumRE      = regexp.MustCompile(`(?s)typedef\s+enum\s*\{(.*?)\}\s*(PJRT_\w+)\s*;`)
	commentRE   = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	versionRE   = regexp.MustCompile(`#define\s+PJRT_API_(MAJOR|MINOR)\s+(\d+)`)
	enumValueRE = regexp.MustCompile(`^\s*(\w+)\s*(?:=\s*(\w+))?\s*$`)
)

func main() {
	header := flag.String("header", "internal/capi/pjrt_c_api.h", "the PJRT C API header")
	out := flag.String("out", ".", "output directory")
	flag.Parse()
	src, err := os.ReadFile(*header)
	if err != nil {
		log.Fatal(err)
	}
	code := commentRE.ReplaceAllString(string(src), "")
	funcs, err := functions(code)
	if err != nil {
		log.Fatal(err)
	}
	enums, err := enumsOf(code)
	if err != nil {
		log.Fatal(err)
	}
	version := map[string]string{}
	for _, m := range versionRE.FindAllStringSubmatch(code, -1) {
		version[m[1]] = m[2]
	}
	if version["MAJOR"] == "" || version["MINOR"] == "" {
		log.Fatal("capigen: no PJRT_API_MAJOR and PJRT_API_MINOR in the header")
	}
	base := filepath.Base(*header)
	write(filepath.Join(*out, "capi_gen.h"), []byte(genHeader(base, funcs)))
	write(filepath.Join(*out, "capi_gen.c"), []byte(genC(base, funcs)))
	goSrc, err := format.Source([]byte(genGo(base, enums, version["MAJOR"]+"."+version["MINOR"])))
	if err != nil {
		log.Fatal(err)
	}
	write(filepath.Join(*out, "enums_gen.go"), goSrc)
}

func write(path string, data []byte) {
	if err := os.WriteFile(path, data, 0o644); err != nil {
		log.Fatal(err)
	}
}

// functions returns the entries of the PJRT_Api table in order, each with
// its typedef, whose argument struct must be PJRT_<name>_Args with struct
// traits.
func functions(code string) ([]function, error) {
	types := map[string]bool{} // function name -> returns void
	args := map[string]string{}
	for _, m := range typedefRE.FindAllStringSubmatch(code, -1) {
		types[m[2]] = strings.HasPrefix(m[1], "void")
		args[m[2]] = m[3]
	}
	traits := map[string]bool{}
	for _, m := range traitsRE.FindAllStringSubmatch(code, -1) {
		traits[m[1]] = true
	}
	var funcs []function
	seen := map[string]bool{}
	for _, m := range apiFieldRE.FindAllStringSubmatch(code, -1) {
		name := m[1]
		void, ok := types[name]
		if !ok {
			return nil, fmt.Errorf("capigen: %s is in PJRT_Api but has no typedef", name)
		}
		if args[name] != name+"_Args" || !traits[name+"_Args"] {
			return nil, fmt.Errorf("capigen: %s takes %s, want %s_Args with struct traits", name, args[name], name)
		}
		if !seen[name] {
			seen[name] = true
			funcs = append(funcs, function{Name: name, Void: void})
		}
	}
	if len(funcs) < 50 {
		return nil, fmt.Errorf("capigen: only %d functions found in PJRT_Api", len(funcs))
	}
	return funcs, nil
}

// enumsOf returns the header's enums, values numbered as C numbers them.
func enumsOf(code string) ([]enum, error) {
	var out []enum
	for _, m := range enumRE.FindAllStringSubmatch(code, -1) {
		e := enum{Name: m[2], Values: map[int]string{}}
		next := 0
		for _, item := range strings.Split(m[1], ",") {
			if strings.TrimSpace(item) == "" {
				continue
			}
			v := enumValueRE.FindStringSubmatch(item)
			if v == nil {
				return nil, fmt.Errorf("capigen: enum %s: cannot read %q", e.Name, item)
			}
			if v[2] != "" {
				n, err := strconv.ParseInt(v[2], 0, 64)
				if err != nil {
					return nil, fmt.Errorf("capigen: enum %s: value %q of %s", e.Name, v[2], v[1])
				}
				next = int(n)
			}
			if _, dup := e.Values[next]; !dup {
				e.Values[next] = strings.TrimPrefix(v[1], e.Name+"_")
			}
			next++
		}
		out = append(out, e)
	}
	return out, nil
}

const doNotEdit = "Code generated by capigen from %s; DO NOT EDIT."

func genHeader(header string, funcs []function) string {
	var b strings.Builder
	fmt.Fprintf(&b, "// "+doNotEdit+"\n", header)
	b.WriteString(`
// One C function per entry of the PJRT_Api table: xs_<entry>(api, args) sets
// args->struct_size and calls the plugin's entry. When the plugin's table
// (an older API version) lacks the entry, the functions that return a
// PJRT_Error* return a sentinel instead, which xs_missing names; never hand
// it to the plugin (xs_error_free and pluginError know it).
#ifndef XSERVE_PJRT_CAPI_GEN_H_
#define XSERVE_PJRT_CAPI_GEN_H_

#include "pjrt_c_api.h"

// xs_missing returns the name of the entry a sentinel error stands for, or
// NULL when err is a plugin's error (or NULL).
const char* xs_missing(const PJRT_Error* err);

`)
	for _, f := range funcs {
		ret := "PJRT_Error*"
		if f.Void {
			ret = "void"
		}
		fmt.Fprintf(&b, "%s xs_%s(const PJRT_Api* api, %s_Args* args);\n", ret, f.Name, f.Name)
	}
	b.WriteString("\n#endif\n")
	return b.String()
}

func genC(header string, funcs []function) string {
	var b strings.Builder
	fmt.Fprintf(&b, "// "+doNotEdit+"\n", header)
	b.WriteString(`
#include <stddef.h>

#include "capi_gen.h"

#define XS_HAS(api, fn) \
	((api)->struct_size >= offsetof(PJRT_Api, fn) + sizeof((api)->fn) && (api)->fn != NULL)

// xs_names names the entries; the sentinel error of entry i is
// &xs_names[i].
static const char* const xs_names[] = {
`)
	for _, f := range funcs {
		fmt.Fprintf(&b, "\t%q,\n", f.Name)
	}
	b.WriteString(`};

const char* xs_missing(const PJRT_Error* err) {
	const char* const* p = (const char* const*)err;
	if (p < xs_names || p >= xs_names + sizeof xs_names / sizeof xs_names[0]) return NULL;
	return *p;
}
`)
	for i, f := range funcs {
		if f.Void {
			fmt.Fprintf(&b, `
void xs_%[1]s(const PJRT_Api* api, %[1]s_Args* args) {
	if (!XS_HAS(api, %[1]s)) return;
	args->struct_size = %[1]s_Args_STRUCT_SIZE;
	api->%[1]s(args);
}
`, f.Name)
			continue
		}
		fmt.Fprintf(&b, `
PJRT_Error* xs_%[1]s(const PJRT_Api* api, %[1]s_Args* args) {
	if (!XS_HAS(api, %[1]s)) return (PJRT_Error*)&xs_names[%[2]d];
	args->struct_size = %[1]s_Args_STRUCT_SIZE;
	return api->%[1]s(args);
}
`, f.Name, i)
	}
	return b.String()
}

func genGo(header string, enums []enum, version string) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// "+doNotEdit+"\n\npackage pjrt\n\n", header)
	fmt.Fprintf(&b, "// headerAPIVersion is the PJRT C API version of the header the binding is\n// built against.\nconst headerAPIVersion = %q\n\n", version)
	sort.Slice(enums, func(i, j int) bool { return enums[i].Name < enums[j].Name })
	b.WriteString("// enumNames names the values of the header's enums, by enum and value.\nvar enumNames = map[string]map[int]string{\n")
	for _, e := range enums {
		fmt.Fprintf(&b, "\t%q: {", e.Name)
		keys := make([]int, 0, len(e.Values))
		for k := range e.Values {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%d: %q, ", k, e.Values[k])
		}
		b.WriteString("},\n")
	}
	b.WriteString("}\n")
	return b.String()
}
