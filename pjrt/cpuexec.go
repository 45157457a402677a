package pjrt

import (
	"fmt"
	"os"
	"strings"
)

// EnvCPUExecution says how a CPU client runs a program: "inline" (the
// default) or "async".
//
// With "inline" the client is created with the create option
// asynchronous=false, and XLA CPU runs each program on the thread that
// executes it. With "async" it is created without options, as PJRT's own
// default: every execution is handed to the client's thread pool and the
// caller is woken when it is done, two thread hand-offs that cost tinycnn
// (examples/models/tinycnn) about half its 100 µs per call on a 2-core host
// (docs/BENCHMARKS.md, "CPU: inline execution, …"). Programs with their own
// parallelism (XLA's Eigen pool, the CPU kernels' OpenMP team) keep it
// either way; concurrent executions run concurrently either way, each on its
// caller's thread.
//
// Newer XLA CPU plugins read the option in PJRT_Client_Create (the one
// `make pjrt` installs, from lammps-jax-pjrt-cpu 0.11.2, PJRT C API 0.115,
// does); older ones, such as xla-cpu-pjrt 0.0.1 (API 0.81), ignore it and
// stay asynchronous.
const EnvCPUExecution = "XSERVE_CPU_EXECUTION"

// CPU execution modes (Client.CPUExecution).
const (
	CPUExecutionInline = "inline"
	CPUExecutionAsync  = "async"
)

// cpuExecution returns the CPU execution mode $XSERVE_CPU_EXECUTION asks for.
func cpuExecution() (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(EnvCPUExecution))); v {
	case "", CPUExecutionInline, "sync", "synchronous":
		return CPUExecutionInline, nil
	case CPUExecutionAsync, "asynchronous":
		return CPUExecutionAsync, nil
	default:
		return "", fmt.Errorf("%s=%q: want %q or %q", EnvCPUExecution, v, CPUExecutionInline, CPUExecutionAsync)
	}
}

// cpuAsyncOption is the PJRT_Client_Create option "asynchronous" of a CPU
// client run in mode: 0 (false) for inline, -1 (no option: PJRT's default)
// otherwise.
func cpuAsyncOption(mode string) int {
	if mode != CPUExecutionInline {
		return -1
	}
	return 0
}

// CPUExecution returns how this CPU client runs programs, CPUExecutionInline
// or CPUExecutionAsync (see EnvCPUExecution), or "" when the client is not a
// CPU client. "inline" names what was asked of the plugin: a plugin that
// predates the option ignores it.
func (c *Client) CPUExecution() string { return c.cpuExecution }

// RunCounts are the executions of a client's programs through
// Executable.RunHost: all of them, and those the plugin had completed by the
// time its execute call returned, that is, ran on the calling thread.
type RunCounts struct {
	Runs, Inline uint64
}

// RunCounts returns how many of this client's RunHost executions ran inline.
// With CPUExecution "inline" on a plugin that honours it, all do; with
// "async", only programs XLA deems too cheap to hand off (under 1000 flops).
func (c *Client) RunCounts() RunCounts {
	return RunCounts{Runs: c.runs.Load(), Inline: c.inlineRuns.Load()}
}

// Transfers counts the copies between the host and the device a client
// made: of host tensors to the device (Upload, RunHost's host arguments)
// and of device buffers to the host (ToHost, RunHost's outputs). Values
// kept on the device between executions (Executable.Execute) add none.
type Transfers struct {
	ToDevice, ToHost uint64
}

// Transfers returns the client's copies between host and device so far.
func (c *Client) Transfers() Transfers {
	return Transfers{ToDevice: c.toDevice.Load(), ToHost: c.toHost.Load()}
}

func (c *Client) countRun(inline bool) {
	c.runs.Add(1)
	if inline {
		c.inlineRuns.Add(1)
	}
}
