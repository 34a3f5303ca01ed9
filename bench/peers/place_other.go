//go:build !linux

package main

import (
	"errors"
	"os/exec"
	"time"
)

var errNoPlacement = errors.New("CPU pinning and cgroups are only supported on Linux")

func dieWithParent(*exec.Cmd) {}

func newCgroup(string, int) ([]string, func(), error) { return nil, nil, errNoPlacement }

func processCPU(int) (time.Duration, error) { return 0, errNoPlacement }

func cpusBusy([]int) (time.Duration, error) { return 0, errNoPlacement }

func processSyscalls(int) (int64, int64, error) { return 0, 0, errNoPlacement }
