package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// devicesFlag is --devices: the devices of the client the models whose
// config.yaml names none are placed on, "all" or indexes ("0,2"); unset
// means device 0.
type devicesFlag struct {
	all  bool
	list []int
}

func (f *devicesFlag) String() string {
	if f.all {
		return "all"
	}
	parts := make([]string, len(f.list))
	for i, d := range f.list {
		parts[i] = strconv.Itoa(d)
	}
	return strings.Join(parts, ",")
}

func (f *devicesFlag) Set(s string) error {
	f.all, f.list = false, nil
	if strings.TrimSpace(s) == "all" {
		f.all = true
		return nil
	}
	for part := range strings.SplitSeq(s, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || d < 0 {
			return fmt.Errorf("%q: want all or device indexes, e.g. 0,1", part)
		}
		if slices.Contains(f.list, d) {
			return fmt.Errorf("device %d listed twice", d)
		}
		f.list = append(f.list, d)
	}
	if len(f.list) == 0 {
		return errors.New("want all or device indexes, e.g. 0,1")
	}
	return nil
}

// resolve returns the device indexes for a client with n devices (nil when
// unset); an index the client lacks is an error.
func (f *devicesFlag) resolve(n int, platform string) ([]int, error) {
	if f.all {
		all := make([]int, n)
		for d := range all {
			all[d] = d
		}
		return all, nil
	}
	for _, d := range f.list {
		if d >= n {
			return nil, fmt.Errorf("serve: --devices %s: no device %d (the %s client has %d; --cpu-devices sets how many the CPU plugin makes)", f, d, platform, n)
		}
	}
	return f.list, nil
}
